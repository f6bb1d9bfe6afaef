"""RMSNorm and RoPE as autograd functions in plain torch, with fewer passes over memory than the stock modules.

Without a compiler, every elementwise op of a Hugging Face module is one pass over a (tokens x hidden) tensor
and usually one more allocation; in backward autograd adds one pass per op again. On a CPU, where those passes
run at memory speed next to matmuls at compute speed, they were about a quarter of a LoRA step. These write
the same maths with fewer passes, in place where nothing else reads the buffer:

- RMSNorm (Llama cast: the normalised row is computed in fp32 and rounded to the input dtype before the weight,
  of that dtype, multiplies it; fp32 and bf16): the sum of squares in one reduction (no squared copy), and
  backward in three passes instead of seven. Saves x and the per-row 1/rms, as the stock module does. Its
  output names them, so the LoRA functions that read it (engine/kernels/ops/lora.py) keep those rather than the
  output itself: one (tokens x hidden) tensor less per norm and layer, rebuilt in backward by one more
  elementwise pass.
- RoPE (rotate-half, as ``apply_rotary_pos_emb``): ``q*cos`` then the rotated half added in place with
  ``addcmul_``, instead of negating, concatenating, multiplying and adding into four new tensors; backward
  likewise. Saves only cos and sin.

Results equal the stock modules up to float rounding (the sum of squares is accumulated in another order).
"""

from __future__ import annotations

import torch

_PARTS_ATTR = "_lfa_normed_parts"


def _wide(x: torch.Tensor) -> torch.dtype:
    """The dtype a norm computes in: fp32, or x's own when wider."""
    return torch.promote_types(x.dtype, torch.float32)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps: float):
        width = x.shape[-1]
        sum_sq = torch.linalg.vector_norm(x, 2, dim=-1, keepdim=True, dtype=_wide(x)).square_()
        rstd = sum_sq.div_(width).add_(eps).rsqrt_()
        out = renormalize(x, weight, rstd)
        ctx.save_for_backward(x, weight, rstd)
        ctx.mark_non_differentiable(rstd)
        return out, rstd

    @staticmethod
    def backward(ctx, grad, _grad_rstd):
        x, weight, rstd = ctx.saved_tensors
        grad_w = None
        if ctx.needs_input_grad[1]:
            grad_w = (grad * renormalize(x, 1.0, rstd)).reshape(-1, x.shape[-1]).sum(0)
        # the gradient reaches the fp32 normalised row through the rounding, as autograd takes it through a cast
        dyw = (grad * weight).to(_wide(x))
        x32 = x.to(_wide(x))
        # d x_hat . x_hat per row, as (dyw . x) * rstd: no normalised copy of x is needed
        dot = torch.linalg.vecdot(dyw, x32, dim=-1).unsqueeze(-1)
        coef = dot.mul_(rstd.pow(3)).div_(x.shape[-1])
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = dyw.mul_(rstd).addcmul_(x32, coef, value=-1.0).to(x.dtype)
        return grad_x, grad_w, None


def renormalize(x: torch.Tensor, weight: torch.Tensor | float, rstd: torch.Tensor) -> torch.Tensor:
    """The normalised output from its parts, with the same operations as the forward: bit for bit the same. The
    row is normalised in fp32 (rstd is fp32) and rounded to x's dtype before the weight multiplies it."""
    return (x * rstd).to(x.dtype).mul_(weight)


def rms_norm_fewer_passes(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * (x / sqrt(mean(x^2) + eps))`` as LlamaRMSNorm computes it, for x and weight both fp32 or both
    bf16 (the mean and the division in fp32, as there).

    The output carries its parts (``normed_parts``): a consumer that would keep it for backward can keep those
    instead, which the norm keeps anyway, and rebuild it with ``renormalize``."""
    out, rstd = _RMSNorm.apply(x, weight, float(eps))
    out.__dict__[_PARTS_ATTR] = (x, weight, rstd, out._version)
    return out


def normed_parts(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(x, weight, rstd) when ``t`` is an output of ``rms_norm_fewer_passes`` not changed in place since, else None."""
    parts = t.__dict__.get(_PARTS_ATTR)
    if parts is None or parts[3] != t._version:
        return None
    return parts[:3]


def _add_rotated(out: torch.Tensor, x: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """out += rotate_half(x) * sin in place, rotate_half(x) = (-x2, x1) over the two halves of the last dim."""
    half = x.shape[-1] // 2
    out[..., :half].addcmul_(x[..., half:], sin[..., :half], value=-1.0)
    out[..., half:].addcmul_(x[..., :half], sin[..., half:])
    return out


def _add_rotated_transposed(out: torch.Tensor, grad: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """out += rotate_half^T(grad * sin) in place: the gradient of the rotated term, (g2 s2, -g1 s1)."""
    half = grad.shape[-1] // 2
    out[..., :half].addcmul_(grad[..., half:], sin[..., half:])
    out[..., half:].addcmul_(grad[..., :half], sin[..., :half], value=-1.0)
    return out


class _Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _add_rotated(x * cos, x, sin)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return _add_rotated_transposed(grad * cos, grad, sin), None, None


def rope_fewer_passes(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                      unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``apply_rotary_pos_emb`` (full rotary: cos covers every feature of a head)."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return _Rope.apply(q, cos, sin), _Rope.apply(k, cos, sin)
