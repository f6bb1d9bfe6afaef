"""Where `lf-assistant --resume RUN_ID` reopens: the stage the user left, judged against the run's real state.

- training still running: the live view, reattached (nothing is relaunched);
- training died or was stopped: the training stage, offering to continue from the newest complete checkpoint;
- training finished: the first stage after it that is not done (loss, validation, export, summary);
- not launched yet: the stage saved in state.json, with every answer as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from assistant.wizard.skill import Skill
from assistant.wizard.state import WizardState, load_state
from engine.runstatus import RunStatus

Action = Literal["continue", "reattach", "offer_resume", "after_training"]


@dataclass
class ResumePlan:
    state: WizardState
    stage: str
    action: Action
    status: RunStatus | None


def plan_resume(run_folder: Path, skill: Skill) -> ResumePlan:
    """The state to restore and the stage to open, from state.json and status.json."""
    from engine.rundir import RunDir

    state = load_state(run_folder)
    status = RunDir(Path(run_folder)).read_status() if (Path(run_folder) / "status.json").exists() else None
    if not state.launched:
        return ResumePlan(state, state.stage, "continue", status)
    run_state = status.state if status else None
    if run_state in ("running", "pending"):
        return ResumePlan(state.replace(stage="train"), "train", "reattach", status)
    if run_state in ("failed", "stopped"):
        return ResumePlan(state.replace(stage="train"), "train", "offer_resume", status)
    done = list(state.done)
    if "train" not in done:
        done.append("train")
    stage = state.stage
    if stage == "train" or stage in done:
        stage = _first_open_after(skill, "train", done, state) or "summary"
    new = state.replace(done=done, stage=stage, output_dir=status.output_dir or state.output_dir)
    return ResumePlan(new, stage, "after_training", status)


def _first_open_after(skill: Skill, stage_id: str, done: list[str], state: WizardState) -> str | None:
    current = skill.next_stage(stage_id, state.answers())
    while current is not None and current in done:
        current = skill.next_stage(current, state.answers())
    return current


def latest_unfinished(runs_dir: str | Path | None = None) -> str | None:
    """The run id of the newest wizard session that has not reached its summary (by its last save), or None.

    A browser page opens a new wizard process each time; this is how reopening the page continues the session
    it showed. Folders whose state.json cannot be read are passed over, never changed."""
    from engine.errors import ConfigError
    from engine.rundir import iter_runs

    best: tuple[float, str] | None = None
    for run in iter_runs(runs_dir):
        if not (run.path / "state.json").is_file():
            continue
        try:
            state = load_state(run.path)
        except ConfigError:
            continue
        if state.stage == "summary":
            continue
        saved = state.updated_at if isinstance(state.updated_at, (int, float)) else 0.0
        if best is None or saved > best[0]:
            best = (saved, run.run_id)
    return best[1] if best else None
