"""The pre-flight's result and its launcher, importable without torch (the TUI and the CLI use them).

`measure_steps(config)` runs `python -m engine.recipes.measure` in a child process on a copy of the config and
returns its `Measurement`: measured step time, throughput, start-up, peak memory, the predicted total time, and
whether the micro-batch fits (with a proposal when it does not). See engine/recipes/measure.py for how.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from engine.errors import EngineError
from engine.messages import Message


@dataclass
class Measurement:
    """What a pre-flight found. Times in seconds, memory in bytes."""

    device: str
    micro_batch: int
    """per_device_train_batch_size that was measured (the proposal's when the asked one did not fit)."""
    grad_accum: int
    steps_timed: int
    step_s: float
    """Mean seconds per optimizer step over the timed steps (the epoch's longest: a pessimistic figure)."""
    tokens_per_s: float
    """Input tokens (padding included: it is computed too) per second over the timed steps."""
    startup_s: float
    """Process start to the first step: imports, model load, data encoding. The real run pays it too."""
    peak_bytes: int
    """Peak resident memory of the process (CPU) or peak allocated GPU memory (CUDA)."""
    limit_bytes: int | None
    """Memory the run may use on that device (free now plus what the process held), None when unknown."""
    total_steps: int
    predicted_s: float
    """Start-up plus every optimizer step of the run at the measured throughput (evaluation and checkpoint saves
    not included)."""
    fits: bool
    proposal: dict | None = None
    """{per_device_train_batch_size, gradient_accumulation_steps} when the configured micro-batch did not fit."""
    reason: str = ""
    """Why the proposal: what did not fit, and how the effective batch is kept."""
    notes: list[str] = field(default_factory=list)
    reason_message: dict | None = None
    """``reason`` as an engine.messages.Message dict (code and values), for front ends in other languages."""
    note_messages: list[dict] = field(default_factory=list)
    """``notes`` as engine.messages.Message dicts, one per note."""
    wall_s: float = 0.0
    """How long the pre-flight itself took (filled in by the launcher)."""
    measured_at: float | None = None
    """When it ended, in seconds since the epoch (filled in by the launcher; None in one stored before this was
    kept): a stored measurement shown again says how old it is."""
    load_per_cpu: float | None = None
    """The 1-minute load average per CPU this process may use, read just before the measuring process started:
    the other work on the machine (filled in by the launcher)."""
    cpu_share: float | None = None
    """CPU seconds the measuring process got per second of its timed steps (a CPU device only; None on a GPU,
    whose steps wait on the device)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


# Other work on this many of the CPUs (the load average before measuring, per CPU) or a measuring process that got
# less than this share of one CPU's time makes the step time a measure of the machine's load rather than of the
# run: on 2 shared cores the same config measured 1.28 s/step idle and 51 s/step busy.
BUSY_LOAD_PER_CPU = 0.75
BUSY_CPU_SHARE = 0.5


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, where the platform tells it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def load_per_cpu() -> float | None:
    """The 1-minute load average divided by the usable CPUs, or None where the platform has no load average."""
    try:
        return os.getloadavg()[0] / usable_cpus()
    except (AttributeError, OSError):
        return None


def busy_note(measurement: Measurement) -> Message | None:
    """Why the measured step time says more about the machine's other work than about the run, or None when the
    machine was not busy (or nothing tells)."""
    load, share, cpus = measurement.load_per_cpu, measurement.cpu_share, usable_cpus()
    # On a GPU the step waits on the GPU, not on the CPUs' other work: only a CPU measurement reads the load.
    on_cpu = measurement.device.startswith("cpu")
    busy_load = on_cpu and load is not None and load >= BUSY_LOAD_PER_CPU
    starved = share is not None and share < BUSY_CPU_SHARE
    if not (busy_load or starved):
        return None
    fields = {"load": f"{load * cpus:.1f}" if busy_load else None, "cpus": cpus,
              "share": f"{share:.2f}" if starved else None}
    said = {"measure.busy_load": f"load {fields['load']} on {cpus} CPUs before measuring",
            "measure.busy_cpu": f"the measuring process got {fields['share']} CPU-seconds a second",
            "measure.busy_both": f"load {fields['load']} on {cpus} CPUs before measuring; the measuring process got "
                                 f"{fields['share']} CPU-seconds a second"}
    code = "measure.busy_both" if busy_load and starved else "measure.busy_load" if busy_load else "measure.busy_cpu"
    why = Message(code, said[code], {key: value for key, value in fields.items() if value is not None})
    text = (f"measured on a busy machine ({why}): the step time and the prediction may be far off; measure again "
            "when the machine is quieter")
    return Message("measure.busy", text, {"why": why})


def with_busy_note(measurement: Measurement) -> Measurement:
    """``measurement`` with the busy note among its notes when the machine was busy."""
    note = busy_note(measurement)
    if note is not None:
        measurement.notes.append(note.text)
        measurement.note_messages.append(note.to_dict())
    return measurement


class MeasureCancelled(EngineError):
    """The caller stopped the pre-flight (the config changed meanwhile)."""


def _config_file(config, folder: Path) -> Path:
    """The config with absolute paths, written where the child reads it (relative paths would move with it)."""
    from engine.config import config_to_dict, dump_yaml
    from engine.config.paths import dataset_dir_of

    data = config_to_dict(config)
    data["dataset_dir"] = str(dataset_dir_of(config).resolve())
    model = data.get("model_name_or_path")
    if model and Path(model).expanduser().exists():
        data["model_name_or_path"] = str(Path(model).expanduser().resolve())
    path = folder / f"{config.stage}.yaml"
    dump_yaml(data, path)
    return path


def measure_steps(config, *, steps: int = 3, env: dict[str, str] | None = None,
                  should_stop: Callable[[], bool] = lambda: False, timeout_s: float | None = None) -> Measurement:
    """Time ``steps`` real optimizer steps (after one warm-up step on the longest micro-batches) of ``config`` in a
    child process pinned by ``env`` (the run's device choice). EngineError with the reason when it cannot run;
    MeasureCancelled when ``should_stop()`` turned true."""
    began, load = time.time(), load_per_cpu()
    with tempfile.TemporaryDirectory(prefix="lfa-preflight-") as folder:
        path = _config_file(config, Path(folder))
        child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}
        root = str(Path(__file__).resolve().parent.parent)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (root, child_env.get("PYTHONPATH", "")) if p)
        command = [sys.executable, "-m", "engine.recipes.measure", str(path), "--steps", str(steps)]
        with open(Path(folder) / "out.txt", "w+", encoding="utf-8") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=child_env, cwd=os.getcwd())
            while process.poll() is None:
                if should_stop() or (timeout_s is not None and time.time() - began > timeout_s):
                    process.kill()
                    process.wait()
                    if should_stop():
                        raise MeasureCancelled("pre-flight stopped")
                    text = f"The pre-flight took longer than {timeout_s:.0f} s and was stopped."
                    raise EngineError(text, message=Message("measure.timed_out", text,
                                                            {"seconds": f"{timeout_s:.0f}"}))
                time.sleep(0.2)
            out.seek(0)
            lines = out.read().splitlines()
    measurement = _result(process.returncode, lines, time.time() - began)
    measurement.measured_at, measurement.load_per_cpu = time.time(), load
    return with_busy_note(measurement)


def _result(returncode: int, lines: list[str], wall_s: float) -> Measurement:
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if "measurement" in data:
                measurement = Measurement.from_dict(data["measurement"])
                measurement.wall_s = wall_s
                return measurement
            if "error" in data:
                text = f"The pre-flight could not run: {data['error']}"
                coded = data.get("error_message")  # the child's error as a code with values, when it had one
                why = coded if isinstance(coded, dict) and isinstance(coded.get("code"), str) else str(data["error"])
                raise EngineError(text, message=Message("measure.could_not_run", text, {"error": why}))
    if returncode < 0:
        text = (f"The pre-flight process was killed (signal {-returncode}); out of memory is the usual cause: lower "
                "per_device_train_batch_size or cutoff_len.")
        raise EngineError(text, message=Message("measure.killed", text, {"signal": -returncode}))
    tail = " / ".join(line.strip() for line in lines[-3:] if line.strip()) or f"exit code {returncode}"
    raise EngineError(f"The pre-flight failed: {tail}",
                      message=Message("measure.failed", f"The pre-flight failed: {tail}", {"tail": tail}))
