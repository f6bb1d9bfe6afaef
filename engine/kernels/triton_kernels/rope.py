"""Triton rotary embedding for q and k together: one program per (batch, position) row, all heads at once.

Rotate-half convention of Hugging Face models, over the first R = cos.shape[-1] features of each head (R < head_dim
is partial rotary, Qwen3.5 / Qwen3-Next); the remaining features pass through unchanged. With x = [x1, x2, pass]
and cos = [c1, c2], sin = [s1, s2] split at R/2:
    forward:  o1 = x1 c1 - x2 s1,   o2 = x2 c2 + x1 s2
    backward: d1 = g1 c1 + g2 s2,   d2 = g2 c2 - g1 s1     (the transpose of the forward rotation)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.runtime import next_power_of_2


@triton.jit
def _rotate_heads(X, O, base, stride_h, n_heads, c1, c2, s1, s2, half, pass_dim,
                  BACKWARD: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
                  BLOCK_PASS: tl.constexpr):
    heads = tl.arange(0, BLOCK_H)[:, None]
    dims = tl.arange(0, BLOCK_HALF)[None, :]
    mask = (heads < n_heads) & (dims < half)
    offs = base + heads * stride_h + dims
    x1 = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(X + offs + half, mask=mask, other=0.0).to(tl.float32)
    if BACKWARD:
        o1 = x1 * c1 + x2 * s2
        o2 = x2 * c2 - x1 * s1
    else:
        o1 = x1 * c1 - x2 * s1
        o2 = x2 * c2 + x1 * s2
    tl.store(O + offs, o1.to(O.dtype.element_ty), mask=mask)
    tl.store(O + offs + half, o2.to(O.dtype.element_ty), mask=mask)
    if BLOCK_PASS > 0:
        pass_dims = tl.arange(0, BLOCK_PASS)[None, :]
        pass_mask = (heads < n_heads) & (pass_dims < pass_dim)
        pass_offs = base + heads * stride_h + 2 * half + pass_dims
        tl.store(O + pass_offs, tl.load(X + pass_offs, mask=pass_mask, other=0.0), mask=pass_mask)


@triton.jit
def _rope_kernel(Q, K, QO, KO, COS, SIN, q_sb, q_sh, q_ss, k_sb, k_sh, k_ss, c_sb, c_ss, seq_len,
                 n_q_heads, n_k_heads, half, pass_dim, BACKWARD: tl.constexpr, BLOCK_QH: tl.constexpr,
                 BLOCK_KH: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_PASS: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    b = pid // seq_len
    s = pid % seq_len
    dims = tl.arange(0, BLOCK_HALF)[None, :]
    cos_base = b * c_sb + s * c_ss
    dim_mask = dims < half
    c1 = tl.load(COS + cos_base + dims, mask=dim_mask, other=0.0).to(tl.float32)
    c2 = tl.load(COS + cos_base + half + dims, mask=dim_mask, other=0.0).to(tl.float32)
    s1 = tl.load(SIN + cos_base + dims, mask=dim_mask, other=0.0).to(tl.float32)
    s2 = tl.load(SIN + cos_base + half + dims, mask=dim_mask, other=0.0).to(tl.float32)
    _rotate_heads(Q, QO, b * q_sb + s * q_ss, q_sh, n_q_heads, c1, c2, s1, s2, half, pass_dim,
                  BACKWARD, BLOCK_QH, BLOCK_HALF, BLOCK_PASS)
    _rotate_heads(K, KO, b * k_sb + s * k_ss, k_sh, n_k_heads, c1, c2, s1, s2, half, pass_dim,
                  BACKWARD, BLOCK_KH, BLOCK_HALF, BLOCK_PASS)


def _bhs_strides(x: torch.Tensor, heads_dim: int) -> tuple[int, int, int]:
    """(batch, head, sequence) strides of a 4-D [.., .., .., head_dim] tensor whose heads sit at `heads_dim`."""
    seq_dim = 2 if heads_dim == 1 else 1
    return x.stride(0), x.stride(heads_dim), x.stride(seq_dim)


def rope_apply(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads_dim: int,
               backward: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k (or their gradients when backward=True); outputs keep the inputs' memory layout.

    q, k: 4-D with a unit last stride, heads at `heads_dim` (1 or 2); cos, sin: [1 or batch, seq, R] contiguous.
    """
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    if q_out.stride() != q.stride() or k_out.stride() != k.stride():
        q, k = q.contiguous(), k.contiguous()
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    batch, seq_len = q.shape[0], q.shape[2 if heads_dim == 1 else 1]
    half, head_dim = cos.shape[-1] // 2, q.shape[-1]
    cos_batch_stride = 0 if cos.shape[0] == 1 else cos.stride(0)
    pass_dim = head_dim - 2 * half
    n_q_heads, n_k_heads = q.shape[heads_dim], k.shape[heads_dim]
    if batch * seq_len:
        _rope_kernel[(batch * seq_len,)](
            q, k, q_out, k_out, cos, sin, *_bhs_strides(q, heads_dim), *_bhs_strides(k, heads_dim),
            cos_batch_stride, cos.stride(1), seq_len, n_q_heads, n_k_heads, half, pass_dim,
            BACKWARD=backward, BLOCK_QH=next_power_of_2(n_q_heads), BLOCK_KH=next_power_of_2(n_k_heads),
            BLOCK_HALF=next_power_of_2(half), BLOCK_PASS=next_power_of_2(pass_dim) if pass_dim else 0)
    return q_out, k_out
