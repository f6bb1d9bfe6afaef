"""Stage 4: write the run's config (only after the user confirmed it), launch training detached, judge its health.

Training never runs in the assistant's process: `launch` starts the engine's recipe as its own session, which
survives the TUI closing; everything after that is read from the run folder (status.json, metrics.jsonl,
train.log). "Done" means the engine's status says completed — never that a launcher returned.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

from assistant.i18n import t, t_message
from assistant.wizard.stages import Outcome, refused
from assistant.wizard.stages.gpu import device_env, env_prefix
from assistant.wizard.stages.model import fetch_error
from assistant.wizard.state import WizardState
from engine.runstatus import RunStatus
from engine.resources import resource_dir

STAGE = "train"
TERMINAL_STATES = ("completed", "failed", "stopped")
Level = Literal["info", "warning", "error"]


@dataclass(frozen=True)
class Hint:
    level: Level
    message: str


def ready_to_write(state: WizardState) -> Outcome:
    """The model must be on disk before a config naming it is written (a download may still be running)."""
    if state.download.get("state") == "running":
        return refused(t("train.wait_download"), code="downloading")
    if state.download.get("state") == "failed":
        return refused(t("train.download_failed", error=fetch_error(state)), code="download_failed")
    return Outcome(state)


def write_config(state: WizardState, config: dict, runs_dir: str | Path | None):
    """Write lf_runs/<run_id>/<stage>.yaml (sft.yaml, dpo.yaml) through the engine, which validates first;
    returns the RunDir."""
    from engine.api import load_config, prepare_run

    _resolved, run = prepare_run(load_config(config), runs_dir=runs_dir, run_id=state.run_id)
    return run


def launch(state: WizardState, run, stage: str = "sft") -> Any:
    """Start training detached, pinned to the chosen device(s); returns the Popen (the TUI only reaps it)."""
    from engine.api import launch_detached

    return launch_detached(run, stage, env=device_env(state.device))


def launch_command(state: WizardState, run_folder: Path, config_file: str = "sft.yaml") -> str:
    """The exact command for running the written config elsewhere (execution: write_only). It trains in the run
    folder the wizard prepared (its id and runs folder named), so the run the wizard tracks is the one that trains
    and no second folder appears beside it."""
    from engine.api import prepared_run_words

    return elsewhere_command(state, *prepared_run_words(run_folder, config_file))


def elsewhere_command(state: WizardState, action: str, *words: str | Path) -> str:
    """`[CUDA_VISIBLE_DEVICES=... ]lf-assistant ACTION ...` as the user types it into a fresh shell: this
    installation's command (the venv's script when it is not on PATH), paths shown short, every word quoted."""
    import shlex

    from assistant.command import self_command

    shown = [display_path(word) if isinstance(word, Path) else str(word) for word in words]
    return f"{env_prefix(state.device)}{self_command()} {shlex.join([action, *shown])}"


def display_path(path: str | Path) -> str:
    """A path relative to the working directory when it lies inside it (shorter in tables and commands); the
    project's own examples as examples/... (where the README names them); anything else as it is, so a path shown
    always means the same file from where the user is (the project's data/ or models/ seen from elsewhere is not
    "data")."""
    path = Path(path).expanduser()
    for base, shown in ((Path.cwd(), Path()), (resource_dir("examples"), Path("examples"))):
        try:
            return str(shown / path.resolve().relative_to(base.resolve()))
        except ValueError:
            continue
    return str(path)


def read_run_config(run_folder: str | Path, config_file: str) -> tuple[dict, list[str]]:
    """(the run's training config as written, []) or ({}, why it cannot be read, in the interface language): a
    hand edit may have left runs/<id>/<config_file> empty, a list or not YAML."""
    from engine.config import read_yaml
    from engine.errors import EngineError

    try:
        return read_yaml(Path(run_folder) / config_file), []
    except EngineError as exc:
        return {}, [t_message(exc.message, str(exc))]


def resume_from_checkpoint(state: WizardState, runs_dir: str | Path | None) -> Any:
    """Continue a failed or stopped run from its newest complete checkpoint, same folder, same device."""
    from engine.api import resume

    return resume(state.run_id, runs_dir=runs_dir, detach=True, env=device_env(state.device))


def newest_checkpoint(status: RunStatus) -> Path | None:
    from engine.rundir import find_complete_checkpoints

    found = find_complete_checkpoints(status.output_dir or "")
    return found[-1] if found else None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def health_hints(metrics: list[dict], status: RunStatus, settings: Mapping[str, Any], *,
                 rows: int | None, last_metric_at: float | None, now: float | None = None) -> list[Hint]:
    """Rule-based hints on a run: NaN loss, loss not falling, loss near zero on a small dataset, a stall."""
    now = now or time.time()
    losses = [m["loss"] for m in metrics if "loss" in m and m.get("loss") is not None]
    hints: list[Hint] = []
    if any(not _finite(loss) for loss in losses):
        hints.append(Hint("error", t("health.nan")))
        return hints
    window = int(settings.get("flat_window", 8))
    if len(losses) >= window:
        first, recent = losses[0], losses[-window // 2:]
        if sum(recent) / len(recent) >= first * (1 - float(settings.get("flat_tolerance", 0.02))):
            hints.append(Hint("warning", t("health.flat", first=first, last=losses[-1])))
    small = rows is not None and rows <= int(settings.get("small_dataset_rows", 500))
    if losses and losses[-1] < float(settings.get("near_zero_loss", 0.05)) and small:
        hints.append(Hint("warning", t("health.near_zero", loss=losses[-1], rows=rows)))
    grad_norms = [m["grad_norm"] for m in metrics if _finite(m.get("grad_norm"))]
    if len(grad_norms) >= 5:
        median = sorted(grad_norms)[len(grad_norms) // 2]
        if median > 0 and grad_norms[-1] > 10 * median:
            hints.append(Hint("warning", t("health.grad_spike", norm=grad_norms[-1], median=median)))
    hints += preference_hints(metrics, settings)

    stall = float(settings.get("stall_s", 300))
    if (status.state == "running" and last_metric_at and now - last_metric_at > stall
            and status.process is not None and status.process.alive() is not False):
        hints.append(Hint("warning", t("health.stalled", minutes=(now - last_metric_at) / 60)))
    return hints


def preference_hints(metrics: list[dict], settings: Mapping[str, Any]) -> list[Hint]:
    """A preference run that is not learning to prefer: reward accuracy stuck at chance (0.5), or a reward
    margin that does not rise. Judged once `reward_window` points are logged (skills/dpo/skill.yaml)."""
    window = int(settings.get("reward_window", 0))
    rows = [m for m in metrics if _finite(m.get("rewards/accuracies")) and _finite(m.get("rewards/margins"))]
    if not window or len(rows) < window:
        return []
    recent = rows[-(window // 2):]
    hints = []
    accuracy = sum(m["rewards/accuracies"] for m in recent) / len(recent)
    if abs(accuracy - 0.5) <= float(settings.get("accuracy_band", 0.05)):
        hints.append(Hint("warning", t("health.accuracy_chance", accuracy=accuracy)))
    margin = sum(m["rewards/margins"] for m in recent) / len(recent)
    first = rows[0]["rewards/margins"]
    if margin - first < float(settings.get("margin_rise", 0.01)):
        hints.append(Hint("warning", t("health.margin_flat", first=first, last=rows[-1]["rewards/margins"])))
    return hints


def finished(state: WizardState, status: RunStatus) -> Outcome:
    """Leave the stage only once the engine recorded completion."""
    if status.state != "completed":
        return refused(t("train.not_completed", state=t(f"run.{status.state}") if status.state else "-"))
    return Outcome(state.replace(output_dir=status.output_dir or state.output_dir))
