"""Triton cross-entropy over rows of logits: online log-sum-exp forward, softmax-minus-one-hot backward.

Logits are read in their own dtype and reduced in fp32. The gradient kernel may write into the logits buffer itself
(GRAD == LOGITS): the fused linear cross-entropy uses that so a chunk of logits and its gradient share memory.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.runtime import next_power_of_2

_MAX_BLOCK = 4096  # columns per loop step: big enough to stream, small enough for registers


@triton.jit
def _ce_forward(LOGITS, stride_row, LABELS, LOSS, LSE, n_cols, ignore_index, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = LOGITS + row * stride_row
    label = tl.load(LABELS + row)
    running_max = tl.zeros([], dtype=tl.float32) - float("inf")
    running_sum = tl.zeros([], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(running_max, tl.max(x, axis=0))
        running_sum = running_sum * tl.exp(running_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
        running_max = new_max
    lse = running_max + tl.log(running_sum)
    valid = label != ignore_index
    label_logit = tl.load(base + tl.where(valid, label, 0)).to(tl.float32)
    tl.store(LOSS + row, tl.where(valid, lse - label_logit, 0.0))
    tl.store(LSE + row, lse)


@triton.jit
def _ce_backward(LOGITS, stride_row, GRAD, stride_grad, LABELS, LSE, SCALE, stride_scale, n_cols, ignore_index,
                 BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    label = tl.load(LABELS + row)
    lse = tl.load(LSE + row)
    scale = tl.load(SCALE + row * stride_scale).to(tl.float32)
    scale = tl.where(label != ignore_index, scale, 0.0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(LOGITS + row * stride_row + cols, mask=mask, other=0.0).to(tl.float32)
        grad = (tl.exp(x - lse) - tl.where(cols == label, 1.0, 0.0)) * scale
        tl.store(GRAD + row * stride_grad + cols, grad.to(GRAD.dtype.element_ty), mask=mask)


def _block(n_cols: int) -> int:
    return min(_MAX_BLOCK, next_power_of_2(n_cols))


def ce_forward(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss (0 where ignored) and log-sum-exp, both fp32; logits [rows, vocab] with unit column stride."""
    n_rows, n_cols = logits.shape
    loss = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    lse = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    if n_rows:
        _ce_forward[(n_rows,)](logits, logits.stride(0), labels, loss, lse, n_cols, ignore_index,
                               BLOCK=_block(n_cols))
    return loss, lse


def ce_backward(logits: torch.Tensor, labels: torch.Tensor, lse: torch.Tensor, scale: torch.Tensor,
                ignore_index: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """(softmax - one_hot) * scale per row; scale is [rows] or [1] (broadcast). out=logits works in place."""
    n_rows, n_cols = logits.shape
    grad = torch.empty_like(logits) if out is None else out
    scale = scale.to(torch.float32).contiguous()
    stride_scale = 0 if scale.numel() == 1 else 1
    if n_rows:
        _ce_backward[(n_rows,)](logits, logits.stride(0), grad, grad.stride(0), labels, lse, scale, stride_scale,
                                n_cols, ignore_index, BLOCK=_block(n_cols))
    return grad
