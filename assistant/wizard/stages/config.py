"""Stage 3: the training parameters — edits in place, and the small-dataset check with a concrete fix.

Every parameter, its help text and its choices come from `engine.config.train.TrainConfig`'s field metadata, so
the table and the edit dialog never restate an option.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from assistant.i18n import t, t_message, t_or
from assistant.wizard.build import BuiltConfig
from assistant.wizard.skill import Skill
from assistant.wizard.stages import Outcome, refused
from assistant.wizard.state import WizardState

STAGE = "config"
# Keys the wizard owns through earlier stages; editing them here would bypass their checks.
OWNED_BY_STAGES: dict[str, str] = {"dataset": "data", "dataset_dir": "data", "model_name_or_path": "model",
                                   "stage": "flow", "do_train": "flow", "pref_loss": "flow"}


@dataclass(frozen=True)
class ParamInfo:
    name: str
    help: str
    section: str
    choices: tuple | None
    is_bool: bool = False
    multi: str | None = None
    """"names" or "numbers" for a key that takes a comma-separated list (see engine.config.fields.opt)."""
    alone: tuple[str, ...] = ()
    """The names of a list given without other names (all, none)."""


def params() -> dict[str, ParamInfo]:
    """Every editable training parameter with its help, section and choices, in declaration order."""
    from engine.config.train import TrainConfig

    out = {}
    for f in dataclasses.fields(TrainConfig):
        if f.metadata.get("internal"):
            continue
        is_bool = str(f.type) in ("bool", "<class 'bool'>")
        choices = f.metadata.get("choices") or ((True, False) if is_bool else None)
        out[f.name] = ParamInfo(f.name, t_or(f"param.{f.name}", f.metadata.get("help", "")),
                                f.metadata.get("section", "train"), choices, is_bool, f.metadata.get("multi"),
                                f.metadata.get("alone", ()))
    return out


def reads_names(key: str) -> bool:
    """Whether the names ``key`` may take are read (the model's modules, the registered datasets) rather than
    declared; name_choices then takes a moment."""
    from engine.config.model_check import MODULE_KEYS

    return key in MODULE_KEYS or key == "eval_dataset"


def name_choices(key: str, config: dict[str, Any], registered: list[str]) -> tuple[str, ...] | None:
    """The names a key that takes several may be given, for a pick of several in the edit dialog: its declared
    choices, the model's modules (the module keys; may build the model on the meta device, so off the event loop)
    or the registered datasets (eval_dataset); with the names it takes alone first. None when the key takes one
    value, or no list can be told (a hub model not here yet): the value is typed."""
    info = params().get(key)
    if info is None or info.multi != "names":
        return None
    if info.choices:
        names = [str(choice) for choice in info.choices]
    elif key == "eval_dataset":
        names = list(registered)
    elif reads_names(key):
        from engine.config.model_check import module_names

        names = module_names(config.get("model_name_or_path"), key, str(config.get("stage") or "sft")) or []
    else:  # adapter folders, FSDP words: typed
        return None
    if not names:
        return None
    return tuple(dict.fromkeys([*(name for name in info.alone if name not in names), *names]))


def parse_value(raw: str) -> Any:
    """What the user typed, read as YAML (numbers, true/false, null, a [list] for keys that take several names);
    empty means unset (None)."""
    text = (raw or "").strip()
    if not text:
        return None
    from engine.errors import ConfigError
    from engine.readers import load_yaml_text

    try:  # within the config file's limits: a typed value is no more trusted than a file
        value = load_yaml_text(text, "the value")
    except ConfigError:
        return text
    return text if isinstance(value, dict) else value


def build_config(state: WizardState, skill: Skill) -> tuple[BuiltConfig | None, list[str]]:
    """(the config this state builds, []) or (None, why it cannot be built, in the interface language): an example
    that is not a mapping of keys to values, an edit under a key that is not one (a state saved by hand)."""
    from assistant.wizard.build import build_train_config
    from engine.errors import EngineError

    try:
        return build_train_config(state, skill), []
    except EngineError as exc:
        return None, [t_message(exc.message, str(exc))]


def apply_edit(state: WizardState, key: str, raw: str) -> Outcome:
    """Set one parameter by hand (reason "user-specified"); the engine's own type check decides."""
    info = params().get(key)
    if info is None:
        import difflib

        near = difflib.get_close_matches(key, list(params()), n=1)
        return refused(t("config.unknown_param", key=key, hint=near[0] if near else "-"))
    if key in OWNED_BY_STAGES:
        return refused(t("config.owned", key=key, stage=t(f"stage.{OWNED_BY_STAGES[key]}.title")))
    value = parse_value(raw)
    from engine.api import load_config
    from engine.errors import EngineError

    try:
        config = load_config({key: value})
    except EngineError as exc:
        return refused(t_message(exc.message, str(exc)))
    typed = getattr(config, key)
    # the engine's own rule for the field's choices and range (several names each checked: report_to a,b)
    from engine.config.fields import alone_message, choice_problem, range_message

    field_ = next(f for f in dataclasses.fields(config) if f.name == key)
    if choice_problem(field_, typed):
        choices = ", ".join(map(str, field_.metadata["choices"]))
        return refused(t("config.bad_choice", key=key, value=typed, choices=choices))
    problem = alone_message(field_, typed) or range_message(field_, typed)
    if problem:
        return refused(t_message(problem))
    edits = dict(state.edits, **{key: typed})
    return Outcome(state.replace(edits=edits))


def clear_edit(state: WizardState, key: str) -> WizardState:
    """Undo a hand edit (and an accepted suggestion) of one parameter."""
    return state.replace(edits={k: v for k, v in state.edits.items() if k != key},
                         suggestions={k: v for k, v in state.suggestions.items() if k != key})


@dataclass
class Advice:
    """Why the step count is a problem, and the changes that fix it."""

    problems: list[str]
    suggestions: dict[str, Any] = field(default_factory=dict)
    mix_dataset: str | None = None


def small_data_advice(built: BuiltConfig, state: WizardState, skill: Skill, available: list[str]) -> Advice | None:
    """None when the run gives enough steps and loss points; else what is wrong and a proposed fix:
    mix in a general dataset, moderate epochs, and a logging interval that yields several points."""
    steps = built.total_steps
    if steps is None:
        return None
    settings = skill.stage(STAGE).settings
    few, points, moderate = settings["few_steps"], settings["min_loss_points"], settings["moderate_epochs"]
    config = built.config
    problems, suggestions = [], {}
    logging_steps = config["logging_steps"]
    if steps < few:
        problems.append(t("config.few_steps", steps=steps, rows=built.rows, few=few))
        epochs = config["num_train_epochs"]
        per_epoch = max(1, steps / max(epochs, 1e-9))
        wanted = min(moderate, max(epochs, math.ceil(few / per_epoch)))
        if wanted > epochs:
            suggestions["num_train_epochs"] = float(wanted)
            steps = math.ceil(per_epoch * wanted)
    if logging_steps >= steps or steps // logging_steps < points:
        problems.append(t("config.few_points", logging_steps=logging_steps, steps=built.total_steps, points=points))
    if not problems:
        return None
    new_logging = max(1, steps // points)
    if new_logging < logging_steps:
        suggestions["logging_steps"] = new_logging
    mix = next((name for name in settings.get("general_datasets", [])
                if name in available and name not in state.datasets), None)
    if built.total_steps < few and mix:
        problems.append(t("config.mix_hint", dataset=mix))
    else:
        mix = None
    return Advice(problems, suggestions, mix)


def accept_advice(state: WizardState, advice: Advice, *, mix_rows: int | None = None) -> WizardState:
    """Take the proposed changes; they appear in the diff with the small-dataset reason."""
    new = state.replace(suggestions=dict(state.suggestions, **advice.suggestions))
    if advice.mix_dataset and advice.mix_dataset not in new.datasets:
        rows = dict(new.dataset_rows)
        if mix_rows is not None:
            rows[advice.mix_dataset] = mix_rows
        new = new.replace(datasets=[*new.datasets, advice.mix_dataset], dataset_rows=rows,
                          mixed_in=[*new.mixed_in, advice.mix_dataset])
    return new


def confirm(state: WizardState, built: BuiltConfig) -> Outcome:
    """Leave the stage with the diff recorded (the runs review shows it later)."""
    from engine.api import load_config, validate

    problems = [p for p in validate(load_config(built.config)) if not _download_pending(state, p)]
    if problems:
        return refused(*problems)
    return Outcome(state.replace(diff=[row.to_dict() for row in built.diff]))


def _download_pending(state: WizardState, problem: str) -> bool:
    """A model still downloading fails the folder check now; training waits for it instead."""
    return state.download.get("state") == "running" and "model_name_or_path" in problem
