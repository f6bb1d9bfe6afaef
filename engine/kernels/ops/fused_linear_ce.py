"""Linear cross-entropy without the full logits tensor: loss(hidden @ weight.T + bias, labels), chunk by chunk.

For N tokens and a vocabulary of V, the eager path keeps N x V logits (plus a fp32 copy and the softmax for
backward); with V = 152k that is the biggest tensor of a training step. Here each chunk of rows computes its logits,
its loss and, right away, the gradients of hidden and weight from that chunk; the chunk's logits are then dropped.
Backward only scales the stored gradients by the incoming gradient. Peak extra memory is one chunk of logits plus
the gradient buffers (N x H and V x H), independent of N x V.

Labels are already shifted by the caller (row i of hidden predicts labels[i]). `chunked_linear_cross_entropy` is
pure torch and runs anywhere; `fused_linear_cross_entropy` computes each chunk's loss and gradient with the Triton
cross-entropy kernels, in place in the chunk's logits buffer.
"""

from __future__ import annotations

from typing import Literal

import torch

from engine.kernels.ops.frozen_gemm import frozen_linear, plain_linear
from engine.kernels.runtime import Backend, BackendChoice, resolve_backend

LinearReduction = Literal["sum", "mean"]


def _chunk_loss_and_grad_torch(logits: torch.Tensor, labels: torch.Tensor, scale: torch.Tensor, ignore_index: int,
                               need_grad: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Sum of the chunk's losses, and d(loss * scale)/d logits when asked.

    Works in place in one fp32 buffer (the logits themselves when they are fp32: nothing else reads them), so a
    chunk costs one rows x vocab buffer and five passes over it: max, subtract, exp, sum, scale.
    """
    logits32 = logits.float()
    valid = labels != ignore_index
    safe_labels = torch.where(valid, labels, 0)
    label_logit = logits32.gather(1, safe_labels[:, None]).squeeze(1)
    row_max = logits32.amax(dim=-1, keepdim=True)
    exps = logits32.sub_(row_max).exp_()
    sum_exp = exps.sum(dim=-1)
    loss_sum = ((row_max.squeeze(1) + sum_exp.log() - label_logit) * valid).sum()
    if not need_grad:
        return loss_sum, None
    row_scale = valid * scale
    grad = exps.mul_((row_scale / sum_exp)[:, None])  # softmax * scale
    grad[torch.arange(grad.shape[0], device=grad.device), safe_labels] -= row_scale
    return loss_sum, grad.to(logits.dtype)


def _chunk_loss_and_grad_triton(logits: torch.Tensor, labels: torch.Tensor, scale: torch.Tensor, ignore_index: int,
                                need_grad: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    from engine.kernels.triton_kernels import cross_entropy as kernels

    loss_rows, lse = kernels.ce_forward(logits, labels, ignore_index)
    if not need_grad:
        return loss_rows.sum(), None
    return loss_rows.sum(), kernels.ce_backward(logits, labels, lse, scale.reshape(1), ignore_index, out=logits)


_CHUNK_LOSS = {"torch": _chunk_loss_and_grad_torch, "triton": _chunk_loss_and_grad_triton}


def _compute_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The matmul dtype: the autocast dtype when autocast is on (the loop then runs with autocast off)."""
    if torch.is_autocast_enabled(hidden.device.type):
        return torch.get_autocast_dtype(hidden.device.type)
    return hidden.dtype


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, chunk_size: int, ignore_index: int, reduction: LinearReduction,
                backend: Backend):
        dtype = _compute_dtype(hidden)
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[2]
        h_all, w_c = hidden.to(dtype), weight.to(dtype)
        b_c = None if bias is None else bias.to(dtype)
        n_valid = (labels != ignore_index).sum()
        scale = 1.0 / n_valid.clamp(min=1).float() if reduction == "mean" else torch.ones((), device=hidden.device)
        grad_h = torch.empty_like(hidden) if need_h else None
        # accumulate dW in place when the matmul dtype is the weight's; otherwise in fp32 (autocast master weights)
        grad_w = torch.zeros(weight.shape, dtype=weight.dtype if weight.dtype == dtype else torch.float32,
                             device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        chunk_loss = _CHUNK_LOSS[backend]
        # A frozen fp32 head on CPU runs on its weight reordered once (frozen_gemm); a cast copy is made anew
        # per call, so it takes the plain products.
        head = frozen_linear if w_c is weight else plain_linear
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, hidden.shape[0], chunk_size):
                h_chunk = h_all[start:start + chunk_size]
                logits = head(h_chunk, w_c, b_c)
                loss_sum, grad_logits = chunk_loss(logits, labels[start:start + chunk_size], scale, ignore_index,
                                                   need_h or need_w or need_b)
                total += loss_sum
                del logits
                if grad_h is not None:
                    grad_h[start:start + chunk_size] = grad_logits @ w_c
                if grad_w is not None and grad_w.dtype == dtype:
                    grad_w.addmm_(grad_logits.T, h_chunk)
                elif grad_w is not None:
                    grad_w += grad_logits.T @ h_chunk
                if grad_b is not None:
                    grad_b += grad_logits.float().sum(0)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.dtypes = (weight.dtype, None if bias is None else bias.dtype)
        return total * scale

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        # the common case is a loss that is backpropagated as is: skip three full-size multiplications
        unit = bool(grad_out.eq(1.0).all())
        grads = []
        for grad, dtype in ((grad_h, None), (grad_w, ctx.dtypes[0]), (grad_b, ctx.dtypes[1])):
            if grad is not None:
                grad = grad if unit else grad * grad_out.to(grad.dtype)
                grad = grad if dtype is None else grad.to(dtype)
            grads.append(grad)
        return (*grads, None, None, None, None, None)


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *, backend: Backend,
                         bias: torch.Tensor | None = None, chunk_size: int = 1024, ignore_index: int = -100,
                         reduction: LinearReduction = "sum") -> torch.Tensor:
    """Chunked linear cross-entropy with an explicit backend ('torch' or 'triton'), no availability check."""
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive number of rows, got {chunk_size}")
    hidden_2d = hidden.reshape(-1, hidden.shape[-1])
    labels_1d = labels.reshape(-1).to(hidden.device)
    if labels_1d.shape[0] != hidden_2d.shape[0]:
        raise ValueError(f"{hidden_2d.shape[0]} hidden rows but {labels_1d.shape[0]} labels (shift them first)")
    return _LinearCrossEntropy.apply(hidden_2d, weight, bias, labels_1d, chunk_size, ignore_index, reduction,
                                     backend)


def chunked_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *,
                                 bias: torch.Tensor | None = None, chunk_size: int = 1024, ignore_index: int = -100,
                                 reduction: LinearReduction = "sum") -> torch.Tensor:
    """Cross-entropy of hidden [N, H] @ weight [V, H].T against labels [N], pure torch, any device."""
    return linear_cross_entropy(hidden, weight, labels, backend="torch", bias=bias, chunk_size=chunk_size,
                                ignore_index=ignore_index, reduction=reduction)


def fused_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *,
                               bias: torch.Tensor | None = None, chunk_size: int = 1024, ignore_index: int = -100,
                               reduction: LinearReduction = "sum", backend: BackendChoice = "triton") -> torch.Tensor:
    """Same as `chunked_linear_cross_entropy`, with the Triton cross-entropy kernels (DeviceError if unavailable).

    backend='auto' picks Triton on a GPU and the torch chunked path elsewhere.
    """
    chosen = resolve_backend("fused_linear_ce", hidden.device, backend)
    return linear_cross_entropy(hidden, weight, labels, backend=chosen, bias=bias, chunk_size=chunk_size,
                                ignore_index=ignore_index, reduction=reduction)
