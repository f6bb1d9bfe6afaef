"""Where a kernel can run: Triton availability, the interpreter, and backend selection.

Triton is an optional extra (about 1 GB, GPU only), so nothing here imports it at module level: `import engine`
must work on a machine without it. The Triton kernels themselves live in `engine.kernels.triton_kernels` and are
imported only when a Triton backend has been chosen.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Literal

import torch

from engine.errors import DeviceError

Backend = Literal["triton", "torch"]
BackendChoice = Literal["auto", "triton", "torch"]
BACKEND_CHOICES: tuple[str, ...] = ("auto", "triton", "torch")


def triton_installed() -> bool:
    """True when the `triton` package can be imported (it is not imported here)."""
    return importlib.util.find_spec("triton") is not None


def interpreter_enabled() -> bool:
    """True when TRITON_INTERPRET=1: Triton kernels then run on CPU tensors, slowly, for testing."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def device_type(device: torch.device | str) -> str:
    """'cuda' (also for ROCm builds), 'cpu', 'mps', ... from a device or a string like 'cuda:1'."""
    return torch.device(device).type


def triton_runs_on(device: torch.device | str) -> bool:
    """Whether a Triton kernel can launch on tensors of this device type here."""
    if not triton_installed():
        return False
    kind = device_type(device)
    if kind == "cuda":
        return torch.cuda.is_available()
    return kind == "cpu" and interpreter_enabled()


def triton_problem(device: torch.device | str) -> str | None:
    """Why Triton cannot run on `device` here (what to do next included), or None when it can."""
    kind = device_type(device)
    if kind == "cuda" and not torch.cuda.is_available():
        return "this machine has no CUDA/ROCm GPU that torch can see"
    if kind not in ("cuda", "cpu"):
        return f"Triton has no backend for '{kind}' devices; it runs on NVIDIA (CUDA) and AMD (ROCm) GPUs"
    if kind == "cpu" and not interpreter_enabled():
        return "Triton kernels need a CUDA/ROCm GPU; on CPU they run only under TRITON_INTERPRET=1 (tests)"
    if not triton_installed():
        return "the 'triton' package is not installed (pip install 'lf-assistant[kernels]')"
    return None


def require_triton(what: str, device: torch.device | str) -> None:
    """Raise DeviceError when the Triton kernel `what` cannot run on `device` here."""
    problem = triton_problem(device)
    if problem is not None:
        raise DeviceError(
            f"The Triton kernel '{what}' cannot run here: {problem}. "
            "Use kernel_config: {name: auto} (it picks what this machine supports) or remove the kernel."
        )


def resolve_backend(what: str, device: torch.device | str, backend: BackendChoice) -> Backend:
    """Turn 'auto' into a concrete backend for one op call.

    'auto' means Triton on a GPU where it runs and the torch path otherwise; the interpreter is never picked by
    'auto' because it is thousands of times slower than eager torch. An explicit 'triton' is checked.
    """
    if backend == "torch":
        return "torch"
    if backend == "triton":
        require_triton(what, device)
        return "triton"
    if backend != "auto":
        raise ValueError(f"unknown kernel backend {backend!r}; expected one of {BACKEND_CHOICES}")
    return "triton" if device_type(device) == "cuda" and triton_runs_on(device) else "torch"


def launch_programs(device: torch.device) -> int:
    """Persistent programs for a row-reduction kernel: one per SM on a GPU, a few when interpreted."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def next_power_of_2(value: int) -> int:
    """The smallest power of two >= value (Triton block sizes must be powers of two)."""
    return 1 << max(0, (int(value) - 1).bit_length())
