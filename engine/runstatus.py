"""The typed run status: ``status.json``'s one schema, its one reader, and how liveness is judged.

Only two parties write ``status.json``: the launcher (``engine.api``: pending, the process it started) and the
training process (running, progress, the end). Everyone else reads it through :func:`read_status`, which works
out liveness in memory: a status that says "running" whose process is provably gone is *reported* as failed, and
nothing is written back. A process is identified by pid, start time and host together, so a reused pid is never
taken for the trainer, and nothing is ever signalled on the strength of a pid alone.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.messages import Message

from engine.jsonio import fits_annotation

STAGES = ("sft", "pt", "rm", "dpo", "kto")
"""The training stages a run can be (each has a recipe, engine.recipes); a status naming another is not read."""


class RunState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({RunState.COMPLETED, RunState.FAILED, RunState.STOPPED})
LIVE_STATES = frozenset({RunState.PENDING, RunState.RUNNING})

DEAD_PROCESS_REASON = ("the training process exited without recording an end (killed, out of memory, or the "
                       "machine restarted)")


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None when there is no such process."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError, OverflowError):
        return None


@dataclass(frozen=True)
class ProcessIdentity:
    """Which process runs a training: pid, its start time and the host. A pid alone can be reused."""

    pid: int
    start_time: float
    host: str

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        started = process_start_time(pid) if isinstance(pid, int) and pid > 1 else None
        return None if started is None else cls(pid=pid, start_time=started, host=socket.gethostname())

    @classmethod
    def current(cls) -> ProcessIdentity:
        identity = cls.of(os.getpid())
        assert identity is not None
        return identity

    @property
    def on_this_host(self) -> bool:
        return self.host == socket.gethostname()

    def alive(self) -> bool | None:
        """True when this exact process still runs, False when it provably does not, None when it runs on another
        host (it cannot be checked from here)."""
        if not self.on_this_host:
            return None
        if not isinstance(self.pid, int) or self.pid <= 1:
            return False
        import psutil

        try:
            process = psutil.Process(self.pid)
            if abs(process.create_time() - self.start_time) > 0.05:
                return False  # the pid was reused by another process
            return process.status() != psutil.STATUS_ZOMBIE
        except (psutil.Error, ValueError, OverflowError):
            return False

    @classmethod
    def from_json(cls, data: Any) -> ProcessIdentity | None:
        if not isinstance(data, dict):
            return None
        try:
            pid, start, host = data["pid"], float(data["start_time"]), str(data["host"])
        except (KeyError, TypeError, ValueError):
            return None
        if not isinstance(pid, int) or isinstance(pid, bool) or not math.isfinite(start):
            return None
        return cls(pid=pid, start_time=start, host=host)


@dataclass(frozen=True)
class Resumed:
    """One resume of a run from a checkpoint, and how far the interrupted attempt before it had got."""

    from_step: int
    """The step of the checkpoint training continued from."""
    reached_step: int | None
    """The last step the interrupted attempt recorded (it logs every logging_steps, so it may have gone a few
    further); None when unknown (resumed into another run folder)."""
    at: float
    """When the resumed attempt started, seconds since the epoch."""

    @property
    def redone(self) -> int:
        """Steps trained again: those between the checkpoint and where the interrupted attempt had got."""
        return max(0, self.reached_step - self.from_step) if self.reached_step is not None else 0

    @classmethod
    def from_json(cls, data: Any) -> Resumed | None:
        if not isinstance(data, dict):
            return None
        start, reached, at = data.get("from_step"), data.get("reached_step"), data.get("at")
        counts = [n for n in (start, reached) if n is not None]
        if not isinstance(start, int) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                  for n in counts):
            return None
        if not isinstance(at, (int, float)) or isinstance(at, bool) or not _plausible("at", at):
            return None
        return cls(from_step=start, reached_step=reached, at=float(at))


@dataclass
class RunStatus:
    """Everything ``status.json`` holds. Unknown fields in a file are ignored; missing ones take these defaults."""

    state: RunState = RunState.PENDING
    run_id: str | None = None
    stage: str = "sft"
    model: str | None = None
    method: str | None = None
    output_dir: str | None = None
    process: ProcessIdentity | None = None
    """The process to watch: the detached trainer, or torchrun for several processes."""
    command: list[str] | None = None
    created_at: float | None = None
    started_at: float | None = None
    resumed_at: float | None = None
    finished_at: float | None = None
    updated_at: float | None = None
    step: int = 0
    total_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    elapsed_s: float | None = None
    """Seconds of training so far, every attempt together (a resumed run goes on from the interrupted one's)."""
    attempt_elapsed_s: float | None = None
    """Seconds of training of this attempt alone (since its last resume)."""
    eta_s: float | None = None
    exit_reason: str | None = None
    exit_message: dict[str, Any] | None = None
    """exit_reason as a code with its values (engine.messages.Message.to_dict()), for a front end in another
    language; None where the reason has no code (a front end then shows exit_reason)."""
    notes: list[str] = field(default_factory=list)
    last_checkpoint: str | None = None
    loss_plot: str | None = None
    template: str | None = None
    base_model: str | None = None
    device: str | None = None
    parallel: str | None = None
    world_size: int | None = None
    final_loss: float | None = None
    final_metrics: dict[str, float] = field(default_factory=dict)
    """A stage's own closing figures (DPO: rewards/accuracies, rewards/margins; RM: accuracy)."""
    resumes: list[Resumed] = field(default_factory=list)
    """Each resume from a checkpoint, oldest first: the run was interrupted before each."""
    runtime_s: float | None = None
    """Seconds of training when the run ended, every attempt together."""
    train_runtime_s: float | None = None
    num_input_tokens_seen: int | None = None
    num_trained_tokens: int | None = None

    def __post_init__(self) -> None:
        self.state = RunState(self.state)  # writers may pass the plain word ("running")

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal

    @property
    def never_started(self) -> bool:
        """Prepared and not started: no process was ever recorded (`launch --print` writes such runs)."""
        return self.state == RunState.PENDING and self.process is None and self.started_at is None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["state"] = str(self.state)
        return strict_json(data)

    @classmethod
    def from_json(cls, data: Any) -> RunStatus:
        """A status from a parsed file: wrongly typed fields fall back to their defaults rather than crash readers."""
        if not isinstance(data, dict):
            return cls()
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if f.name == "state":
                try:
                    values["state"] = RunState(value)
                except ValueError:
                    continue
            elif f.name == "process":
                values["process"] = ProcessIdentity.from_json(value)
            elif f.name == "resumes":
                if isinstance(value, list):
                    values["resumes"] = [item for item in map(Resumed.from_json, value) if item is not None]
            elif f.name == "stage":  # it names a config file and a module to run: only a stage there is
                if value in STAGES:
                    values["stage"] = value
            elif fits_annotation(value, f.type) and _plausible(f.name, value) and (
                    not isinstance(value, dict) or all(_plausible("", item) for item in value.values())):
                values[f.name] = value  # final_metrics: finite numbers the summaries format
        return cls(**values)


# Times and durations beyond this many seconds (about the year 5000) are no clock's: a damaged or edited file.
_LATEST_SECONDS = 1e11


def _plausible(name: str, value: Any) -> bool:
    """Numbers must be finite; times (``*_at``), durations (``*_s``) and counts must not be negative, and times and
    durations not absurdly large (readers format them as dates and clocks)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return True
    if not math.isfinite(value):
        return False
    if name.endswith(("_at", "_s")):
        return 0 <= value < _LATEST_SECONDS
    if name in ("step", "total_steps", "world_size", "num_input_tokens_seen", "num_trained_tokens", "epoch"):
        return value >= 0
    return True


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None, so the file stays strict JSON (no NaN/Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def liveness_view(status: RunStatus) -> RunStatus:
    """The status as a reader should see it: a live state whose process is provably gone reads as failed."""
    if status.state not in LIVE_STATES or status.process is None:
        return status
    if status.process.alive() is False:
        return dataclasses.replace(status, state=RunState.FAILED, exit_reason=DEAD_PROCESS_REASON,
                                   exit_message=Message("run.dead_process", DEAD_PROCESS_REASON).to_dict(),
                                   finished_at=status.finished_at or status.updated_at)
    return status


STAGE_CONFIGS = ("sft", "dpo", "kto", "pt", "rm")


def load_status_file(path: Path) -> RunStatus:
    """The status exactly as written (no liveness judgement). No file: a default (pending) status, as a prepared
    run has. A file that cannot be read: a failed status whose exit_reason names the file and the way on, never a
    plausible "pending" (the run's checkpoints are as they were; only its record is lost)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))  # fields too deep are dropped by from_json
    except FileNotFoundError:
        return RunStatus()
    except (OSError, UnicodeDecodeError) as exc:
        return damaged_status(path, f"cannot be read ({exc.__class__.__name__}: {str(exc)[:120]})")
    except RecursionError:
        return damaged_status(path, "is not valid JSON (nested too deep)")
    except ValueError as exc:
        return damaged_status(path, f"is not valid JSON ({str(exc)[:120]})")
    if not isinstance(data, dict):
        return damaged_status(path, "does not hold a JSON object")
    return RunStatus.from_json(data)


def damaged_status(path: Path, problem: str) -> RunStatus:
    folder = path.parent
    configs = [folder / f"{stage}.yaml" for stage in STAGE_CONFIGS if (folder / f"{stage}.yaml").is_file()]
    way_on = (f"to continue from the newest complete checkpoint of its output_dir, train its config again: "
              f"`lf-assistant train {configs[0]} resume_from_checkpoint=auto` (a new run folder)"
              if configs else "start a new run")
    stage = configs[0].stem if configs else "sft"
    return RunStatus(state=RunState.FAILED, run_id=folder.name, stage=stage,
                     exit_reason=f"{path} {problem}, so this run's state is unknown; its checkpoints are untouched. "
                                 f"{way_on[0].upper()}{way_on[1:]}.")


def read_status(run_dir: str | Path) -> RunStatus:
    """The one reader of a run's status for the TUI, the CLI and the API. Never writes."""
    return liveness_view(load_status_file(Path(run_dir) / "status.json"))
