"""Triton gated activation: y = act(gate) * up, elementwise, with act = SiLU (SwiGLU) or tanh-GELU (GeGLU).

The backward recomputes act(gate) from the saved inputs instead of saving it, so the op keeps two tensors for
backward (gate, up) where the eager module keeps three (gate, act(gate), up).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 1024


@triton.jit
def _act_and_grad(g, GELU_TANH: tl.constexpr):
    """act(g) and d act / d g, in fp32."""
    if GELU_TANH:
        # tanh saturates long before |inner| = 20; clamping keeps exp() finite in every backend
        inner = tl.minimum(tl.maximum(0.7978845608028654 * (g + 0.044715 * g * g * g), -20.0), 20.0)
        t = 2.0 * tl.sigmoid(2.0 * inner) - 1.0  # tanh through sigmoid: works in every backend
        act = 0.5 * g * (1.0 + t)
        d_act = 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * g * g)
    else:
        s = tl.sigmoid(g)
        act = g * s
        d_act = s * (1.0 + g * (1.0 - s))
    return act, d_act


@triton.jit
def _gated_fwd(GATE, UP, Y, n, GELU_TANH: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(GATE + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(UP + offs, mask=mask, other=0.0).to(tl.float32)
    act, _ = _act_and_grad(g, GELU_TANH)
    tl.store(Y + offs, (act * u).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _gated_bwd(DY, GATE, UP, DGATE, DUP, n, GELU_TANH: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(GATE + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(UP + offs, mask=mask, other=0.0).to(tl.float32)
    act, d_act = _act_and_grad(g, GELU_TANH)
    tl.store(DGATE + offs, (dy * u * d_act).to(DGATE.dtype.element_ty), mask=mask)
    tl.store(DUP + offs, (dy * act).to(DUP.dtype.element_ty), mask=mask)


def gated_forward(gate: torch.Tensor, up: torch.Tensor, gelu_tanh: bool) -> torch.Tensor:
    """act(gate) * up for contiguous tensors of the same shape."""
    y = torch.empty_like(gate)
    n = gate.numel()
    if n:
        _gated_fwd[(triton.cdiv(n, _BLOCK),)](gate, up, y, n, GELU_TANH=gelu_tanh, BLOCK=_BLOCK)
    return y


def gated_backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
                   gelu_tanh: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(d gate, d up) for contiguous tensors of the same shape."""
    dy = dy.contiguous()
    d_gate, d_up = torch.empty_like(gate), torch.empty_like(up)
    n = gate.numel()
    if n:
        _gated_bwd[(triton.cdiv(n, _BLOCK),)](dy, gate, up, d_gate, d_up, n, GELU_TANH=gelu_tanh, BLOCK=_BLOCK)
    return d_gate, d_up
