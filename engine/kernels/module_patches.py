"""How one module instance of a Hugging Face model gets a kernel: the building blocks of `engine.kernels.patch`.

Patches are per instance, never per class: another model of the same family in the process (a reference model,
the unpatched copy a test compares with) keeps the stock code.
- RMSNorm and MLP modules get a new `forward` bound to the instance.
- RoPE and the gated delta rule are module-level functions that the attention forward looks up by name at call
  time (`apply_rotary_pos_emb(...)` inside `Qwen3Attention.forward`). Replacing them in the modeling module would
  switch every model of that family at once, so the name is routed instead: `RoutedFunction` calls the stock
  function unless the caller is inside the forward of a patched instance, which sets the override in a context
  variable for the duration of its forward (re-entered as well when gradient checkpointing recomputes it).
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
from torch import nn

from engine.kernels.ops.rms_norm import CastMode, rms_norm
from engine.kernels.ops.swiglu import Activation, swiglu
from engine.kernels.runtime import Backend

_OVERRIDES: contextvars.ContextVar[dict[str, Callable[..., Any]]] = contextvars.ContextVar(
    "lfa_kernel_overrides", default={}
)
PATCHED_ATTR = "_lfa_kernels"  # set of kernel names patched into a module instance


class RoutedFunction:
    """Stands in for a modeling-module function: the stock one, unless a patched forward overrides it."""

    def __init__(self, name: str, original: Callable[..., Any]):
        self.name = name
        self.original = original
        functools.update_wrapper(self, original)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _OVERRIDES.get().get(self.name, self.original)(*args, **kwargs)


def route_function(modeling: ModuleType, name: str) -> None:
    """Install a RoutedFunction for `modeling.<name>` once; behaviour is unchanged until an override is active."""
    current = getattr(modeling, name)
    if not isinstance(current, RoutedFunction):
        setattr(modeling, name, RoutedFunction(name, current))


def _forward_with_overrides(inner_forward: Callable[..., Any], overrides: dict[str, Callable[..., Any]],
                            *args: Any, **kwargs: Any) -> Any:
    token = _OVERRIDES.set({**_OVERRIDES.get(), **overrides})
    try:
        return inner_forward(*args, **kwargs)
    finally:
        _OVERRIDES.reset(token)


def _mark(module: nn.Module, kernel: str) -> bool:
    """Record `kernel` on the instance; False when it was already there (patching twice is a no-op)."""
    done = module.__dict__.setdefault(PATCHED_ATTR, set())
    if kernel in done:
        return False
    done.add(kernel)
    return True


def override_in_forward(module: nn.Module, kernel: str, overrides: dict[str, Callable[..., Any]]) -> None:
    """Make `module`'s forward (whatever it currently is: stock, or wrapped by accelerate hooks) see `overrides`."""
    if _mark(module, kernel):
        module.forward = functools.partial(_forward_with_overrides, module.forward, overrides)


def _norm_forward(module: nn.Module, offset: float, cast: CastMode, backend: Backend,
                  hidden_states: torch.Tensor) -> torch.Tensor:
    eps = getattr(module, "variance_epsilon", None)
    eps = module.eps if eps is None else eps
    return rms_norm(hidden_states, module.weight, eps, offset=offset, cast=cast, backend=backend)


def patch_rms_norm(module: nn.Module, offset: float, cast: CastMode, backend: Backend) -> None:
    """Route an RMSNorm module through `rms_norm` (its weight and eps stay where they are)."""
    if _mark(module, "rms_norm"):
        module.forward = functools.partial(_norm_forward, module, offset, cast, backend)


def _mlp_forward(module: nn.Module, activation: Activation, backend: Backend, x: torch.Tensor) -> torch.Tensor:
    # the projections are called as modules, so LoRA layers that wrap them keep working
    return module.down_proj(swiglu(module.gate_proj(x), module.up_proj(x), activation, backend=backend))


def gated_activation(act_fn: nn.Module) -> Activation | None:
    """The fused activation matching an MLP's `act_fn`, or None when it has no fused kernel."""
    from transformers.activations import GELUTanh, SiLUActivation

    if isinstance(act_fn, (SiLUActivation, nn.SiLU)):
        return "silu"
    if isinstance(act_fn, GELUTanh) or (isinstance(act_fn, nn.GELU) and act_fn.approximate == "tanh"):
        return "gelu_tanh"
    return None


def patch_gated_mlp(module: nn.Module, backend: Backend) -> str | None:
    """Fuse act(gate) * up in a gate/up/down MLP; returns why not when it cannot."""
    if not all(hasattr(module, name) for name in ("gate_proj", "up_proj", "down_proj", "act_fn")):
        return f"{type(module).__name__} is not a gate/up/down MLP"
    activation = gated_activation(module.act_fn)
    if activation is None:
        return f"{type(module).__name__} uses {type(module.act_fn).__name__}, which has no fused kernel"
    if _mark(module, "swiglu"):
        module.forward = functools.partial(_mlp_forward, module, activation, backend)
    return None
