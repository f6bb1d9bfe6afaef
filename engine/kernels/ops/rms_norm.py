"""RMSNorm: y = x / sqrt(mean(x^2) + eps) * (offset + weight).

`rms_norm_reference` is the plain torch definition, written to match the Hugging Face modules bit for bit in fp32;
`rms_norm` runs the Triton kernel (forward and backward) or falls back to the reference.

cast="llama": the normalised row is rounded to the input dtype before the weight multiplies it (LlamaRMSNorm,
Qwen2/3, Mistral); the output dtype follows torch promotion of (weight, input), as `weight * x` does there.
cast="gemma": everything in fp32 and one rounding to the input dtype at the end (GemmaRMSNorm, Qwen3.5 with
offset=1.0, the zero-centred weight).
"""

from __future__ import annotations

from typing import Literal

import torch

from engine.kernels.runtime import BackendChoice, resolve_backend

CastMode = Literal["llama", "gemma"]


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, offset: float = 0.0,
                       cast: CastMode = "llama") -> torch.Tensor:
    """The torch definition (differentiable by autograd)."""
    x32 = x.to(torch.float32)
    x_hat = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    if cast == "gemma":
        return (x_hat * (offset + weight.float())).type_as(x)
    scale = weight + offset if offset else weight
    return scale * x_hat.to(x.dtype)


class _TritonRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float, cast: CastMode):
        from engine.kernels.triton_kernels import rms_norm as kernels

        shape = x.shape
        x2d = x.reshape(-1, shape[-1])
        if x2d.stride(-1) != 1:
            x2d = x2d.contiguous()
        gemma_cast = cast == "gemma"
        out_dtype = x.dtype if gemma_cast else torch.result_type(weight, x)
        y, rstd = kernels.rms_norm_forward(x2d, weight.contiguous(), eps, offset, gemma_cast, out_dtype)
        ctx.save_for_backward(x2d, weight, rstd)
        ctx.offset, ctx.gemma_cast, ctx.shape = offset, gemma_cast, shape
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        from engine.kernels.triton_kernels import rms_norm as kernels

        x2d, weight, rstd = ctx.saved_tensors
        dx, dw = kernels.rms_norm_backward(dy.reshape(-1, dy.shape[-1]), x2d, weight.contiguous(), rstd,
                                           ctx.offset, ctx.gemma_cast)
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return dx.view(ctx.shape), dw, None, None, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, offset: float = 0.0,
             cast: CastMode = "llama", backend: BackendChoice = "auto") -> torch.Tensor:
    """RMSNorm over the last dimension, Triton where it runs (see `resolve_backend`), else the reference."""
    if resolve_backend("rms_norm", x.device, backend) == "torch":
        return rms_norm_reference(x, weight, eps, offset=offset, cast=cast)
    return _TritonRMSNorm.apply(x, weight, eps, offset, cast)
