"""Fused kernels for training (Triton, with plain torch references) and their patching into models.

Layout:
- `ops/<op>.py`: the public op: a torch reference with the same signature, the autograd Function and the backend
  choice. Importing an op never imports Triton.
- `triton_kernels/<op>.py`: the `@triton.jit` kernels and their launchers. They import `triton` at the top because
  a jitted kernel resolves its helpers as module globals (not closures), so they are imported only once a Triton
  backend has been chosen (`runtime.resolve_backend`).
- `patch.py`: `kernel_config` -> `apply_kernels(model, ...)` -> `KernelPlan`; one patch function per model family.
- `module_patches.py`: how a single module instance is patched (instance forwards and routed functions).
"""

from engine.kernels.ops.fused_linear_ce import chunked_linear_cross_entropy, fused_linear_cross_entropy
from engine.kernels.patch import KERNEL_NAMES, PATCHERS, KernelPlan, apply_kernels, parse_kernel_config

__all__ = [
    "KERNEL_NAMES",
    "PATCHERS",
    "KernelPlan",
    "apply_kernels",
    "chunked_linear_cross_entropy",
    "fused_linear_cross_entropy",
    "parse_kernel_config",
]
