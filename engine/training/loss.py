"""Causal-LM loss as a SUM over trained tokens, so gradient accumulation can normalise by the step's token count."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def base_causal_lm(model):
    """The underlying *ForCausalLM module, under a PEFT wrapper or DDP if there is one."""
    inner = getattr(model, "module", model)
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    return inner


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """Labels moved one to the left (token t predicts t+1), padded with -100 at the end."""
    return F.pad(labels[:, 1:], (0, 1), value=-100)


def causal_lm_loss_sum(model, batch: dict, *, fused_linear_ce: bool = False) -> tuple[torch.Tensor, int]:
    """(sum of token losses, number of trained tokens) for one micro-batch.

    With ``fused_linear_ce`` the LM head and the loss run chunk by chunk on the final hidden states, so the full
    logits tensor (tokens x vocab) never exists.
    """
    labels = shift_labels(batch["labels"])
    n_tokens = int((labels != -100).sum())
    inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids")}
    if fused_linear_ce:
        from engine.kernels.ops.fused_linear_ce import chunked_linear_cross_entropy

        causal_lm = base_causal_lm(model)
        hidden = causal_lm.model(**inputs).last_hidden_state
        head = causal_lm.get_output_embeddings()
        loss = chunked_linear_cross_entropy(hidden.flatten(0, 1), head.weight, labels.flatten(),
                                            bias=getattr(head, "bias", None), reduction="sum")
        return loss, n_tokens
    logits = model(**inputs).logits
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="sum")
    return loss, n_tokens
