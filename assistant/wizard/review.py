"""The runs review: every run in the runs folder, one run's record, and two runs compared.

Everything is read from the run folders (status.json, metrics.jsonl, sft.yaml, state.json, validation.jsonl),
so runs started from the CLI appear too, with what they have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from assistant.wizard.state import STATE_FILE, WizardState, load_state
from engine.runstatus import RunStatus


@dataclass
class RunRow:
    run_id: str
    model: str
    method: str
    state: str
    steps: str
    final_loss: str
    date: str
    path: Path
    stage: str | None = None
    """The wizard stage a session that has not trained yet was left at (None for a run that trained or was
    started without the wizard)."""
    resumable: bool = False
    """A wizard session (it has a state.json): the wizard can reopen it where it was left."""


@dataclass
class RunRecord:
    """One run in full: its config, the diff vs. the example, the loss curve, answers and export folder."""

    run_id: str
    path: Path
    status: RunStatus
    config: dict
    diff: list[dict]
    losses: list[tuple[int, float]]
    answers: list[dict]
    export_dir: str | None
    loss_plot: str | None
    wizard: WizardState | None = None
    notes: list[str] = field(default_factory=list)


def _date(value: Any) -> str:
    return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M") if value else "-"


def _wizard_state(folder: Path) -> WizardState | None:
    if not (folder / STATE_FILE).exists():
        return None
    try:
        return load_state(folder)
    except Exception:  # noqa: BLE001 - a damaged state.json must not hide the run from the list
        return None


def list_runs(runs_dir: str | Path | None = None) -> list[RunRow]:
    """One row per run, newest first; a run still in the wizard shows the stage it is at."""
    from engine.rundir import iter_runs

    rows = []
    for run in iter_runs(runs_dir):
        summary = run.summary()
        wizard = _wizard_state(run.path)
        state = summary["state"]
        # A session that never trained has no status of its own (or a prepared one that never ran): it reads as
        # the stage it was left at, not as a pending run.
        stage = wizard.stage if wizard is not None and not wizard.launched and run.read_status().never_started \
            else None
        if stage is not None:
            state = f"wizard: {stage}"
        total = summary.get("total_steps")
        steps = f"{summary.get('step') or 0}/{total}" if total else str(summary.get("step") or 0)
        loss = f"{summary['final_loss']:.4f}" if summary.get("final_loss") is not None else "-"
        model = summary.get("model") or (wizard.model if wizard else None) or "-"
        method = summary.get("method") or (wizard.method if wizard else None) or "-"
        started = summary.get("started_at") or (wizard.created_at if wizard else None)
        rows.append(RunRow(run.run_id, Path(str(model)).name, method, state, "-" if stage else steps, loss,
                           _date(started), run.path, stage, wizard is not None))
    return rows


def load_record(folder: Path) -> RunRecord:
    """Everything the review shows about one run."""
    from engine.config import read_yaml
    from engine.errors import EngineError
    from engine.rundir import RunDir, read_jsonl

    run = RunDir(Path(folder))
    status = run.read_status()
    wizard = _wizard_state(run.path)
    config: dict = {}
    config_path = run.path / f"{status.stage or 'sft'}.yaml"
    if config_path.is_file():
        try:
            config = read_yaml(config_path)
        except EngineError:
            config = {}
    losses = [(int(m["step"]), float(m["loss"])) for m in run.read_metrics()
              if m.get("loss") is not None and m.get("step") is not None]
    export_dir = wizard.export_dir if wizard and wizard.exported else None
    return RunRecord(run.run_id, run.path, status, config, list(wizard.diff) if wizard else [], losses,
                     read_jsonl(run.path / "validation.jsonl"), export_dir, status.loss_plot, wizard)


def config_difference(first: dict, second: dict) -> list[tuple[str, Any, Any]]:
    """(key, value in first, value in second) for every key whose values differ, in the first's key order."""
    keys = list(first) + [k for k in second if k not in first]
    return [(key, first.get(key), second.get(key)) for key in keys if first.get(key) != second.get(key)]
