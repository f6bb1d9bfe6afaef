"""Fused gated activation of the MLP: act(gate) * up, for SwiGLU (SiLU) and GeGLU (tanh-GELU, the Gemma MLP).

`swiglu_reference` is what the Hugging Face MLP computes between its projections
(`act_fn(gate_proj(x)) * up_proj(x)`); `swiglu` runs it as one Triton kernel forward and one backward.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from engine.kernels.runtime import BackendChoice, resolve_backend

Activation = Literal["silu", "gelu_tanh"]
ACTIVATIONS: tuple[str, ...] = ("silu", "gelu_tanh")


def swiglu_reference(gate: torch.Tensor, up: torch.Tensor, activation: Activation = "silu") -> torch.Tensor:
    """The torch definition (differentiable by autograd)."""
    if activation == "silu":
        return F.silu(gate) * up
    if activation == "gelu_tanh":
        return F.gelu(gate, approximate="tanh") * up
    raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")


class _TritonGated(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor, activation: Activation):
        from engine.kernels.triton_kernels import swiglu as kernels

        gate, up = gate.contiguous(), up.contiguous()
        ctx.save_for_backward(gate, up)
        ctx.gelu_tanh = activation == "gelu_tanh"
        return kernels.gated_forward(gate, up, ctx.gelu_tanh)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        from engine.kernels.triton_kernels import swiglu as kernels

        gate, up = ctx.saved_tensors
        d_gate, d_up = kernels.gated_backward(dy, gate, up, ctx.gelu_tanh)
        return d_gate, d_up, None


def swiglu(gate: torch.Tensor, up: torch.Tensor, activation: Activation = "silu", *,
           backend: BackendChoice = "auto") -> torch.Tensor:
    """act(gate) * up; Triton where it runs (see `resolve_backend`), else the reference."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")
    if gate.shape != up.shape or gate.dtype != up.dtype:
        raise ValueError(f"gate {tuple(gate.shape)} {gate.dtype} and up {tuple(up.shape)} {up.dtype} must match")
    if resolve_backend("swiglu", gate.device, backend) == "torch":
        return swiglu_reference(gate, up, activation)
    return _TritonGated.apply(gate, up, activation)
