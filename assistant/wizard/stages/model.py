"""Stage 2: the model — recommend one, resolve its family, template and example config, check the local copy.

A model that is not on this machine is fetched in the background (a hub download, or a local build for the
embedded demo model) while the user goes on; `fetch_plan` says which, `fetch_finished` records the result.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from assistant.i18n import t, t_message, t_or
from assistant.wizard.skill import Skill
from assistant.wizard.stages import Outcome, refused
from assistant.wizard.state import WizardState
from engine.errors import EngineError, ModelError

STAGE = "model"
FetchKind = Literal["none", "download", "build"]


@dataclass(frozen=True)
class FetchPlan:
    """What must happen before the model can be used: nothing, a download, or building the demo model."""

    kind: FetchKind
    target: Path | None = None
    repo_id: str | None = None



def rule_words(rule: str | None) -> str:
    """Where the template came from (engine.models.resolve's rule names) in the interface language."""
    return t_or(f"rule.{rule}", rule) if rule else "-"

def is_offline() -> bool:
    from engine.models.download import is_offline as offline

    return offline()


def recommended_model(skill: Skill, *, offline: bool | None = None, available=None) -> str:
    """The real model when it can be obtained (`available`: its engine.models.availability answer), else the
    built-in demo model (built offline in seconds). `offline=True` means the demo model whatever else."""
    settings = skill.stage(STAGE).settings
    if offline or (available is not None and not available.obtainable):
        return settings["default_offline"]
    if available is None and offline is None:
        return settings["default_offline"]  # not known yet: the fallback until the check answers
    return settings["default_online"]


def check_availability(skill: Skill, *, probe_network: bool, timeout_s: float = 5.0):
    """engine.models.availability for the skill's real model (cached copies first; hubs and the package index
    only with probe_network). Never raises: a failed check is an Availability that says why."""
    from engine.models.availability import Availability, availability

    model_id = skill.stage(STAGE).settings["default_online"]
    try:
        return availability(model_id, models_dir=models_dir(skill), probe_network=probe_network,
                            timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 - the demo model stands in; the reason is shown
        return Availability(model_id, False, "none", detail=str(exc))


def fetch_source(chosen: str, available) -> str:
    """The download source to use: the user's choice, or for `auto` the one the availability check found."""
    if chosen != "auto" or available is None or not available.obtainable:
        return chosen
    return available.source or "auto"


def models_dir(skill: Skill) -> Path:
    return Path(skill.stage(STAGE).settings.get("models_dir", "models")).resolve()


def _looks_like_path(text: str) -> bool:
    return text.startswith((".", "/", "~")) or text.count("/") > 1 or "\\" in text


def example_for(skill: Skill, family: str, method: str) -> tuple[Path, str | None]:
    """The example config a run starts from, and a note when it was adapted from another family or method.

    A skill may declare its own examples (preference training: `examples` and `fallback_example` in the model
    stage's settings); otherwise the engine's registry gives the family's SFT example for the method."""
    settings = skill.stage(STAGE).settings
    if "examples" in settings:
        return _skill_example(settings, family, method)
    from engine.models.registry import FAMILIES, nearest_example_message

    if family not in FAMILIES:  # a custom model with a user-given template: the most common layout stands in
        path, _ = nearest_example_message("qwen3", method)
        return path, t("model.example_custom", example=path.name)
    path, note = nearest_example_message(family, method)
    return path, t_message(note) if note else None


def _skill_example(settings: dict, family: str, method: str) -> tuple[Path, str | None]:
    from engine.models.registry import EXAMPLES_DIR, FAMILIES

    own = settings["examples"].get(family)
    path = EXAMPLES_DIR / (own or settings["fallback_example"])
    if not path.is_file():
        raise ModelError(t("model.example_missing", path=str(path)))
    notes = []
    if not own:
        name = FAMILIES[family].display if family in FAMILIES else family
        notes.append(t("model.example_adapted", example=path.name, family=name))
    if method != "lora":
        notes.append(t("model.example_method", example=path.name, method=method))
    return path, " ".join(notes) or None


def warning_words(resolution) -> list[str]:
    """The resolution's warnings in the interface language (the engine's English where one has no code)."""
    coded = resolution.warning_messages if len(resolution.warning_messages) == len(resolution.warnings) else []
    return [t_message(message) for message in coded] if coded else list(resolution.warnings)


def resolve(state: WizardState, skill: Skill, text: str, *, template: str | None = None) -> Outcome:
    """Resolve what the user typed; refusals carry code "unsupported" (offer another model or a template),
    "missing_path" (no such folder, or a file) or "no_example"."""
    text = (text or "").strip()
    if not text:
        return refused(t("model.empty"))
    if _looks_like_path(text) and not Path(text).expanduser().exists():
        return refused(t("model.missing_path", path=text), code="missing_path")
    if Path(text).expanduser().is_file():
        return refused(t("model.file_path", path=text), code="missing_path")
    from engine.models.resolve import resolve_model

    try:
        resolution = resolve_model(text, template=template or None)
    except EngineError as exc:
        return refused(t_message(exc.message, str(exc)), code="unsupported")
    try:
        example, note = example_for(skill, resolution.family, state.method or "lora")
    except EngineError as exc:
        return refused(t_message(exc.message, str(exc)), code="no_example")
    local = resolution.local_path if resolution.local_complete else None
    new = state.replace(model=text, family=resolution.family, template=resolution.template,
                        template_rule=resolution.rule, example=str(example), example_note=note,
                        model_path=str(Path(local).resolve()) if local else None, download={},
                        suggestions={} if str(example) != state.example else state.suggestions)
    notes = warning_words(resolution) + ([note] if note else [])
    if local and resolution.local_where == "recorded":  # not under ./models: say where it came from
        from engine.models.recorded import index_path

        notes.append(t("model.found_recorded", path=str(local), index=str(index_path())))
    return Outcome(new, notes=notes)


def fetch_plan(state: WizardState, skill: Skill) -> FetchPlan:
    """Nothing when a complete local copy exists; a demo build for the demo models; a download otherwise."""
    if state.model_path:
        return FetchPlan("none")
    from engine.models.registry import find_model

    entry = find_model(state.model or "")
    if entry is not None and entry.family == "demo":
        return FetchPlan("build", models_dir(skill) / entry.id, entry.id)
    name = (entry.name if entry else (state.model or "model").split("/")[-1])
    return FetchPlan("download", models_dir(skill) / name, entry.id if entry else state.model)


def build_command(name: str, target: Path) -> list[str]:
    """The demo build as its own process (it imports torch; the TUI never does). Arguments, not a shell string."""
    code = "import sys; from engine.models.demo import build_demo_model; print(build_demo_model(sys.argv[1], sys.argv[2]))"
    return [sys.executable, "-c", code, name, str(target)]


def fetch_finished(state: WizardState, target: Path, *, ok: bool, error: str | None = None,
                   error_message: dict | None = None) -> WizardState:
    """Record the end of a download or build: the folder becomes the model path when it is complete. The error is
    kept in the engine's words and, where it has one, as its code with values (``error_message``)."""
    download = dict(state.download, target=str(target), state="done" if ok else "failed", error=error,
                    error_message=error_message)
    if not ok:
        return state.replace(download=download)
    return state.replace(download=download, model_path=str(Path(target).resolve()))


def fetch_error(state: WizardState) -> str:
    """Why the download failed, in the interface language where the engine gave a code."""
    return t_message(state.download.get("error_message"), state.download.get("error") or "-")


def confirm(state: WizardState) -> Outcome:
    """Leave the stage: the model must be resolved; a running download may continue in the background."""
    if not state.model or not state.template:
        return refused(t("model.not_resolved"))
    if not state.model_path and state.download.get("state") != "running":
        return refused(t("model.not_local"))
    return Outcome(state)
