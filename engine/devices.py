"""Which GPUs this machine has, which are free, and the one choice a run applies to all its GPU commands.

Detection asks the vendor tools in a fixed order, each under a timeout (a wedged driver can hang them):
`amd-smi monitor`, `rocm-smi`, `nvidia-smi` (plus its compute-apps query, to name what holds a busy GPU), then
torch, then CPU. The first tool that reports at least one GPU answers; every tool that failed leaves a note.

The choice (`DeviceChoice`) is saved in the run directory as `device.json` and turned into CUDA_VISIBLE_DEVICES /
HIP_VISIBLE_DEVICES for training, validation and export alike, with the process count set to match: a mismatch is
refused, because it hangs multi-GPU and multi-node runs (LlamaFactory #7215).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from engine.errors import DeviceError
from engine.jsonio import read_record, write_text_atomic
from engine.readers import short_repr

Vendor = Literal["nvidia", "amd"]
Platform = Literal["cuda", "rocm", "cpu"]
SelectionKind = Literal["single", "ask_single_or_multi", "ask_none_free", "cpu"]

# An idle GPU still shows a few hundred MiB (driver context, display, a monitoring agent); a loaded 0.5B model
# alone takes more than 1 GiB. Utilisation flickers to a few % with no work at all.
FREE_MEMORY_MIB = 1024
FREE_UTILIZATION_PCT = 5.0
DEVICE_CHOICE_FILE = "device.json"
VISIBLE_DEVICES_VAR: dict[str, str] = {"cuda": "CUDA_VISIBLE_DEVICES", "rocm": "HIP_VISIBLE_DEVICES"}

NVIDIA_GPU_QUERY = "index,uuid,name,memory.used,memory.total,utilization.gpu"
NVIDIA_APPS_QUERY = "gpu_uuid,pid,process_name,used_memory"
TOOL_COMMANDS: dict[str, list[str]] = {
    "amd-smi": ["amd-smi", "monitor"],
    "rocm-smi": ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--showuse", "--csv"],
    "nvidia-smi": ["nvidia-smi", f"--query-gpu={NVIDIA_GPU_QUERY}", "--format=csv,noheader,nounits"],
    "nvidia-smi-apps": ["nvidia-smi", f"--query-compute-apps={NVIDIA_APPS_QUERY}", "--format=csv,noheader,nounits"],
}


@dataclass
class GPU:
    """One physical GPU as the vendor tool numbers it."""

    index: int
    name: str
    vendor: Vendor
    memory_used_mib: int
    memory_total_mib: int
    utilization_pct: float | None = None
    """None when the tool does not report it (MIG slices, the torch fallback)."""
    processes: list[str] = field(default_factory=list)
    """What runs on it, e.g. "python (pid 4242, 20.0 GiB)"; empty when unknown or idle."""
    uuid: str | None = None

    @property
    def free(self) -> bool:
        idle = self.utilization_pct is None or self.utilization_pct <= FREE_UTILIZATION_PCT
        return self.memory_used_mib <= FREE_MEMORY_MIB and idle

    def describe(self) -> str:
        memory = f"{_gib(self.memory_used_mib)} of {_gib(self.memory_total_mib)} GiB used"
        util = "" if self.utilization_pct is None else f", {self.utilization_pct:.0f}% busy"
        if self.free:
            return f"GPU {self.index} {self.name}: free ({memory}{util})"
        by = f" by {', '.join(self.processes)}" if self.processes else ""
        return f"GPU {self.index} {self.name}: busy ({memory}{util}){by}"


@dataclass
class DeviceReport:
    """What detection found, and how."""

    platform: Platform
    gpus: list[GPU]
    tool: str
    """The tool that answered: amd-smi, rocm-smi, nvidia-smi, torch or none."""
    notes: list[str] = field(default_factory=list)
    """Why earlier tools gave no answer (missing, timed out, output not understood)."""
    cpu_bf16: str | None = None
    """With no GPU: the CPU's bf16 matrix units (``cpu_bf16_units``), else None."""

    @property
    def free(self) -> list[GPU]:
        return [gpu for gpu in self.gpus if gpu.free]

    def to_dict(self) -> dict:
        return {**asdict(self), "free": [gpu.index for gpu in self.free]}


@dataclass
class Selection:
    """What to do with a report: use the one free GPU, or ask the user, or fall back to CPU."""

    kind: SelectionKind
    candidates: list[int]
    """GPU indices to offer, best first (free ones; or, when none is free, the least loaded)."""
    message: str


@dataclass
class DeviceChoice:
    """The GPUs a run uses; saved as device.json and applied to every GPU command of the run."""

    platform: Platform
    indices: list[int] = field(default_factory=list)

    @property
    def nproc(self) -> int:
        """Processes per node: one per chosen GPU; one on CPU."""
        return max(len(self.indices), 1)

    def env(self) -> dict[str, str]:
        """The visibility variable for the chosen GPUs; {} on CPU (an empty CUDA_VISIBLE_DEVICES is not set)."""
        if self.platform == "cpu":
            return {}
        return {VISIBLE_DEVICES_VAR[self.platform]: ",".join(str(i) for i in self.indices)}

    def launch_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default os.environ) with this choice applied, ready for subprocess.Popen(env=...)."""
        merged = dict(os.environ if base is None else base)
        if self.platform == "rocm":
            # ROCm honours CUDA_/ROCR_VISIBLE_DEVICES too; a leftover one would intersect with the choice.
            merged.pop("CUDA_VISIBLE_DEVICES", None)
            merged.pop("ROCR_VISIBLE_DEVICES", None)
        merged.update(self.env())
        return merged

    def to_dict(self) -> dict:
        return {"platform": self.platform, "indices": list(self.indices), "env": self.env(), "nproc": self.nproc}

    @classmethod
    def from_dict(cls, data: Mapping) -> DeviceChoice:
        """A saved choice (device.json, the wizard's state.json), checked: it is read from disk and its indices end
        up in an environment variable and in commands shown to the user."""
        platform, indices = data.get("platform"), data.get("indices") or []
        if not isinstance(platform, str) or platform not in ("cuda", "rocm", "cpu"):
            raise DeviceError(f"device.json names platform {short_repr(platform, 40)}, not cuda, rocm or cpu. Choose "
                              "GPUs again.")
        if not isinstance(indices, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 4096 for i in indices):
            raise DeviceError(f"device.json names devices {short_repr(indices, 60)}, not device numbers. Choose GPUs "
                              "again.")
        return cls(platform=platform, indices=list(indices))


def detect_devices(
    *, timeout_s: float = 10.0, env: Mapping[str, str] | None = None, probe_torch: bool = True
) -> DeviceReport:
    """Ask amd-smi, rocm-smi, nvidia-smi, then torch; the first that reports a GPU answers."""
    env = dict(os.environ if env is None else env)
    notes: list[str] = []
    for tool, parse, platform in (
        ("amd-smi", parse_amd_smi_monitor, "rocm"),
        ("rocm-smi", parse_rocm_smi_csv, "rocm"),
        ("nvidia-smi", parse_nvidia_smi, "cuda"),
    ):
        output = _run_tool(tool, TOOL_COMMANDS[tool], timeout_s, env, notes)
        if output is None:
            continue
        try:
            gpus = parse(output)
        except ValueError as exc:
            notes.append(f"{tool}: output not understood ({exc})")
            continue
        if not gpus:
            notes.append(f"{tool}: reported no GPU")
            continue
        if tool == "nvidia-smi":
            _attach_nvidia_processes(gpus, timeout_s, env, notes)
        return DeviceReport(platform, gpus, tool, notes + _visibility_notes(env, platform))
    if probe_torch:
        report = _detect_with_torch(notes)
        if report is not None:
            return report
    return DeviceReport("cpu", [], "none", notes, cpu_bf16_units())


# /proc/cpuinfo flag -> the name a person knows it by, best first. With either, oneDNN runs bf16 products in
# hardware (AMX tiles: several times the fp32 rate); without, bf16 is emulated and slower than fp32.
CPU_BF16_FLAGS: tuple[tuple[str, str], ...] = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"))


def cpu_bf16_units(cpuinfo: str | None = None) -> str | None:
    """The CPU's bf16 matrix units ("AMX-BF16", "AVX512-BF16"), read from the flags in /proc/cpuinfo (or the
    text given); None when it has none, or when this system does not say (not Linux)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
                cpuinfo = handle.read(1 << 20)
        except OSError:
            return None
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            flags.update(value.split())
    return next((label for flag, label in CPU_BF16_FLAGS if flag in flags), None)


def selection_advice(report: DeviceReport) -> Selection:
    """One free GPU: use it. Several: ask single or multi. None free: ask (wait, share, pick). No GPU: CPU."""
    if not report.gpus:
        return Selection("cpu", [], "No GPU found: training runs on the CPU (tiny models only; a 0.5B model: hours).")
    free = [gpu.index for gpu in report.free]
    if len(free) == 1:
        return Selection("single", free, f"GPU {free[0]} is free: it will be used.")
    if free:
        return Selection("ask_single_or_multi", free, f"{len(free)} GPUs are free ({_join(free)}): use one, or several "
                         "(one training process each)?")
    least_loaded = sorted(report.gpus, key=lambda g: (g.memory_used_mib - g.memory_total_mib, g.index))
    return Selection("ask_none_free", [g.index for g in least_loaded], "Every GPU is busy: wait for one to free up, "
                     f"share one (GPU {least_loaded[0].index} has the most free memory), or pick one anyway.")


def auto_choice(report: DeviceReport) -> DeviceChoice | None:
    """The choice when there is nothing to ask (exactly one free GPU, or no GPU); None when the user must decide."""
    advice = selection_advice(report)
    if advice.kind == "cpu":
        return DeviceChoice("cpu", [])
    if advice.kind == "single":
        return DeviceChoice(report.platform, advice.candidates)
    return None


def make_choice(report: DeviceReport, indices: list[int]) -> DeviceChoice:
    """The user's pick, checked against what was detected; [] means CPU."""
    if not indices:
        return DeviceChoice("cpu", [])
    known = {gpu.index for gpu in report.gpus}
    unknown = sorted(set(indices) - known)
    if unknown:
        raise DeviceError(f"GPU {_join(unknown)} does not exist here; detected: {_join(sorted(known)) or 'none'}.")
    if len(set(indices)) != len(indices):
        raise DeviceError(f"GPU list {indices} names a GPU twice; name each once.")
    return DeviceChoice(report.platform, list(indices))


def check_process_count(choice: DeviceChoice, nproc_per_node: int) -> None:
    """Refuse a process count that differs from the number of chosen GPUs (it hangs distributed runs)."""
    if choice.platform == "cpu" or nproc_per_node == len(choice.indices):
        return
    var, value = next(iter(choice.env().items()))
    raise DeviceError(
        f"{len(choice.indices)} GPU(s) are chosen ({var}={value}) but nproc_per_node is {nproc_per_node}. "
        f"Set nproc_per_node to {len(choice.indices)}, or choose {nproc_per_node} GPUs: a mismatch hangs "
        "multi-GPU and multi-node runs."
    )


def save_choice(choice: DeviceChoice, run_dir: str | Path) -> Path:
    """Write device.json into the run directory atomically."""
    path = Path(run_dir) / DEVICE_CHOICE_FILE
    write_text_atomic(path, json.dumps(choice.to_dict(), indent=2) + "\n")
    return path


def load_choice(run_dir: str | Path) -> DeviceChoice | None:
    """The run's saved choice, or None when it has none yet."""
    path = Path(run_dir) / DEVICE_CHOICE_FILE
    if not path.is_file():
        return None
    data = read_record(path, {}, fix="Delete it and choose GPUs again.", error=DeviceError)
    return DeviceChoice.from_dict(data or {})


# --- parsers: one per tool, each takes the tool's stdout and raises ValueError on output it does not understand ---

_UNITS = {"W", "°C", "C", "MHz", "%", "B", "KB", "MB", "GB", "MiB", "GiB", "Mb/s", "Gb/s", "J"}
_MISSING = {"N/A", "[N/A]", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]", ""}


def parse_nvidia_smi(text: str) -> list[GPU]:
    """Rows of `--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu --format=csv,noheader,nounits`."""
    gpus = []
    for line in _content_lines(text):
        fields = [part.strip() for part in line.split(",")]
        if len(fields) < 6:
            raise ValueError(f"expected 6 comma-separated fields, got {line[:80]!r}")
        # The name may itself contain a comma: take the fixed fields from both ends.
        index, uuid, used, total, util = fields[0], fields[1], fields[-3], fields[-2], fields[-1]
        name = ", ".join(fields[2:-3])
        gpus.append(GPU(index=_int(index, "index"), name=name, vendor="nvidia", memory_used_mib=_mib(used, "MiB"),
                        memory_total_mib=_mib(total, "MiB"), utilization_pct=_pct(util), uuid=uuid))
    return gpus


def parse_nvidia_apps(text: str) -> dict[str, list[tuple[int, str, int | None]]]:
    """`--query-compute-apps=gpu_uuid,pid,process_name,used_memory` rows by GPU uuid: (pid, name, MiB)."""
    apps: dict[str, list[tuple[int, str, int | None]]] = {}
    for line in _content_lines(text):
        if line.lower().startswith("no running"):
            continue
        fields = [part.strip() for part in line.split(",")]
        if len(fields) < 4:
            raise ValueError(f"expected 4 comma-separated fields, got {line[:80]!r}")
        uuid, pid, memory = fields[0], fields[1], fields[-1]
        name = Path(", ".join(fields[2:-1])).name or "?"
        used = None if memory in _MISSING else _mib(memory, "MiB")
        apps.setdefault(uuid, []).append((_int(pid, "pid"), name, used))
    return apps


def parse_amd_smi_monitor(text: str) -> list[GPU]:
    """The `amd-smi monitor` table: one header of column names, then one row per GPU with unit-suffixed values.

    Handles both layouts seen in the wild: ROCm 6 (GFX_UTIL, VRAM_USED, VRAM_TOTAL; "227 MB") and ROCm 7
    (GFX%, VRAM_USAGE; "2.7/16.0 GB").
    """
    lines = _content_lines(text)
    header_at = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU"]), None)
    if header_at is None:
        raise ValueError("no header line starting with GPU")
    columns = lines[header_at].split()
    gpus = []
    for line in lines[header_at + 1:]:
        if line.split()[:1] == ["GPU"]:
            break  # a second table (watch mode): the first one is enough
        values = _group_with_units(line.split())
        if len(values) != len(columns):
            raise ValueError(f"{len(values)} values for {len(columns)} columns in {line.strip()[:80]!r}")
        row = dict(zip(columns, values))
        used, total = _amd_memory(row)
        util = row.get("GFX_UTIL", row.get("GFX%", row.get("GFX_ACTIVITY")))
        index = _int(row["GPU"], "GPU")
        gpus.append(GPU(index=index, name=f"AMD GPU {index}", vendor="amd", memory_used_mib=used,
                        memory_total_mib=total, utilization_pct=_pct(util)))
    return gpus


def parse_rocm_smi_csv(text: str) -> list[GPU]:
    """`rocm-smi --showproductname --showmeminfo vram --showuse --csv`: a `device,...` header, one row per card."""
    lines = _content_lines(text)
    start = next((i for i, line in enumerate(lines) if line.lower().startswith("device,")), None)
    if start is None:
        raise ValueError("no CSV header starting with 'device,'")
    gpus = []
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items()}
        card = row.get("device", "")
        if not re.fullmatch(r"card\d+", card):
            continue
        if "vram total memory (b)" not in row or "vram total used memory (b)" not in row:
            raise ValueError("no 'VRAM Total Memory (B)' / 'VRAM Total Used Memory (B)' columns")
        name = row.get("card series") or row.get("card model") or f"AMD GPU {card[4:]}"
        gpus.append(GPU(index=int(card[4:]), name=name, vendor="amd",
                        memory_used_mib=_int(row["vram total used memory (b)"], "VRAM used") // 2**20,
                        memory_total_mib=_int(row["vram total memory (b)"], "VRAM total") // 2**20,
                        utilization_pct=_pct(row.get("gpu use (%)"))))
    return gpus


# --- running tools ---


def _run_tool(name: str, argv: list[str], timeout_s: float, env: dict[str, str], notes: list[str]) -> str | None:
    """stdout of a tool, or None with a note (absent, failed, timed out). The whole process group is killed on
    timeout: a wrapper script's children would otherwise keep the pipe open and the wait going."""
    exe = shutil.which(argv[0], path=env.get("PATH", ""))
    if exe is None:
        return None
    proc = subprocess.Popen([exe, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        notes.append(f"{name}: no answer within {timeout_s:g} s (driver busy or hung); skipped")
        return None
    if proc.returncode != 0:
        first = (err or out).strip().splitlines()[:1]
        notes.append(f"{name}: exit code {proc.returncode}" + (f" ({first[0][:160]})" if first else ""))
        return None
    return out


def _attach_nvidia_processes(gpus: list[GPU], timeout_s: float, env: dict[str, str], notes: list[str]) -> None:
    output = _run_tool("nvidia-smi", TOOL_COMMANDS["nvidia-smi-apps"], timeout_s, env, notes)
    if output is None:
        return
    try:
        apps = parse_nvidia_apps(output)
    except ValueError as exc:
        notes.append(f"nvidia-smi compute-apps: output not understood ({exc})")
        return
    for gpu in gpus:
        for pid, name, used in apps.get(gpu.uuid or "", []):
            gpu.processes.append(f"{name} (pid {pid}" + ("" if used is None else f", {_gib(used)} GiB") + ")")


def _detect_with_torch(notes: list[str]) -> DeviceReport | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    platform: Platform = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    gpus = []
    for index in range(torch.cuda.device_count()):
        free_b, total_b = torch.cuda.mem_get_info(index)
        gpus.append(GPU(index=index, name=torch.cuda.get_device_name(index), vendor="amd" if platform == "rocm"
                        else "nvidia", memory_used_mib=(total_b - free_b) // 2**20, memory_total_mib=total_b // 2**20))
    notes.append("GPU list from torch: indices count only the GPUs already visible to this process")
    return DeviceReport(platform, gpus, "torch", notes)


def _visibility_notes(env: Mapping[str, str], platform: Platform) -> list[str]:
    names = ("CUDA_VISIBLE_DEVICES",) if platform == "cuda" else ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                                                 "CUDA_VISIBLE_DEVICES")
    return [f"{name}={env[name]} is set in this shell; the run's choice replaces it" for name in names if name in env]


# --- small value helpers ---


def _content_lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def _group_with_units(tokens: list[str]) -> list[str]:
    """["83", "W", "16%", "N/A", "Mb/s"] -> ["83 W", "16%", "N/A Mb/s"]: a unit joins the value before it."""
    values: list[str] = []
    for token in tokens:
        if token in _UNITS and values:
            values[-1] = f"{values[-1]} {token}"
        else:
            values.append(token)
    return values


def _amd_memory(row: dict[str, str]) -> tuple[int, int]:
    if "VRAM_USED" in row and "VRAM_TOTAL" in row:
        return _mib(row["VRAM_USED"], "MB"), _mib(row["VRAM_TOTAL"], "MB")
    if "VRAM_USAGE" in row:  # "2.7/16.0 GB"
        match = re.fullmatch(r"([\d.]+)\s*/\s*([\d.]+)\s*([KMG]i?B)?", row["VRAM_USAGE"])
        if match:
            unit = match.group(3) or "MB"
            return _mib(match.group(1) + unit, unit), _mib(match.group(2) + unit, unit)
    raise ValueError(f"no VRAM_USED/VRAM_TOTAL or VRAM_USAGE column in {sorted(row)}")


def _mib(value: str, default_unit: str) -> int:
    """'227 MB' / '2.7GB' / '81920' (in default_unit) -> MiB. Tools print MB but count MiB."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMG]i?B)?\s*", value or "")
    if not match:
        raise ValueError(f"memory value {value!r} is not a number")
    scale = {"K": 1 / 1024, "M": 1, "G": 1024}[(match.group(2) or default_unit)[0]]
    return int(round(float(match.group(1)) * scale))


def _pct(value: str | None) -> float | None:
    if value is None or value.strip() in _MISSING or value.strip().startswith("N/A"):
        return None
    match = re.fullmatch(r"\s*([\d.]+)\s*%?\s*", value)
    if not match:
        raise ValueError(f"utilisation {value!r} is not a percentage")
    return float(match.group(1))


def _int(value: str, what: str) -> int:
    try:
        return int(value.strip())
    except (ValueError, AttributeError):
        raise ValueError(f"{what} {value!r} is not an integer") from None


def _gib(mib: int) -> str:
    return f"{mib / 1024:.1f}"


def _join(indices: list[int]) -> str:
    return ", ".join(str(i) for i in indices)
