"""Stage 2.5: the device — detected once, chosen once, reused for training, validation and export.

A busy card is never chosen silently: with no free GPU the user must say wait, share (a busy card, knowingly) or
pick (an index of their own). The choice is written to `lf_runs/<run_id>/device.json` and its environment
(CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES) goes to every process the assistant starts.
"""

from __future__ import annotations

import shlex

from pathlib import Path
from typing import Any, Literal, Mapping

from assistant.i18n import t
from assistant.wizard.stages import Outcome, refused
from assistant.wizard.state import WizardState
from engine.rundir import write_json_atomic

STAGE = "gpu"
DEVICE_FILE = "device.json"
Situation = Literal["none", "one_free", "several_free", "all_busy"]


DETECT_CODE = ("import json; from engine.devices import detect_devices; "
               "print(json.dumps(detect_devices().to_dict()))")


def detect_in_subprocess(timeout_s: float = 60.0) -> Any:
    """engine.devices.detect_devices in a child process: its last resort imports torch, which the TUI must not."""
    import json
    import subprocess
    import sys

    from engine.devices import GPU, DeviceReport
    from engine.errors import DeviceError

    result = subprocess.run([sys.executable, "-c", DETECT_CODE], capture_output=True, text=True,
                            timeout=timeout_s, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise DeviceError(t("gpu.detect_failed", error=(result.stderr.strip().splitlines() or ["?"])[-1]))
    data = json.loads(result.stdout.strip().splitlines()[-1])
    gpus = [GPU(**{k: v for k, v in gpu.items() if k != "free"}) for gpu in data.get("gpus", [])]
    return DeviceReport(data["platform"], gpus, data.get("tool", "?"), data.get("notes", []), data.get("cpu_bf16"))


def free_indices(report: Any) -> list[int]:
    return [gpu.index for gpu in report.gpus if gpu.free]


def situation(report: Any) -> Situation:
    """What the detector found, as the four cases the screen asks differently about."""
    if not report.gpus:
        return "none"
    free = free_indices(report)
    if not free:
        return "all_busy"
    return "one_free" if len(free) == 1 else "several_free"


def describe_gpu(gpu: Any) -> str:
    """One line: index, name, memory used/total, utilisation, and who uses it."""
    used, total = gpu.memory_used_mib / 1024, gpu.memory_total_mib / 1024
    who = ", ".join(str(p) for p in (gpu.processes or [])[:2])
    state = t("gpu.free") if gpu.free else t("gpu.busy")
    util = "?" if gpu.utilization_pct is None else f"{gpu.utilization_pct:.0f}"
    line = f"GPU {gpu.index} {gpu.name}: {used:.1f}/{total:.0f} GiB, {util}% — {state}"
    return f"{line} ({who})" if who and not gpu.free else line


def _device(platform: str, indices: list[int], mode: str, reason: str) -> dict:
    return {"platform": platform, "indices": sorted(indices), "mode": mode, "reason": reason}


def apply(state: WizardState, report: Any, answers: Mapping[str, Any]) -> Outcome:
    """Choose the device(s). answers: gpu_mode (single|multi), busy_action (wait|share|pick), indices."""
    case = situation(report)
    platform = getattr(report, "platform", "cuda")
    if case == "none":
        device = _device("cpu", [], "cpu", t("gpu.reason_cpu"))
        units = getattr(report, "cpu_bf16", None)
        return Outcome(state.replace(device={**device, "bf16_units": units} if units else device))
    known = {gpu.index for gpu in report.gpus}
    chosen = [int(i) for i in answers.get("indices") or []]
    unknown = [i for i in chosen if i not in known]
    if unknown:
        return refused(t("gpu.unknown_index", indices=unknown, known=sorted(known)))
    free = free_indices(report)
    if case == "all_busy":
        return _busy_choice(state, platform, answers.get("busy_action") or "wait", chosen)
    busy_chosen = [i for i in chosen if i not in free]
    if busy_chosen:
        return refused(t("gpu.chosen_busy", indices=busy_chosen, free=free))
    if case == "one_free":
        return Outcome(state.replace(device=_device(platform, free, "single", t("gpu.reason_one_free", index=free[0]))))
    mode = answers.get("gpu_mode") or "single"
    if mode == "multi":
        indices = chosen or free
        if len(indices) < 2:
            return refused(t("gpu.multi_needs_two"))
        reason = t("gpu.reason_multi", indices=",".join(map(str, indices)))
        return Outcome(state.replace(device=_device(platform, indices, "multi", reason), gpu_mode="multi"))
    index = chosen[0] if chosen else free[0]
    reason = t("gpu.reason_single", index=index, free=",".join(map(str, free)))
    return Outcome(state.replace(device=_device(platform, [index], "single", reason), gpu_mode="single"))


def _busy_choice(state: WizardState, platform: str, action: str, chosen: list[int]) -> Outcome:
    if action == "wait":
        return refused(t("gpu.waiting"), code="wait")
    if not chosen:
        return refused(t("gpu.pick_index"), code="pick")
    key = "gpu.reason_shared" if action == "share" else "gpu.reason_picked"
    reason = t(key, indices=",".join(map(str, chosen)))
    return Outcome(state.replace(device=_device(platform, chosen, action, reason), busy_action=action))


def device_env(device: Mapping[str, Any] | None) -> dict[str, str]:
    """The environment that pins a process to the chosen device(s); {} before a choice exists."""
    if not device:
        return {}
    from engine.devices import DeviceChoice
    from engine.errors import ConfigError, DeviceError
    from engine.readers import short_repr

    # state.json is read from disk: a platform or index that is not what a choice holds never reaches a command
    try:
        if not isinstance(device, Mapping):
            raise DeviceError("not a mapping")
        return dict(DeviceChoice.from_dict(device).env())
    except DeviceError:
        raise ConfigError(f"The saved device choice {short_repr(device, 120)} is not one this wizard makes; choose "
                          "the device again.") from None


def env_prefix(device: Mapping[str, Any] | None) -> str:
    """`CUDA_VISIBLE_DEVICES=0 ` for commands shown to the user ('' when nothing needs pinning)."""
    env = device_env(device)
    return "".join(f"{key}={shlex.quote(value)} " for key, value in sorted(env.items()))


def write_device_file(run_folder: Path, device: Mapping[str, Any]) -> Path:
    """Record the choice in the run folder (atomically), with the environment it implies."""
    path = Path(run_folder) / DEVICE_FILE
    write_json_atomic(path, {**device, "env": device_env(device)})
    return path
