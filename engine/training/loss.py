"""Causal-LM loss as a SUM over trained tokens, so gradient accumulation can normalise by the step's token count."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.data.collator import shift_labels  # noqa: F401 - the recipes' and tests' name for it
from engine.data.packing import CROSS_SAMPLE_ATTENTION


def base_causal_lm(model):
    """The underlying *ForCausalLM module, under a PEFT wrapper or DDP if there is one."""
    inner = getattr(model, "module", model)
    if hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    return inner


def model_inputs(batch: dict) -> dict:
    """What the model gets from a batch. A packed batch (one that carries ``position_ids``, see
    engine/data/packing.py) leaves out its 2-D attention_mask: transformers derives block-diagonal attention from
    restarting positions only when no 2-D mask is given (with right padding, dropping it changes nothing for real
    tokens either). ``use_cache=False`` in the callers matters for the same reason: a KV cache also turns the
    packed-sequence detection off, and training never needs one."""
    keys = ("input_ids", "position_ids") if "position_ids" in batch else ("input_ids", "attention_mask")
    if CROSS_SAMPLE_ATTENTION in batch:  # LLaMA-Factory's packing: the mask keeps attention across samples
        keys = ("input_ids", "attention_mask", "position_ids")
    return {k: v for k, v in batch.items() if k in keys}


def batch_targets(batch: dict) -> torch.Tensor:
    """Each position's next-token target. A sequence-parallel slice carries ``shift_labels`` already shifted on the
    whole sequence, because its last target is the first token of the next slice."""
    if "shift_labels" in batch:
        return batch["shift_labels"]
    return shift_labels(batch["labels"])


def trained_tokens(batch: dict) -> int:
    """How many positions of the micro-batch have a target (its share of the step's loss normaliser)."""
    return int((batch_targets(batch) != -100).sum())


def causal_lm_loss_sum(model, batch: dict, *, fused_linear_ce=False) -> tuple[torch.Tensor, int]:
    """(sum of token losses, number of trained tokens) for one micro-batch.

    With ``fused_linear_ce`` the LM head and the loss run chunk by chunk on the final hidden states, so the full
    logits tensor (tokens x vocab) never exists.
    """
    labels = batch_targets(batch)
    n_tokens = int((labels != -100).sum())
    inputs = model_inputs(batch)
    if "position_ids" in batch and batch["input_ids"].shape[0] == 1 and CROSS_SAMPLE_ATTENTION not in batch:
        from engine.data.packing import use_packed_attention

        use_packed_attention(base_causal_lm(model))  # per-sample attention for packed rows (sdpa models only)
    if fused_linear_ce:
        from engine.kernels.ops.fused_linear_ce import chunked_linear_cross_entropy

        # A KernelPlan picks the Triton kernel on GPUs; a plain True means the torch chunked path.
        linear_ce = getattr(fused_linear_ce, "linear_cross_entropy", chunked_linear_cross_entropy)
        causal_lm = base_causal_lm(model)
        hidden = causal_lm.model(**inputs, use_cache=False).last_hidden_state
        head = causal_lm.get_output_embeddings()
        loss = linear_ce(hidden.flatten(0, 1), head.weight, labels.flatten(), bias=getattr(head, "bias", None),
                         reduction="sum")
        return loss, n_tokens
    if head_only_where_trained(model):
        # Prompt and padding positions have no target: run the LM head (tokens x vocab) only where one exists.
        causal_lm = base_causal_lm(model)
        hidden = causal_lm.model(**inputs, use_cache=False).last_hidden_state
        keep = labels != -100
        logits = causal_lm.get_output_embeddings()(hidden[keep])
        return F.cross_entropy(logits.float(), labels[keep], reduction="sum"), n_tokens
    logits = model(**inputs, use_cache=False).logits
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="sum")
    return loss, n_tokens


# Families whose logits are exactly lm_head(final hidden state): no soft-capping, scaling or auxiliary losses.
_PLAIN_HEAD_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def head_only_where_trained(model) -> bool:
    """True when the LM head may be applied to trained positions only: a plain head, and the model is not wrapped
    by DDP/FSDP (whose hooks run only through the wrapper's own forward)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return False
    causal_lm = base_causal_lm(model)
    return (getattr(causal_lm.config, "model_type", None) in _PLAIN_HEAD_MODEL_TYPES
            and hasattr(causal_lm, "model") and causal_lm.get_output_embeddings() is not None)
