"""Rotary position embedding applied to q and k in one call (the Hugging Face `apply_rotary_pos_emb`).

`rope_reference` matches `apply_rotary_pos_emb` of Llama/Qwen3 (full rotary) and of Qwen3.5/Qwen3-Next (partial
rotary: only the first cos.shape[-1] features of each head rotate). `rope` runs one Triton kernel for q and k
together forward and backward. cos/sin are position tables (buffers), so no gradient flows to them.
"""

from __future__ import annotations

import torch

from engine.kernels.runtime import BackendChoice, resolve_backend


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rope_reference(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch definition: rotate-half RoPE over the first cos.shape[-1] features, the rest passes through."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rotary = cos.shape[-1]
    if rotary == q.shape[-1]:
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
    q_rot, q_pass = q[..., :rotary], q[..., rotary:]
    k_rot, k_pass = k[..., :rotary], k[..., rotary:]
    q_embed = torch.cat([q_rot * cos + _rotate_half(q_rot) * sin, q_pass], dim=-1)
    k_embed = torch.cat([k_rot * cos + _rotate_half(k_rot) * sin, k_pass], dim=-1)
    return q_embed, k_embed


class _TritonRope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads_dim: int):
        from engine.kernels.triton_kernels import rope as kernels

        ctx.save_for_backward(cos, sin)
        ctx.heads_dim = heads_dim
        return kernels.rope_apply(q, k, cos, sin, heads_dim, backward=False)

    @staticmethod
    def backward(ctx, dq: torch.Tensor, dk: torch.Tensor):
        from engine.kernels.triton_kernels import rope as kernels

        cos, sin = ctx.saved_tensors
        dq_in, dk_in = kernels.rope_apply(_unit_last_stride(dq), _unit_last_stride(dk), cos, sin, ctx.heads_dim,
                                          backward=True)
        return dq_in, dk_in, None, None, None


def _unit_last_stride(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _check_shapes(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, unsqueeze_dim: int) -> None:
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or unsqueeze_dim not in (1, 2):
        raise ValueError("rope expects 4-D q/k, 3-D cos/sin [batch, seq, rotary_dim] and unsqueeze_dim 1 or 2, got "
                         f"q {tuple(q.shape)}, k {tuple(k.shape)}, cos {tuple(cos.shape)}, dim {unsqueeze_dim}")
    seq_dim = 2 if unsqueeze_dim == 1 else 1
    rotary = cos.shape[-1]
    if rotary % 2 or rotary > q.shape[-1] or q.shape[-1] != k.shape[-1] or cos.shape[1] != q.shape[seq_dim]:
        raise ValueError(f"rope: cos {tuple(cos.shape)} does not fit q {tuple(q.shape)} / k {tuple(k.shape)}")


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1, *,
         backend: BackendChoice = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """(q_embed, k_embed) like `apply_rotary_pos_emb`; Triton where it runs, else the reference."""
    if resolve_backend("rope", q.device, backend) == "torch":
        return rope_reference(q, k, cos, sin, unsqueeze_dim)
    _check_shapes(q, k, cos, unsqueeze_dim)
    batch = q.shape[0]
    cos, sin = (t.expand(batch if t.shape[0] != 1 else 1, *t.shape[1:]).contiguous() for t in (cos, sin))
    return _TritonRope.apply(_unit_last_stride(q), _unit_last_stride(k), cos, sin, unsqueeze_dim)
