"""Triton RMSNorm: one program per row forward, persistent programs over row ranges backward.

Two output conventions exist in Hugging Face models and both are reproduced:
- "llama" (Llama, Qwen2/3, Mistral): y = w * cast(x * rstd), the normalised row is rounded to the input dtype first;
- "gemma" (Gemma, Qwen3.5, Qwen3-Next): y = cast(x * rstd * (offset + w)), everything in fp32, one rounding.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.runtime import launch_programs, next_power_of_2


@triton.jit
def _round_like_input(x, dtype: tl.constexpr):
    """x (fp32) rounded to the input dtype, kept in fp32: the Llama convention rounds the normalised row.

    bf16 rounding is done on the bits (round to nearest even, as torch does) rather than with a cast, because the
    Triton interpreter that runs the CPU tests truncates fp32 -> bf16 casts; on a GPU both give the same value.
    """
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    elif dtype == tl.float16:
        return x.to(tl.float16).to(tl.float32)
    else:
        return x


@triton.jit
def _rms_norm_fwd(X, W, Y, RSTD, stride_x, stride_y, n_cols, eps, offset,
                  GEMMA_CAST: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32) + offset
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    x_hat = x * rstd
    if not GEMMA_CAST:
        x_hat = _round_like_input(x_hat, X.dtype.element_ty)
    y = x_hat * w
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + row, rstd)


@triton.jit
def _rms_norm_bwd(DY, X, W, RSTD, DX, DW_PARTIAL, stride_dy, stride_x, stride_dx, n_rows, n_cols, offset,
                  rows_per_program, GEMMA_CAST: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32) + offset
    dw_acc = tl.zeros([BLOCK], dtype=tl.float32)
    row_start = pid.to(tl.int64) * rows_per_program
    for i in range(0, rows_per_program):
        row = row_start + i
        # a scalar condition is broadcast by hand: the interpreter rejects scalar & block masks
        row_mask = mask & ((cols * 0 + row) < n_rows)
        dy = tl.load(DY + row * stride_dy + cols, mask=row_mask, other=0.0).to(tl.float32)
        x = tl.load(X + row * stride_x + cols, mask=row_mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + row, mask=row < n_rows, other=0.0)
        x_hat = x * rstd
        if GEMMA_CAST:
            dw_acc += dy * x_hat
        else:
            dw_acc += dy * _round_like_input(x_hat, X.dtype.element_ty)
        dyw = dy * w
        dx = rstd * (dyw - x_hat * (tl.sum(dyw * x_hat, axis=0) / n_cols))
        tl.store(DX + row * stride_dx + cols, dx.to(DX.dtype.element_ty), mask=row_mask)
    tl.store(DW_PARTIAL + pid * n_cols + cols, dw_acc, mask=mask)


def _block_for(n_cols: int) -> int:
    block = next_power_of_2(n_cols)
    if block > 65536:
        raise ValueError(f"RMSNorm rows of {n_cols} values do not fit one Triton block (max 65536)")
    return block


def rms_norm_forward(x2d: torch.Tensor, weight: torch.Tensor, eps: float, offset: float, gemma_cast: bool,
                     out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """y [rows, cols] in out_dtype and rstd [rows] fp32, from a row-contiguous x2d."""
    n_rows, n_cols = x2d.shape
    y = torch.empty((n_rows, n_cols), dtype=out_dtype, device=x2d.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    if n_rows:
        _rms_norm_fwd[(n_rows,)](x2d, weight, y, rstd, x2d.stride(0), y.stride(0), n_cols, eps, offset,
                                 GEMMA_CAST=gemma_cast, BLOCK=_block_for(n_cols))
    return y, rstd


def rms_norm_backward(dy2d: torch.Tensor, x2d: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                      offset: float, gemma_cast: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """dx like x2d, and dw in fp32 (summed over the per-program partial sums)."""
    n_rows, n_cols = x2d.shape
    dy2d = dy2d.contiguous()
    dx = torch.empty_like(x2d)
    programs = max(1, min(launch_programs(x2d.device), n_rows))
    rows_per_program = -(-n_rows // programs) if n_rows else 0
    dw_partial = torch.zeros((programs, n_cols), dtype=torch.float32, device=x2d.device)
    if n_rows:
        _rms_norm_bwd[(programs,)](dy2d, x2d, weight, rstd, dx, dw_partial, dy2d.stride(0), x2d.stride(0),
                                   dx.stride(0), n_rows, n_cols, offset, rows_per_program,
                                   GEMMA_CAST=gemma_cast, BLOCK=_block_for(n_cols))
    return dx, dw_partial.sum(dim=0)
