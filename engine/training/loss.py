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

    The LM head and the loss run chunk by chunk on the final hidden states, so the full logits tensor (tokens x
    vocab) never exists: wherever the model allows it (``head_only_where_trained``) on the positions that have a
    target only, where CPU models also take the fast LoRA paths of engine/kernels/training_paths.py; otherwise on
    every position when ``fused_linear_ce`` asks for it (a KernelPlan, whose backend may be Triton on GPUs, or a
    plain True for the torch chunks). ``kernel_config: auto`` on a CPU thus trains exactly as ``none`` does.
    Wrapped multi-process models compute the full logits through the wrapper.
    """
    labels = batch_targets(batch)
    n_tokens = int((labels != -100).sum())
    if "position_ids" in batch and batch["input_ids"].shape[0] == 1 and CROSS_SAMPLE_ATTENTION not in batch:
        from engine.data.packing import use_packed_attention

        use_packed_attention(base_causal_lm(model))  # per-sample attention for packed rows (sdpa models only)
    head_only = head_only_where_trained(model)
    if head_only or fused_linear_ce:
        from engine.kernels.ops.fused_linear_ce import linear_cross_entropy

        causal_lm = base_causal_lm(model)
        if head_only:
            from engine.kernels.training_paths import use_fast_training_paths

            use_fast_training_paths(causal_lm)  # CPU only; idempotent
        hidden = causal_lm.model(**causal_inputs(model, batch), use_cache=False).last_hidden_state
        if head_only:  # prompt and padding positions have no target: no logits for them
            keep = labels != -100
            hidden, labels = hidden[keep], labels[keep]
        head = causal_lm.get_output_embeddings()
        backend = getattr(fused_linear_ce, "backends", {}).get("fused_linear_ce", "torch")
        # the torch chunks are sized for the vocabulary; the Triton kernel keeps its own default
        chunk = {"chunk_size": head_chunk_rows(head.weight.shape[0])} if backend == "torch" else {}
        loss = linear_cross_entropy(hidden.flatten(0, -2), head.weight, labels.flatten(), backend=backend,
                                    bias=getattr(head, "bias", None), reduction="sum", **chunk)
        return loss, n_tokens
    logits = model(**causal_inputs(model, batch), use_cache=False).logits
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="sum")
    return loss, n_tokens


def head_chunk_rows(vocab: int) -> int:
    """Rows of logits computed at once by the chunked head: about 16M logits (64 MB in fp32) per chunk, so the
    loss never holds more, while each chunk's matmuls stay large enough to run at full speed."""
    return max(128, min(1024, (1 << 24) // max(vocab, 1)))


def causal_inputs(model, batch: dict) -> dict:
    """``model_inputs`` for a causal LM loss. On a plain decoder (``_PLAIN_HEAD_MODEL_TYPES``) a right-padded
    batch also leaves out its attention mask: a real token attends only to the real tokens before it either way,
    so causal attention without a mask gives every real token (all that the loss reads) exactly the same result,
    and SDPA then runs its causal kernel with grouped key/value heads instead of a masked one on key/value heads
    repeated per query head (and no (rows, 1, T, T) mask is built)."""
    inputs = model_inputs(batch)
    mask = inputs.get("attention_mask")
    # Never with position_ids (LLaMA-Factory's packing): without the mask, restarting positions would turn its
    # attention across samples into attention within each sample.
    if (mask is not None and mask.dim() == 2 and "position_ids" not in inputs and is_plain_decoder(model)
            and right_padded(mask)):
        inputs.pop("attention_mask")
    return inputs


def right_padded(mask: torch.Tensor) -> bool:
    """Every row of a 2-D attention mask is ones, then zeros (a real first token, no hole, padding at the end)."""
    return bool(mask[:, 0].all()) and bool((mask[:, 1:] <= mask[:, :-1]).all())


# Families whose logits are exactly lm_head(final hidden state): no soft-capping, scaling or auxiliary losses.
_PLAIN_HEAD_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def head_only_where_trained(model) -> bool:
    """True when the LM head may be applied to trained positions only: a plain head, and the model is not wrapped
    by DDP/FSDP (whose hooks run only through the wrapper's own forward)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return False
    causal_lm = base_causal_lm(model)
    return is_plain_decoder(causal_lm) and hasattr(causal_lm, "model") and causal_lm.get_output_embeddings() is not None


def is_plain_decoder(model) -> bool:
    return getattr(getattr(base_causal_lm(model), "config", None), "model_type", None) in _PLAIN_HEAD_MODEL_TYPES
