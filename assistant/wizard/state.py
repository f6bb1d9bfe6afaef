"""What the user decided, stage by stage: `WizardState`, saved as `lf_runs/<run_id>/state.json` after every answer.

The state is plain data (strings, numbers, lists, dicts) so that it round-trips through JSON unchanged and a run
can be reopened with `lf-assistant --resume RUN_ID` at the stage where the user left, with the same answers.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.jsonio import fits_annotation, kind_words, read_record
from engine.rundir import new_run_id, runs_root, write_json_atomic

STATE_FILE = "state.json"
STATE_VERSION = 1
# The run id before a model is chosen (wizard_run_<stamp>); it is renamed to <model>_<method>_<stamp> once the
# model is known (<method>-<workflow> for preference training: lora-dpo, full-simpo).
DRAFT_PREFIX = "wizard"
DRAFT_KIND = "run"


@dataclass
class WizardState:
    """Every answer of the guided flow. Field names are also the answer keys the skill's guards read."""

    run_id: str
    stage: str = "flow"
    """The stage the user is on (where --resume reopens)."""
    done: list[str] = field(default_factory=list)
    """Stages completed, in the order they were completed."""
    lang: str | None = None

    # stage 0: flow
    workflow: str | None = None
    """sft | dpo | orpo | simpo: supervised answers, or preference pairs (the skill that runs is derived)."""
    scope: str | None = None
    """sft (data, model, config, train) | full (also validation and export)."""
    execution: str | None = None
    """run_here (the assistant launches and watches) | write_only (configs and commands for elsewhere)."""
    method: str | None = None
    """lora | full | qlora | freeze."""

    # stage 1: data
    data_source: str | None = None
    dataset_dir: str | None = None
    """Folder holding dataset_info.json (absolute)."""
    datasets: list[str] = field(default_factory=list)
    """Registered dataset names to train on, in order."""
    dataset_rows: dict[str, int] = field(default_factory=dict)
    """Row count of each chosen dataset (for the small-dataset check)."""
    dataset_chars: dict[str, float] = field(default_factory=dict)
    """Mean characters per row of each chosen dataset (for the run-time estimate)."""
    onboarded: list[dict] = field(default_factory=list)
    """Custom files brought in: {source, name, file, converted} (the source is never modified)."""
    filled: dict[str, dict] = field(default_factory=dict)
    """Templated datasets filled in: new name -> {from, values}."""

    # stage 2: model
    model: str | None = None
    """What the user typed: a hub id, a registry name or a local folder."""
    model_path: str | None = None
    """The local folder used for training (absolute), once it exists and is complete."""
    family: str | None = None
    template: str | None = None
    template_rule: str | None = None
    example: str | None = None
    """The official example YAML the config starts from."""
    example_note: str | None = None
    model_source: str | None = None
    download: dict = field(default_factory=dict)
    """{target, source, state: running|done|failed, error} of a background download or demo build."""

    # stage 2.5: device
    device: dict | None = None
    """{platform, indices, mode, reason}: chosen once, reused for training, validation and export."""
    gpu_mode: str | None = None
    busy_action: str | None = None

    # stage 3: config
    edits: dict[str, Any] = field(default_factory=dict)
    """Values the user set by hand (reason "user-specified" in the diff)."""
    suggestions: dict[str, Any] = field(default_factory=dict)
    """Values the user accepted from the small-dataset advice (reason given in the diff)."""
    mixed_in: list[str] = field(default_factory=list)
    """Datasets that advice mixed in (not chosen in stage 1): the diff and validation name them."""
    diff: list[dict] = field(default_factory=list)
    """The diff vs. the example, as confirmed: rows {parameter, default, new, reason}."""
    measured: dict = field(default_factory=dict)
    """The last pre-flight: {key (the config it measured), result (engine.measurement.Measurement as a dict)}."""
    fit: dict = field(default_factory=dict)
    """The pre-flight's proposal in use when the configured micro-batch did not fit:
    {per_device_train_batch_size, gradient_accumulation_steps, reason}."""

    # stage 4: train
    launched: bool = False
    output_dir: str | None = None

    # stage 6: validate
    prompts: list[str] = field(default_factory=list)
    infer_config: dict | None = None
    validated: bool = False

    # stage 7: export
    export_dir: str | None = None
    export_config: dict | None = None
    exported: bool = False

    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    version: int = STATE_VERSION

    def answers(self) -> dict[str, Any]:
        """The answers the skill's `when` guards read."""
        return {"workflow": self.workflow, "scope": self.scope, "execution": self.execution, "method": self.method}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = STATE_FILE) -> WizardState:
        """Rebuild a state; keys from a newer version are dropped rather than failing the resume. The data was read
        from disk: an answer of another type than the field's (a list where text belongs) is refused, naming it."""
        if not isinstance(data, dict) or not isinstance(data.get("run_id"), str):
            raise ConfigError(f"{source} is not a wizard state (no run_id). Start a new run instead.")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        for name, value in values.items():
            annotation = str(fields[name].type)
            if not fits_annotation(value, annotation):
                raise ConfigError(f"{source}: the answer {name!r} must be {_words(annotation)}, not "
                                  f"{_found(value, annotation)}; the file is damaged. Start a new run (the old folder "
                                  "is left as it is).")
        return cls(**values)

    def replace(self, **changes: Any) -> WizardState:
        return dataclasses.replace(self, **changes)


def _words(annotation: str) -> str:
    """An annotation in words: "list[str] | None" -> "a list of text items or null"."""
    words = {"str": "text", "bool": "true or false", "int": "a whole number", "float": "a number", "None": "null",
             "dict": "an object", "list": "a list", "Any": "any value"}
    said = []
    for option in (part.strip() for part in annotation.split("|")):
        outer, _, inner = option.partition("[")
        item = inner[:-1].split(",", 1)[-1].strip()
        item_words = _words(item).removeprefix("a ").removeprefix("an ") if item else ""
        if outer == "list" and item:
            said.append(f"a list of {item_words} items")
        elif outer == "dict" and item and item != "Any":
            said.append(f"an object of {item_words} values")
        else:
            said.append(words.get(outer, outer))
    return " or ".join(said)


def _found(value: Any, annotation: str) -> str:
    """What a value that did not fit is, in words: "text", or "a list holding a number" when only its items are off."""
    outer_fits = fits_annotation(value, re.sub(r"\[.*?\]+", "", annotation))
    items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else []
    if not outer_fits or not items:
        return kind_words(value)
    item_type = annotation.partition("[")[2].split("]")[0].split(",", 1)[-1].strip()
    odd = next((item for item in items if not fits_annotation(item, item_type)), items[0])
    return f"{kind_words(value)} holding {kind_words(odd)}"


def new_state(*, lang: str | None = None, now: datetime | None = None,
              runs_dir: str | Path | None = None) -> WizardState:
    """A fresh state with a draft run id (renamed once the model is known). With `runs_dir`, the stamp moves
    on by a second while a folder of that id exists, so two runs started together never share a folder."""
    from datetime import timedelta

    when = now or datetime.now()
    run_id = new_run_id(DRAFT_PREFIX, DRAFT_KIND, when=when)
    while runs_dir is not None and (runs_root(runs_dir) / run_id).exists():
        when += timedelta(seconds=1)
        run_id = new_run_id(DRAFT_PREFIX, DRAFT_KIND, when=when)
    return WizardState(run_id=run_id, lang=lang)


def run_path(state: WizardState, runs_dir: str | Path | None = None) -> Path:
    return runs_root(runs_dir) / state.run_id


def save_state(state: WizardState, runs_dir: str | Path | None = None) -> Path:
    """Write state.json atomically into the run folder (created on first save)."""
    state.updated_at = time.time()
    path = run_path(state, runs_dir) / STATE_FILE
    write_json_atomic(path, state.to_dict())
    return path


def load_state(run_folder: str | Path) -> WizardState:
    """The state saved in a run folder; ConfigError when missing or unreadable."""
    path = Path(run_folder) / STATE_FILE
    data = read_record(path, {}, fix="Start a new run; the old folder is left as it is.", error=ConfigError)
    if data is None:
        raise ConfigError(f"{path} does not exist: the run was not started from the guided assistant, so there "
                          "is nothing to resume there. Use `lf-assistant resume-train RUN_ID` for a plain run.")
    state = WizardState.from_dict(data, str(path))
    # The file is read from disk: its run id must be its own folder's (everything the wizard writes goes to
    # runs/<run_id>, so another id would write into another run, or outside the runs folder).
    folder = Path(run_folder).resolve().name  # `--resume .` or a link name the folder too
    if state.run_id != folder:
        raise ConfigError(f"{path} names run {str(state.run_id)[:80]!r}, not its own folder {folder!r} (was the "
                          "folder copied or renamed?). Resume the run it names, or start a new one; nothing was "
                          "changed.")
    if state.device is not None:
        from assistant.wizard.stages.gpu import device_env

        device_env(state.device)  # ConfigError for a device this wizard never chose
    return state


def stamp_of(run_id: str) -> datetime | None:
    """The creation time encoded at the end of a run id (…_YYYYMMDD_HHMMSS)."""
    try:
        return datetime.strptime("_".join(run_id.rsplit("_", 2)[-2:]), "%Y%m%d_%H%M%S")
    except ValueError:
        return None


def rename_for_model(state: WizardState, runs_dir: str | Path | None = None) -> WizardState:
    """Give the run its id <model>_<method>_<stamp> (the draft's stamp kept), moving the folder; again after the
    user went back and chose another model or method.

    Only while nothing but the wizard's own files is in the folder: once a config was written (status.json) or
    training started, the id is fixed.
    """
    stamp = stamp_of(state.run_id)
    if not state.model or stamp is None:
        return state
    model_name = state.model_path or state.model
    kind = state.method or "lora"
    if state.workflow not in (None, "sft"):
        kind = f"{kind}-{state.workflow}"
    new_id = new_run_id(model_name, kind, when=stamp)
    old_folder, new_folder = run_path(state, runs_dir), runs_root(runs_dir) / new_id
    if new_id == state.run_id or new_folder.exists() or (old_folder / "status.json").exists():
        return state
    renamed = state.replace(run_id=new_id)
    if old_folder.exists():
        if (old_folder / STATE_FILE).exists():  # the id moves with its folder, so a crash between leaves no mismatch
            write_json_atomic(old_folder / STATE_FILE, renamed.to_dict())
        old_folder.rename(new_folder)
    return renamed
