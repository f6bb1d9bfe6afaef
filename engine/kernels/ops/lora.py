"""LoRA layers with a frozen base as single autograd functions: fewer passes over memory, fewer saved tensors.

PEFT computes a LoRA linear as ``base(x) + lora_B(lora_A(dropout(x))) * scaling``: besides the two matmuls
that matter, that is three more tensors of the output's size (B's output, its scaled copy, the sum), and
backward adds two more passes (the scaled gradient, and the adapter's input gradient summed into the base's).
Here the adapter's contribution goes into the base output in place (``addmm_`` with ``alpha=scaling``), and in
backward the adapter's input gradient is accumulated into the base's by the matmul itself. The frozen base's forward
products run on a weight reordered once for the CPU, and the adapter's skinny products through oneDNN
(engine/kernels/ops/frozen_gemm.py).

``lora_swiglu_mlp`` does the same for a whole gated MLP, ``down(silu(gate(x)) * up(x))`` with LoRA on all
three projections, and saves only x, gate(x) and up(x): the product ``silu(gate) * up`` (the down projection's
input, needed for its adapter's gradient) is recomputed in backward instead of being kept, which removes two
of the four intermediate-sized tensors autograd would keep per layer.

When x is an fp32 output of the fast RMSNorm (engine/kernels/ops/eager_fused.py), as the q/k/v and MLP inputs of
a decoder layer are, neither function keeps x: they keep the norm's input and 1/rms, which the norm keeps anyway,
and rebuild x in backward bit for bit. On SmolLM2-135M that is two (tokens x 576) tensors less per layer.

Only the adapter matrices train here: the base weight and bias are constants (LoRA freezes them); callers
check that (engine/kernels/training_paths.py), and fall back to the stock modules otherwise.

The products run in x's dtype, which the frozen weights share: fp32, or bf16 as under bf16 autocast on a CPU,
where the adapters are kept in fp32 and rounded to bf16 for their products as autocast rounds them (the copies
are rank-wide, small); their gradients come back in their own dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels.ops.eager_fused import normed_parts, renormalize
from engine.kernels.ops.frozen_gemm import frozen_linear as _base
from engine.kernels.ops.frozen_gemm import skinny_product as _skinny

# Layouts: the adapter activation z = x @ A.T is kept as tokens x rank, and so is the gradient that flows
# through it, dz = dy @ B. The weight gradients are rank-row products, dA = dz.T @ x and dB = (z.T @ dy).T:
# a result with few columns (dy.T @ z) ran 7-14x slower in MKL than its transpose.


def _save(ctx, x: torch.Tensor, *tensors: torch.Tensor) -> None:
    """save_for_backward(x, *tensors), where an fp32 x is kept as the norm's parts when it was made by the fast
    RMSNorm. A bf16 x is kept as it is: half the memory, and rebuilding it would take a cast more per consumer
    (SmolLM2-135M, 256-token rows, bf16: 1.05x the step, 50 MB more peak memory)."""
    kept = (normed_parts(x) if x.dtype == torch.float32 else None) or (x,)
    ctx.kept, ctx.in_shape = len(kept), x.shape
    ctx.save_for_backward(*kept, *tensors)


def _saved(ctx) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """(x as 2-D rows, the other saved tensors), x rebuilt from the norm's parts where it was kept as those."""
    saved = ctx.saved_tensors
    kept, rest = saved[:ctx.kept], saved[ctx.kept:]
    x = kept[0] if len(kept) == 1 else renormalize(*kept)
    return x.reshape(-1, ctx.in_shape[-1]), rest


def _adapters(ctx, x: torch.Tensor, *adapters: torch.Tensor) -> list[torch.Tensor]:
    """The adapter matrices in x's dtype; their own dtypes are remembered for their gradients (``_as_adapters``)."""
    ctx.adapter_dtypes = [a.dtype for a in adapters]
    return [a.to(x.dtype) for a in adapters]


def _as_adapters(ctx, *grads: torch.Tensor | None) -> list[torch.Tensor | None]:
    return [None if g is None else g.to(dtype) for g, dtype in zip(grads, ctx.adapter_dtypes)]


class _LoraLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, lora_a, lora_b, scaling: float):
        lora_a, lora_b = _adapters(ctx, x, lora_a, lora_b)
        x2d = x.reshape(-1, x.shape[-1])
        z = _skinny(x2d, lora_a)
        out = _base(x2d, weight, bias).addmm_(z, lora_b.t(), alpha=scaling)
        _save(ctx, x, weight, lora_a, lora_b, z)
        ctx.scaling = scaling
        return out.view(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x2d, (weight, lora_a, lora_b, z) = _saved(ctx)
        dy = grad.reshape(-1, grad.shape[-1])
        dz = _skinny(dy, lora_b.t()).mul_(ctx.scaling)  # dy @ B * scaling, tokens x rank
        d_a = _skinny(dz.t(), x2d.t()) if ctx.needs_input_grad[3] else None
        d_b = _skinny(z.t(), dy.t()).mul_(ctx.scaling).t() if ctx.needs_input_grad[4] else None
        dx = None
        if ctx.needs_input_grad[0]:
            dx = (dy @ weight).addmm_(dz, lora_a).view(ctx.in_shape)
        d_a, d_b = _as_adapters(ctx, d_a, d_b)
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
        ag, bg_lora, au, bu_lora, ad, bd_lora = _adapters(ctx, x, ag, bg_lora, au, bu_lora, ad, bd_lora)
        x2d = x.reshape(-1, x.shape[-1])
        rank_g = ag.shape[0]
        z_gu = _skinny(x2d, torch.cat((ag, au)))  # both adapters read x once
        gate = _base(x2d, wg, bg).addmm_(z_gu[:, :rank_g], bg_lora.t(), alpha=sg)
        up = _base(x2d, wu, bu).addmm_(z_gu[:, rank_g:], bu_lora.t(), alpha=su)
        hidden = F.silu(gate).mul_(up)
        z_d = _skinny(hidden, ad)
        out = _base(hidden, wd, bd).addmm_(z_d, bd_lora.t(), alpha=sd)
        _save(ctx, x, gate, up, z_gu, z_d, wg, ag, bg_lora, wu, au, bu_lora, wd, ad, bd_lora)
        ctx.scales = scales
        return out.view(*x.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x2d, (gate, up, z_gu, z_d, wg, ag, bg_lora, wu, au, bu_lora, wd, ad, bd_lora) = _saved(ctx)
        sg, su, sd = ctx.scales
        rank_g = ag.shape[0]
        dy = grad.reshape(-1, grad.shape[-1])
        # down projection
        dz_d = _skinny(dy, bd_lora.t()).mul_(sd)
        d_bd = _skinny(z_d.t(), dy.t()).mul_(sd).t()
        d_hidden = (dy @ wd).addmm_(dz_d, ad)
        act = F.silu(gate)
        d_ad = _skinny(dz_d.t(), (act * up).t())  # the down projection's input, recomputed rather than saved
        d_up = act.mul_(d_hidden)  # reuses the activation's buffer
        d_gate = torch.ops.aten.silu_backward(d_hidden.mul_(up), gate)
        # gate and up projections
        dz_gu = torch.cat((_skinny(d_gate, bg_lora.t()).mul_(sg), _skinny(d_up, bu_lora.t()).mul_(su)), dim=1)
        d_bg = _skinny(z_gu[:, :rank_g].t(), d_gate.t()).mul_(sg).t()
        d_bu = _skinny(z_gu[:, rank_g:].t(), d_up.t()).mul_(su).t()
        d_a = _skinny(dz_gu.t(), x2d.t())
        dx = None
        if ctx.needs_input_grad[0]:
            dx = (d_gate @ wg).addmm_(d_up, wu).addmm_(dz_gu, torch.cat((ag, au))).view(ctx.in_shape)
        d_ag, d_bg, d_au, d_bu, d_ad, d_bd = _as_adapters(ctx, d_a[:rank_g], d_bg, d_a[rank_g:], d_bu, d_ad, d_bd)
        return (dx, None, None, d_ag, d_bg, None, None, d_au, d_bu, None, None, d_ad, d_bd, None)


def lora_swiglu_mlp(x: torch.Tensor, gate: tuple, up: tuple, down: tuple) -> torch.Tensor:
    """``down(silu(gate(x)) * up(x))`` where each projection is (weight, bias, lora_a, lora_b, scaling), the
    weights and biases frozen."""
    (wg, bg, ag, bgl, sg), (wu, bu, au, bul, su), (wd, bd, ad, bdl, sd) = gate, up, down
    return _LoraSwiGLU.apply(x, wg, bg, ag, bgl, wu, bu, au, bul, wd, bd, ad, bdl, (float(sg), float(su), float(sd)))
