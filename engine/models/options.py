"""What a training config changes about the model it loads, as LLaMA-Factory applies it: RoPE scaling (set in the
config before the weights load), the attention kernel, the hub revision and cache, QLoRA's quantization settings,
and embeddings grown to the tokenizer (after loading). Each change comes back as a sentence for the run log.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from typing import Any

ATTENTION = {"auto": None, "sdpa": "sdpa", "disabled": "eager", "eager": "eager", "fa2": "flash_attention_2",
             "flash_attention_2": "flash_attention_2", "fa3": "flash_attention_3",
             "flash_attention_3": "flash_attention_3"}
FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}
# Multiples the embeddings are padded to when resized (LLaMA-Factory's choice: tensor-core friendly).
RESIZE_MULTIPLE = 64


@dataclass(frozen=True)
class LoadOptions:
    """The load settings of a training config (``from_config``)."""

    rope_scaling: str | None = None
    model_max_length: int | None = None
    flash_attn: str = "auto"
    revision: str = "main"
    cache_dir: str | None = None
    quantization_type: str = "nf4"
    double_quantization: bool = True

    @classmethod
    def from_config(cls, config: Any) -> LoadOptions:
        return cls(rope_scaling=getattr(config, "rope_scaling", None), model_max_length=config.cutoff_len,
                   flash_attn=getattr(config, "flash_attn", "auto"), revision=getattr(config, "model_revision", "main"),
                   cache_dir=getattr(config, "cache_dir", None),
                   quantization_type=getattr(config, "quantization_type", "nf4"),
                   double_quantization=getattr(config, "double_quantization", True))


def scale_rope(model_config: Any, rope_scaling: str | None, max_length: int | None) -> str | None:
    """Set RoPE scaling on a transformers config as LLaMA-Factory does: factor ceil(max_length / context) when
    max_length exceeds the model's context, nothing otherwise. Returns what was done, or None."""
    if not rope_scaling:
        return None
    params = getattr(model_config, "rope_parameters", None)
    if params is None and not hasattr(model_config, "rope_theta"):
        return f"rope_scaling: {rope_scaling} ignored: this model has no RoPE settings (as LLaMA-Factory warns)."
    params = dict(params or {})
    context = params.get("original_max_position_embeddings") or getattr(model_config, "max_position_embeddings", None)
    if not context:
        return f"rope_scaling: {rope_scaling} ignored: the model config names no context length."
    if max_length is None or max_length <= context:
        return (f"rope_scaling: {rope_scaling} changes nothing: cutoff_len {max_length} fits the context "
                f"({context}), as in LLaMA-Factory.")
    factor = float(math.ceil(max_length / context))
    params.update(rope_type=rope_scaling, factor=factor)
    if rope_scaling in ("dynamic", "yarn", "llama3"):
        params["original_max_position_embeddings"] = context
    if rope_scaling == "llama3":
        params.update(low_freq_factor=1.0, high_freq_factor=4.0)
    params.setdefault("rope_theta", getattr(model_config, "rope_theta", None) or 10_000.0)
    model_config.rope_parameters = params
    model_config.max_position_embeddings = int(context * factor)
    return f"rope_scaling: {rope_scaling}, factor {factor:g}: context {context} -> {int(context * factor)} tokens."


def attention(flash_attn: str, device: str) -> tuple[str | None, str | None]:
    """(attn_implementation to ask transformers for, or None for its default; a note when falling back).
    FlashAttention needs CUDA and its package; without them LLaMA-Factory warns and keeps the default, as here."""
    wanted = ATTENTION.get(flash_attn)
    package = FLASH_PACKAGES.get(wanted or "")
    if package and (not device.startswith("cuda") or importlib.util.find_spec(package) is None):
        where = "a CUDA GPU" if not device.startswith("cuda") else f"the {package} package"
        return None, (f"flash_attn: {flash_attn} needs {where}; this run uses the default attention instead (the "
                      "same result, as LLaMA-Factory falls back when FlashAttention is not available).")
    return wanted, None


def resize_embeddings(model: Any, tokenizer: Any) -> str | None:
    """Grow the input/output embeddings to the tokenizer (padded to a multiple of 64) when it is larger; the new
    rows start at the mean of the old ones plus noise of std 1/sqrt(width), as LLaMA-Factory initialises them."""
    import torch

    old = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) <= old:
        return f"resize_vocab: the embeddings ({old} rows) already cover the tokenizer ({len(tokenizer)}); unchanged."
    model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=RESIZE_MULTIPLE, mean_resizing=False)
    new = model.get_input_embeddings().weight.shape[0]
    with torch.no_grad():
        for layer in {model.get_input_embeddings(), model.get_output_embeddings()} - {None}:
            weight = layer.weight
            width = weight.shape[1]
            mean = weight[:old].mean(dim=0, keepdim=True)
            weight[old:] = mean + torch.randn_like(weight[old:]) / math.sqrt(width)
    return f"resize_vocab: embeddings grown from {old} to {new} rows for the tokenizer's {len(tokenizer)} tokens."
