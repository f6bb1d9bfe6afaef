"""The run directory: the one contract between the training process and everything that watches it.

``lf_runs/<run_id>/`` holds::

    sft.yaml          the resolved config; `lf-assistant train sft.yaml` reproduces the run
    train.log         everything the training process printed
    metrics.jsonl     one JSON object per logging step (append-only); a run resumed from another run's
                      checkpoint starts with the rows that checkpoint kept
    events.jsonl      milestones: started, checkpoint_saved, eval, completed, failed (append-only)
    status.json       the current state, replaced atomically
    device.json       the GPU choice, reused by training, validation and export
    state.json        the wizard's answers (written by the assistant, never by the engine)
    infer.yaml / export.yaml / validation.jsonl   written by the later stages

Writers append or replace atomically; readers never need a lock. ``status.json`` has one typed schema
(engine.runstatus.RunStatus) and is written only by the launcher and the training process; readers see a status
whose process is provably gone as failed without writing anything. ``stop_request.json`` asks a run to stop.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from engine.jsonio import loads_json, read_json_dict, write_text_atomic
from engine.runstatus import RunStatus, load_status_file, read_status, strict_json

DEFAULT_RUNS_DIR = Path("lf_runs")
CHECKPOINT_MARKER = "CHECKPOINT_COMPLETE"
STOP_REQUEST = "stop_request.json"


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
    write_text_atomic(path, json.dumps(strict_json(data), indent=2, ensure_ascii=False, default=str, allow_nan=False))


def read_jsonl(path: Path) -> list[dict]:
    """Every complete line of a JSONL file that is a JSON object; a half-written last line (a crash mid-append,
    maybe inside a multi-byte character), a line nested too deep or with a number too long to read, and anything
    else that is not an object are skipped."""
    if not path.is_file():
        return []
    rows = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                row = loads_json(line)
            except ValueError:  # not JSON, too deep, or an integer past Python's 4300 digits
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _is_metric_value(value: Any) -> bool:
    return value is None or isinstance(value, (int, float)) and not isinstance(value, bool)


def _metric_value(value: Any) -> int | float | None:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def metric_row(row: Any) -> dict | None:
    """A metric row as training writes them (numbers or None; NaN and infinity as None), from a row read from disk:
    other values are left out, and a row without a whole-number step is no row (None)."""
    if not isinstance(row, dict):
        return None
    row = {key: _metric_value(value) for key, value in row.items() if isinstance(key, str) and _is_metric_value(value)}
    step = row.get("step")
    return row if isinstance(step, int) and not isinstance(step, bool) else None


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
        candidate = self.path / f"{self.read_status().stage}.yaml"
        return candidate if candidate.exists() else self.path / "sft.yaml"

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

    @property
    def stop_request_path(self) -> Path:
        return self.path / STOP_REQUEST

    @property
    def held_out_scores_path(self) -> Path:
        """heldout_scores.jsonl: a reward model's scores of held-out pairs, {prompt, chosen, rejected,
        chosen_score, rejected_score} each, written by the rm run once its saved model reloaded."""
        return self.path / "heldout_scores.jsonl"

    @property
    def held_out_path(self) -> Path:
        """heldout.jsonl: the rows an SFT run held out of training (val_size), {messages, system, source} each."""
        return self.path / "heldout.jsonl"

    def file(self, name: str) -> Path:
        return self.path / name

    # --- writers (the training process and the launcher)
    def append_jsonl(self, path: Path, row: dict) -> None:
        """One strict-JSON line (non-finite numbers become null), appended and flushed."""
        path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(strict_json(row), ensure_ascii=False, default=str, allow_nan=False)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()

    def append_metric(self, row: dict) -> None:
        self.append_jsonl(self.metrics_path, row)

    def append_event(self, kind: str, **data: Any) -> None:
        self.append_jsonl(self.events_path, {"time": time.time(), "event": kind, **data})

    def update_status(self, **fields: Any) -> RunStatus:
        """Replace the named fields of status.json (only the launcher and the trainer call this)."""
        status = dataclasses.replace(load_status_file(self.status_path), **fields, updated_at=time.time())
        write_json_atomic(self.status_path, status.to_json())
        return status

    def request_stop(self, reason: str) -> None:
        write_json_atomic(self.stop_request_path, {"time": time.time(), "reason": reason})

    def stop_requested(self) -> str | None:
        """The reason of a pending stop request, or None."""
        if not self.stop_request_path.is_file():
            return None
        return str(read_json_dict(self.stop_request_path).get("reason") or "stop requested")

    def clear_stop_request(self) -> None:
        self.stop_request_path.unlink(missing_ok=True)

    # --- readers (the TUI, the CLI, the API)
    def read_status(self) -> RunStatus:
        """The status with liveness worked out in memory (a dead "running" process reads as failed)."""
        return read_status(self.path)

    def read_metrics(self) -> list[dict]:
        """Metric rows in step order. A resumed run logs again the steps after its checkpoint: the later row of a
        step replaces the earlier one (training and eval rows separately), so charts never count a step twice.
        Every value is a number or None, as training writes them: anything else in an edited or damaged file (text,
        a list, true) is left out, and NaN or infinity reads as None."""
        kinds: dict[bool, list[dict]] = {False: [], True: []}
        for row in read_jsonl(self.metrics_path):
            row = metric_row(row)
            if row is None:
                continue
            rows = kinds["eval_loss" in row]
            while rows and rows[-1]["step"] >= row["step"]:
                rows.pop()
            rows.append(row)
        return sorted(kinds[False] + kinds[True], key=lambda row: (row["step"], "eval_loss" in row))

    def read_events(self) -> list[dict]:
        return read_jsonl(self.events_path)

    def tail_log(self, lines: int = 20) -> list[str]:
        if not self.log_path.is_file():
            return []
        with open(self.log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
        # a progress bar redrawn in place (carriage returns) shows as its latest state, one line
        shown = (line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n"))
        return [line for line in shown if line.strip()][-lines:]

    def summary(self) -> dict:
        """One row for run listings: id, model, method, state, steps, final loss, dates."""
        status = self.read_status()
        final = status.final_loss
        if final is None and status.is_terminal:  # a live run has no final loss yet (status shows its latest)
            losses = [m for m in self.read_metrics() if m.get("loss") is not None]
            final = losses[-1]["loss"] if losses else None
        return {
            "run_id": self.run_id,
            "model": status.model,
            "method": status.method,
            "stage": status.stage,
            "state": str(status.state),
            "step": status.step,
            "total_steps": status.total_steps,
            "final_loss": final,
            "started_at": status.started_at,
            "finished_at": status.finished_at,
            "output_dir": status.output_dir,
            "exit_reason": status.exit_reason,
        }


def iter_runs(runs_dir: str | Path | None = None) -> Iterator[RunDir]:
    """Runs under the runs folder, newest first (by folder modification time)."""
    root = runs_root(runs_dir)
    if not root.is_dir():
        return
    folders = [p for p in root.iterdir() if is_run_folder(p)]
    for folder in sorted(folders, key=lambda p: p.stat().st_mtime, reverse=True):
        yield RunDir(folder)


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # e.g. a name too long for the file system: no folder of ours
        return False


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a run folder (it holds a status file)."""
    return _is_dir(path) and ((path / "status.json").exists() or (path / "state.json").exists())


def find_run(run_id: str, runs_dir: str | Path | None = None, *, prefix: bool = True) -> RunDir:
    """A run by id (or a unique prefix, or a path). Raises EngineError listing recent runs when not found.

    ``prefix=False`` for what acts on a run (stop, resume): a mistyped short id must not pick another run."""
    from engine.errors import EngineError

    as_path = Path(run_id)
    if is_run_folder(as_path):
        return RunDir(as_path)
    root = runs_root(runs_dir)
    exact = root / run_id
    if _is_dir(exact):
        return RunDir(exact)
    matches = [r for r in iter_runs(root) if r.run_id.startswith(run_id)]
    if len(matches) == 1 and prefix:
        return matches[0]
    if matches and not prefix:
        raise EngineError(f"No run is called {run_id!r}; {', '.join(m.run_id for m in matches[:5])} start(s) with "
                          "it. Stopping, resuming or reopening a run takes its whole id.")
    recent = [r.run_id for r in iter_runs(root)][:5]
    if len(matches) > 1:
        raise EngineError(f"Run id {run_id!r} matches several runs: {', '.join(m.run_id for m in matches[:5])}. "
                          "Give more of the id.")
    listing = f" Recent runs: {', '.join(recent)}." if recent else " No runs exist yet."
    if root.exists() and not _is_dir(root):
        listing = " It is a file, not a runs folder: give --runs-dir the folder that holds the runs."
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


def checkpoint_progress(folder: str | Path) -> tuple[int, int | None] | None:
    """(step, total_steps) that a checkpoint's trainer_state.json records, read as untrusted: None without a
    whole-number step of at least 1; the total only when it is a whole number no smaller than the step."""
    try:
        state = loads_json((Path(folder) / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None

    def count(key: str) -> int | None:
        value = state.get(key) if isinstance(state, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    step, total = count("step"), count("total_steps")
    if step is None or step < 1:
        return None
    return step, total if total is not None and total >= step else None


def resolve_resume(resume_from_checkpoint: str | None, output_dir: Path) -> Path | None:
    """``auto`` -> newest complete checkpoint in output_dir (None if there is none); a path must be complete."""
    if not resume_from_checkpoint:
        return None
    if str(resume_from_checkpoint).lower() in ("auto", "true", "latest"):
        complete = find_complete_checkpoints(output_dir)
        return complete[-1] if complete else None
    from engine.errors import ConfigError

    path = Path(resume_from_checkpoint)
    if not path.is_dir() and str(resume_from_checkpoint).isdigit():
        path = Path(output_dir) / f"checkpoint-{resume_from_checkpoint}"
    if not (path / CHECKPOINT_MARKER).exists():
        complete = [p.name for p in find_complete_checkpoints(output_dir)]
        listing = ", ".join(complete) if complete else "none"
        raise ConfigError(f"resume_from_checkpoint {resume_from_checkpoint} is not a complete checkpoint "
                          f"(no {CHECKPOINT_MARKER} marker). Complete checkpoints in {output_dir}: {listing}. "
                          "Use resume_from_checkpoint: auto to take the newest complete one.")
    return path
