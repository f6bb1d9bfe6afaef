"""The run directory: the one contract between the training process and everything that watches it.

``lf_runs/<run_id>/`` holds::

    sft.yaml          the resolved config; `lf-assistant train sft.yaml` reproduces the run
    train.log         everything the training process printed
    metrics.jsonl     one JSON object per logging step (append-only)
    events.jsonl      milestones: started, checkpoint_saved, eval, completed, failed (append-only)
    status.json       the current state, replaced atomically
    device.json       the GPU choice, reused by training, validation and export
    state.json        the wizard's answers (written by the assistant, never by the engine)
    infer.yaml / export.yaml / validation.jsonl   written by the later stages

Writers append or replace atomically; readers never need a lock. A status that says "running" whose process is
gone is reported as failed, never left as running.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from engine.jsonio import write_text_atomic

DEFAULT_RUNS_DIR = Path("lf_runs")
STATES = ("pending", "running", "completed", "failed", "stopped")
CHECKPOINT_MARKER = "CHECKPOINT_COMPLETE"


def runs_root(runs_dir: str | Path | None = None) -> Path:
    """The runs folder: the argument, else $LFA_RUNS_DIR, else ./lf_runs."""
    return Path(runs_dir or os.environ.get("LFA_RUNS_DIR") or DEFAULT_RUNS_DIR)


def new_run_id(model: str, method: str, when: datetime | None = None) -> str:
    """``<model>_<method>_YYYYMMDD_HHMMSS`` with the model's last path part, safe for a folder name."""
    name = Path(str(model).rstrip("/")).name or "model"
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).replace("..", "-").strip("-.").lower()[:60] or "model"
    stamp = (when or datetime.now()).strftime("%Y%m%d_%H%M%S")
    return f"{name}_{method}_{stamp}"


def default_output_dir(model_path: str, method: str, run_id: str, stage: str = "sft") -> str:
    """``saves/<model>/<method>/<stage>_<YYYYMMDD>_<HHMMSS>``: checkpoints live apart from run folders and weights."""
    name = Path(str(model_path).rstrip("/")).name.lower() or "model"
    stamp = re.search(r"(\d{8}_\d{6}(?:-\d+)?)$", run_id)
    return str(Path("saves") / name / method / f"{stage}_{stamp.group(1) if stamp else run_id}")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temp file in the same folder, then rename: readers see the old or the new file, never half."""
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False, default=str))


def read_jsonl(path: Path) -> list[dict]:
    """Every complete line of a JSONL file; a half-written last line (a crash mid-append) is skipped."""
    if not path.is_file():
        return []
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def pid_alive(pid: int | None) -> bool:
    # Only a real process id: os.kill(-1, ...) addresses every process of the user, 0 the whole group.
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) still answers kill(0); it is not alive.
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@dataclass
class RunDir:
    """Paths and readers/writers for one run folder."""

    path: Path

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    @property
    def run_id(self) -> str:
        return self.path.name

    # --- paths
    @property
    def config_path(self) -> Path:
        stage = self.read_status().get("stage") or "sft"
        candidate = self.path / f"{stage}.yaml"
        return candidate if candidate.exists() or stage == "sft" else self.path / "sft.yaml"

    @property
    def log_path(self) -> Path:
        return self.path / "train.log"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def status_path(self) -> Path:
        return self.path / "status.json"

    def file(self, name: str) -> Path:
        return self.path / name

    # --- writers (the training process)
    def append_jsonl(self, path: Path, row: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
            handle.flush()

    def append_metric(self, row: dict) -> None:
        self.append_jsonl(self.metrics_path, row)

    def append_event(self, kind: str, **data: Any) -> None:
        self.append_jsonl(self.events_path, {"time": time.time(), "event": kind, **data})

    def update_status(self, **fields: Any) -> dict:
        status = self._read_status_file()
        status.update(fields)
        status["updated_at"] = time.time()
        write_json_atomic(self.status_path, status)
        return status

    # --- readers (the TUI, the CLI, the API)
    def _read_status_file(self) -> dict:
        try:
            return json.loads(self.status_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {}

    def read_status(self) -> dict:
        """The status, with a dead "running" process turned into "failed" (and recorded as such)."""
        status = self._read_status_file()
        if status.get("state") in ("running", "pending") and status.get("pid") and not pid_alive(status["pid"]):
            reason = "the training process exited without recording an end (killed, out of memory, or the machine " \
                     "restarted)"
            status = self.update_status(state="failed", finished_at=time.time(), exit_reason=reason)
        return status

    def read_metrics(self) -> list[dict]:
        return read_jsonl(self.metrics_path)

    def read_events(self) -> list[dict]:
        return read_jsonl(self.events_path)

    def tail_log(self, lines: int = 20) -> list[str]:
        if not self.log_path.is_file():
            return []
        with open(self.log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace").replace("\r", "\n")
        return [line for line in text.splitlines() if line.strip()][-lines:]

    def summary(self) -> dict:
        """One row for run listings: id, model, method, state, steps, final loss, dates."""
        status = self.read_status()
        metrics = self.read_metrics()
        losses = [m for m in metrics if m.get("loss") is not None]
        return {
            "run_id": self.run_id,
            "model": status.get("model"),
            "method": status.get("method"),
            "stage": status.get("stage", "sft"),
            "state": status.get("state", "unknown"),
            "step": status.get("step", losses[-1]["step"] if losses else 0),
            "total_steps": status.get("total_steps"),
            "final_loss": losses[-1]["loss"] if losses else None,
            "started_at": status.get("started_at"),
            "output_dir": status.get("output_dir"),
        }


def iter_runs(runs_dir: str | Path | None = None) -> Iterator[RunDir]:
    """Runs under the runs folder, newest first (by folder modification time)."""
    root = runs_root(runs_dir)
    if not root.is_dir():
        return
    folders = [p for p in root.iterdir()
               if p.is_dir() and ((p / "status.json").exists() or (p / "state.json").exists())]
    for folder in sorted(folders, key=lambda p: p.stat().st_mtime, reverse=True):
        yield RunDir(folder)


def find_run(run_id: str, runs_dir: str | Path | None = None) -> RunDir:
    """A run by id (or a unique prefix, or a path). Raises EngineError listing recent runs when not found."""
    from engine.errors import EngineError

    as_path = Path(run_id)
    if as_path.is_dir() and ((as_path / "status.json").exists() or (as_path / "state.json").exists()):
        return RunDir(as_path)
    root = runs_root(runs_dir)
    exact = root / run_id
    if exact.is_dir():
        return RunDir(exact)
    matches = [r for r in iter_runs(root) if r.run_id.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    recent = [r.run_id for r in iter_runs(root)][:5]
    if len(matches) > 1:
        raise EngineError(f"Run id {run_id!r} matches several runs: {', '.join(m.run_id for m in matches[:5])}. "
                          "Give more of the id.")
    listing = f" Recent runs: {', '.join(recent)}." if recent else " No runs exist yet."
    raise EngineError(f"No run {run_id!r} under {root}.{listing} (`lf-assistant runs` lists them.)")


def find_complete_checkpoints(output_dir: str | Path) -> list[Path]:
    """Checkpoint folders that carry the completion marker, oldest first. Half-written ones are ignored."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.glob("checkpoint-*"):
        step = child.name.split("-", 1)[1]
        if step.isdigit() and (child / CHECKPOINT_MARKER).exists():
            found.append((int(step), child))
    return [path for _, path in sorted(found)]
