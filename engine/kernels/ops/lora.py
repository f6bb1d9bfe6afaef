"""LoRA layers with a frozen base as single autograd functions: fewer passes over memory, fewer saved tensors.

PEFT computes a LoRA linear as ``base(x) + lora_B(lora_A(dropout(x))) * scaling``: besides the two matmuls
that matter, that is three more tensors of the output's size (B's output, its scaled copy, the sum), and
backward adds two more passes (the scaled gradient, and the adapter's input gradient summed into the base's).
Here the adapter's contribution goes into the base output in place (``addmm_`` with ``alpha=scaling``), and in
backward the adapter's input gradient is accumulated into the base's by the matmul itself. The frozen base's forward
products run on a weight reordered once for the CPU (engine/kernels/ops/frozen_gemm.py).

``lora_swiglu_mlp`` does the same for a whole gated MLP, ``down(silu(gate(x)) * up(x))`` with LoRA on all
three projections, and saves only x, gate(x) and up(x): the product ``silu(gate) * up`` (the down projection's
input, needed for its adapter's gradient) is recomputed in backward instead of being kept, which removes two
of the four intermediate-sized tensors autograd would keep per layer.

Only the adapter matrices train here: the base weight and bias are constants (LoRA freezes them); callers
check that (engine/kernels/training_paths.py), and fall back to the stock modules otherwise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels.ops.frozen_gemm import frozen_linear as _base


# The adapter's matmuls have one dimension of size rank (8, 16). MKL runs a product whose OUTPUT has few
# columns (tokens x rank, features x rank) several times slower than its transpose, whose output has few rows:
# on this CPU the gradient of B as ``dy.T @ z`` took 24-48 ms for a 2048-token, 1536-feature projection, 7-14x
# the 3.3 ms of ``(z.T @ dy).T``. So every skinny product here is computed with the rank as its row dimension:
# the adapter activation is kept as zT = A @ x.T (rank x tokens), and so are the gradients that flow through it.
def _rank_rows(lora_a: torch.Tensor, x2d: torch.Tensor) -> torch.Tensor:
    """(x @ A.T).T, rank x tokens, computed as A @ x.T."""
    return lora_a @ x2d.t()


class _LoraLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, scaling: float):
        x2d = x.reshape(-1, x.shape[-1])
        z_t = _rank_rows(lora_a, x2d)
        out = _base(x2d, weight, bias).addmm_(z_t.t(), lora_b.t(), alpha=scaling)
        ctx.save_for_backward(x2d, weight, lora_a, lora_b, z_t)
        ctx.scaling, ctx.in_shape = scaling, x.shape
        return out.view(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x2d, weight, lora_a, lora_b, z_t = ctx.saved_tensors
        dy = grad.reshape(-1, grad.shape[-1])
        dz_t = _rank_rows(lora_b.t(), dy).mul_(ctx.scaling)  # (dy @ B).T * scaling, rank x tokens
        d_a = dz_t @ x2d if ctx.needs_input_grad[3] else None
        d_b = (z_t @ dy).mul_(ctx.scaling).t() if ctx.needs_input_grad[4] else None
        dx = None
        if ctx.needs_input_grad[0]:
            dx = (dy @ weight).addmm_(dz_t.t(), lora_a).view(ctx.in_shape)
        return dx, None, None, d_a, d_b, None


def lora_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
                lora_b: torch.Tensor, scaling: float) -> torch.Tensor:
    """``x @ weight.T + bias + scaling * (x @ lora_a.T) @ lora_b.T`` with weight and bias frozen."""
    return _LoraLinear.apply(x, weight, bias, lora_a, lora_b, float(scaling))


class _LoraSwiGLU(torch.autograd.Function):
    """down(silu(gate(x)) * up(x)); each projection is (weight, bias, lora_a, lora_b, scaling)."""

    @staticmethod
    def forward(ctx, x, wg, bg, ag, bg_lora, wu, bu, au, bu_lora, wd, bd, ad, bd_lora, scales):
        sg, su, sd = scales
        x2d = x.reshape(-1, x.shape[-1])
        rank_g = ag.shape[0]
        z_gu = _rank_rows(torch.cat((ag, au)), x2d)  # both adapters read x once
        gate = _base(x2d, wg, bg).addmm_(z_gu[:rank_g].t(), bg_lora.t(), alpha=sg)
        up = _base(x2d, wu, bu).addmm_(z_gu[rank_g:].t(), bu_lora.t(), alpha=su)
        hidden = F.silu(gate).mul_(up)
        z_d = _rank_rows(ad, hidden)
        out = _base(hidden, wd, bd).addmm_(z_d.t(), bd_lora.t(), alpha=sd)
        ctx.save_for_backward(x2d, gate, up, z_gu, z_d, wg, ag, bg_lora, wu, au, bu_lora, wd, ad, bd_lora)
        ctx.scales, ctx.in_shape = scales, x.shape
        return out.view(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x2d, gate, up, z_gu, z_d, wg, ag, bg_lora, wu, au, bu_lora, wd, ad, bd_lora = ctx.saved_tensors
        sg, su, sd = ctx.scales
        rank_g = ag.shape[0]
        dy = grad.reshape(-1, grad.shape[-1])
        # down projection
        dz_d = _rank_rows(bd_lora.t(), dy).mul_(sd)
        d_bd = (z_d @ dy).mul_(sd).t()
        d_hidden = (dy @ wd).addmm_(dz_d.t(), ad)
        act = F.silu(gate)
        d_ad = dz_d @ (act * up)  # the down projection's input, recomputed rather than saved
        d_up = act.mul_(d_hidden)  # reuses the activation's buffer
        d_gate = torch.ops.aten.silu_backward(d_hidden.mul_(up), gate)
        # gate and up projections
        dz_gu = torch.cat((_rank_rows(bg_lora.t(), d_gate).mul_(sg), _rank_rows(bu_lora.t(), d_up).mul_(su)))
        d_bg = (z_gu[:rank_g] @ d_gate).mul_(sg).t()
        d_bu = (z_gu[rank_g:] @ d_up).mul_(su).t()
        d_a = dz_gu @ x2d
        dx = None
        if ctx.needs_input_grad[0]:
            dx = (d_gate @ wg).addmm_(d_up, wu).addmm_(dz_gu.t(), torch.cat((ag, au))).view(ctx.in_shape)
        return (dx, None, None, d_a[:rank_g], d_bg, None, None, d_a[rank_g:], d_bu, None, None, d_ad, d_bd, None)


def lora_swiglu_mlp(x: torch.Tensor, gate: tuple, up: tuple, down: tuple) -> torch.Tensor:
    """``down(silu(gate(x)) * up(x))`` where each projection is (weight, bias, lora_a, lora_b, scaling), the
    weights and biases frozen."""
    (wg, bg, ag, bgl, sg), (wu, bu, au, bul, su), (wd, bd, ad, bdl, sd) = gate, up, down
    return _LoraSwiGLU.apply(x, wg, bg, ag, bgl, wu, bu, au, bul, wd, bd, ad, bdl, (float(sg), float(su), float(sd)))
