"""Cross-entropy over logits rows, and a drop-in for the Hugging Face causal-LM loss.

`cross_entropy_reference` is `F.cross_entropy` in fp32; `cross_entropy` runs the Triton kernels (online log-sum-exp
forward, softmax-minus-one-hot backward) without materialising a fp32 copy of the logits.
`causal_lm_loss` has the signature of transformers' `ForCausalLMLoss` so a model's `loss_function` can be set to it.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from engine.kernels.runtime import BackendChoice, resolve_backend

Reduction = Literal["mean", "sum", "none"]
REDUCTIONS: tuple[str, ...] = ("mean", "sum", "none")


def cross_entropy_reference(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = -100,
                            reduction: Reduction = "mean") -> torch.Tensor:
    """The torch definition, computed in fp32 like transformers' loss (`logits.float()`)."""
    return F.cross_entropy(logits.float(), labels, ignore_index=ignore_index, reduction=reduction)


class _TritonCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, ignore_index: int, reduction: Reduction):
        from engine.kernels.triton_kernels import cross_entropy as kernels

        loss_rows, lse = kernels.ce_forward(logits, labels, ignore_index)
        n_valid = (labels != ignore_index).sum()
        ctx.save_for_backward(logits, labels, lse, n_valid)
        ctx.ignore_index, ctx.reduction = ignore_index, reduction
        if reduction == "none":
            return loss_rows
        total = loss_rows.sum()
        # mean over no valid label is nan in torch (0/0); kept so that both backends agree
        return total / n_valid if reduction == "mean" else total

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        from engine.kernels.triton_kernels import cross_entropy as kernels

        logits, labels, lse, n_valid = ctx.saved_tensors
        scale = grad_out.float().reshape(-1)
        if ctx.reduction == "mean":
            scale = scale / n_valid.clamp(min=1)
        grad = kernels.ce_backward(logits, labels, lse, scale, ctx.ignore_index)
        return grad, None, None, None


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = -100,
                  reduction: Reduction = "mean", backend: BackendChoice = "auto") -> torch.Tensor:
    """Cross-entropy of logits [N, V] against labels [N]; Triton where it runs, else the reference."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}; expected one of {REDUCTIONS}")
    if resolve_backend("cross_entropy", logits.device, backend) == "torch":
        return cross_entropy_reference(logits, labels, ignore_index=ignore_index, reduction=reduction)
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    return _TritonCrossEntropy.apply(logits, labels.contiguous(), ignore_index, reduction)


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                   num_items_in_batch: torch.Tensor | int | None = None, ignore_index: int = -100,
                   shift_labels: torch.Tensor | None = None, *, backend: BackendChoice = "auto",
                   **_: object) -> torch.Tensor:
    """Same contract as transformers' `ForCausalLMLoss`: shift, flatten, mean (or sum / num_items_in_batch)."""
    if shift_labels is None:
        labels = F.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    flat_logits = logits.reshape(-1, vocab_size)
    flat_labels = shift_labels.reshape(-1).to(flat_logits.device)
    if num_items_in_batch is None:
        return cross_entropy(flat_logits, flat_labels, ignore_index=ignore_index, reduction="mean", backend=backend)
    total = cross_entropy(flat_logits, flat_labels, ignore_index=ignore_index, reduction="sum", backend=backend)
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch
