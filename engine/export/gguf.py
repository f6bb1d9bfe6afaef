"""Write a model as one GGUF file (llama.cpp, Ollama): weights, tokenizer and chat template in its metadata.

What llama.cpp's readers expect, and what transformers' GGUF reader undoes when it loads the file back:
- tensor names follow gguf's per-architecture map (`blk.N.attn_q.weight`, `token_embd.weight`, ...); a tied output
  projection is left out (the reader ties it again when `output.weight` is missing);
- the llama architecture (Llama, Mistral, SmolLM) stores Q and K with each head's rotary halves interleaved,
  which llama.cpp's rope expects; the reader reverses exactly this permutation;
- 1-D tensors (norms, biases) stay float32 in every quantization, as llama.cpp's own converter does;
- q8_0 packs rows in blocks of 32 values, so a row whose length is not a multiple of 32 falls back to f16.
Mistral has no GGUF architecture of its own: llama.cpp writes it as llama, and so does this module.
Tensors are streamed: one is converted, quantized and written at a time, so memory stays at one tensor.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.errors import ConfigError

# config.json model_type -> GGUF architecture
GGUF_ARCHITECTURES: dict[str, str] = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
QUANTIZATIONS: tuple[str, ...] = ("f32", "f16", "q8_0")
# GGUF's token types (gguf.TokenType), spelled out so this table reads without the package.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
Q8_BLOCK = 32


@dataclass(frozen=True)
class GgufTokenizer:
    """The tokenizer as GGUF metadata (llama.cpp's `tokenizer.ggml.*` keys)."""

    model: str
    """gpt2 (byte-level BPE) or llama (sentencepiece-style BPE with byte fallback)."""
    pre: str
    """llama.cpp's name for the pre-tokenizer split (gpt-2, qwen2, llama-bpe, smollm, tekken, default)."""
    tokens: list[str]
    token_types: list[int]
    scores: list[float] | None
    merges: list[str]
    special_ids: dict[str, int]
    """bos / eos / unknown / padding -> token id (only those the tokenizer has)."""
    add_bos: bool
    add_eos: bool


def gguf_support_problem(config: dict) -> str | None:
    """Why a model (its config.json dict) cannot be written as GGUF here, or None when it can."""
    model_type = config.get("model_type")
    if model_type not in GGUF_ARCHITECTURES:
        return (f"export_format gguf writes {', '.join(GGUF_ARCHITECTURES)} models; this one is {model_type!r}. "
                "Export safetensors (the default) and convert with llama.cpp's convert_hf_to_gguf.py.")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type") or rope.get("type") or "default"
    if rope_type != "default":
        return (f"the model uses rope scaling {rope_type!r}, which transformers cannot read back from a GGUF, so the "
                "written file could not be checked. Export safetensors and convert with llama.cpp's "
                "convert_hf_to_gguf.py.")
    return None


def gguf_file_name(name: str, quantization: str) -> str:
    """`<name>-<quantization>.gguf`, the file name llama.cpp's tools and Ollama users expect."""
    return f"{name}-{quantization}.gguf"


# ---------------------------------------------------------------------------------------------- tokenizer
def _pre_tokenizer_name(pre: dict | None) -> str | None:
    """llama.cpp's name for a tokenizer.json pre_tokenizer, or None when it has none for it."""
    if not pre:
        return None
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    kinds = [step.get("type") for step in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and steps[1].get("use_regex", True):
        return "smollm"  # digits one by one, then GPT-2's split: StarCoder / SmolLM tokenizers
    if kinds[:1] == ["Split"] and (len(kinds) == 1 or kinds[1:] == ["ByteLevel"]):
        pattern = (steps[0].get("pattern") or {}).get("Regex")
        splits = _known_splits()
        # The first name for a regex is llama.cpp's usual one (llama-bpe before its aliases).
        preferred = ("llama-bpe", "qwen2", "tekken", "gpt-4o", "qwen35")
        names = sorted(splits, key=lambda n: (n not in preferred, preferred.index(n) if n in preferred else 0))
        return next((name for name in names if splits[name] == pattern), None)
    if kinds == ["Metaspace"]:
        return "default"
    return None


def _known_splits() -> dict[str, str]:
    """llama.cpp pre-tokenizer name -> split regex, as transformers' GGUF reader knows them: a name it does not
    know would be read back as plain GPT-2 splitting, so only these can round-trip."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
    except ImportError:  # an older transformers: nothing but gpt-2 and smollm can be named
        return {}
    return dict(GGUF_PRE_TOKENIZER_SPLITS)


def _merges(model: dict) -> list[str]:
    # tokenizers writes merges as "a b" strings (older files) or as [a, b] pairs (newer ones).
    return [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]


def gguf_tokenizer(tokenizer, vocab_size: int) -> GgufTokenizer:
    """The tokenizer's vocabulary, merges and special ids, padded to the model's embedding rows."""
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    model = data.get("model") or {}
    byte_fallback = bool(model.get("byte_fallback"))
    if model.get("type") != "BPE":
        raise ConfigError(f"export_format gguf writes BPE tokenizers; this one is {model.get('type')!r}. Export "
                          "safetensors and convert with llama.cpp's convert_hf_to_gguf.py.")
    pre = "default" if byte_fallback else _pre_tokenizer_name(data.get("pre_tokenizer"))
    if pre is None:
        raise ConfigError("The tokenizer splits text in a way llama.cpp has no name for, so a GGUF would tokenize "
                          "differently. Export safetensors and convert with llama.cpp's convert_hf_to_gguf.py.")
    by_id: dict[int, tuple[str, int]] = {i: (t, NORMAL) for t, i in model.get("vocab", {}).items()}
    for added in data.get("added_tokens", []):
        by_id[added["id"]] = (added["content"], CONTROL if added.get("special") else USER_DEFINED)
    if max(by_id, default=-1) >= vocab_size:
        raise ConfigError(f"The tokenizer has ids up to {max(by_id)}, but the model only {vocab_size} embedding "
                          "rows: tokenizer and weights do not belong together.")
    # Embedding rows past the tokenizer (vocabularies padded to a multiple of 64 or 128) get placeholder names.
    tokens = [by_id.get(i, (f"[PAD{i}]", UNUSED)) for i in range(vocab_size)]
    types = [kind for _, kind in tokens]
    if byte_fallback:
        types = [BYTE if kind == NORMAL and text.startswith("<0x") and len(text) == 6 else kind
                 for (text, _), kind in zip(tokens, types)]
    if tokenizer.unk_token_id is not None and types[tokenizer.unk_token_id] != UNUSED:
        types[tokenizer.unk_token_id] = UNKNOWN if byte_fallback else types[tokenizer.unk_token_id]
    # Sentencepiece BPE ranks pieces by score, higher first, in vocabulary order.
    scores = [-float(i) if kind == NORMAL else 0.0 for i, kind in enumerate(types)] if byte_fallback else None
    ids = {"bos": tokenizer.bos_token_id, "eos": tokenizer.eos_token_id, "unknown": tokenizer.unk_token_id,
           "padding": tokenizer.pad_token_id}
    encoded = tokenizer("a")["input_ids"]
    return GgufTokenizer(
        model="llama" if byte_fallback else "gpt2", pre=pre, tokens=[text for text, _ in tokens], token_types=types,
        scores=scores, merges=_merges(model), special_ids={k: int(v) for k, v in ids.items() if v is not None},
        add_bos=bool(encoded) and ids["bos"] is not None and encoded[0] == ids["bos"],
        add_eos=len(encoded) > 1 and ids["eos"] is not None and encoded[-1] == ids["eos"])


def _add_tokenizer(writer, tok: GgufTokenizer, chat_template: str | None) -> None:
    writer.add_tokenizer_model(tok.model)
    writer.add_tokenizer_pre(tok.pre)
    writer.add_token_list(tok.tokens)
    writer.add_token_types(tok.token_types)
    if tok.scores is not None:
        writer.add_token_scores(tok.scores)
    if tok.merges:
        writer.add_token_merges(tok.merges)
    for name, token_id in tok.special_ids.items():
        writer.add_uint32(f"tokenizer.ggml.{name}_token_id", token_id)
    writer.add_add_bos_token(tok.add_bos)
    writer.add_add_eos_token(tok.add_eos)
    if chat_template:
        writer.add_chat_template(chat_template)


# ---------------------------------------------------------------------------------------------- model
def _rope_theta(config) -> float:
    rope = getattr(config, "rope_parameters", None) or {}
    return float(rope.get("rope_theta") or getattr(config, "rope_theta", None) or 10000.0)


def _add_hyperparameters(writer, config, arch: str) -> None:
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_vocab_size(config.vocab_size)
    # llama.cpp reads the head width from key_length when it is not hidden_size / heads (Qwen3 does that).
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    if arch == "llama":
        writer.add_rope_dimension_count(head_dim)


def _interleave_rotary_halves(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Reorder each head's rows from [first half | second half] to pairs (x0, x_half, x1, ...): llama.cpp's
    rope rotates adjacent pairs, transformers' rotates halves."""
    rows, *rest = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, *rest).transpose(1, 2).reshape(weight.shape)


@dataclass(frozen=True)
class PlannedTensor:
    hf_name: str
    gguf_name: str
    shape: tuple[int, ...]
    ggml_type: int


def _tensor_names(model, arch: str) -> dict[str, str]:
    """HF state-dict name -> GGUF tensor name; ConfigError for a tensor GGUF has no name for."""
    import gguf

    arch_enum = next(a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == arch)
    name_map = gguf.get_tensor_name_map(arch_enum, model.config.num_hidden_layers)
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    names = {}
    for hf_name in model.state_dict():
        if tied and hf_name == "lm_head.weight":
            continue  # llama.cpp ties the output to token_embd when output.weight is absent
        gguf_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ConfigError(f"{hf_name} has no name in GGUF's {arch} layout, so it cannot be written; export "
                              "safetensors instead.")
        names[hf_name] = gguf_name
    return names


def _ggml_type(shape: tuple[int, ...], quantization: str) -> int:
    import gguf

    q = gguf.GGMLQuantizationType
    if len(shape) < 2 or quantization == "f32":
        return q.F32
    if quantization == "q8_0" and shape[-1] % Q8_BLOCK == 0:
        return q.Q8_0
    return q.F16


def plan_tensors(model, arch: str, quantization: str) -> list[PlannedTensor]:
    """Every tensor to write, with its GGUF name, shape and storage type."""
    state = model.state_dict()
    return [PlannedTensor(hf, gg, tuple(state[hf].shape), _ggml_type(tuple(state[hf].shape), quantization))
            for hf, gg in _tensor_names(model, arch).items()]


def _tensor_data(tensor: torch.Tensor, plan: PlannedTensor, config, arch: str) -> np.ndarray:
    import gguf

    weight = tensor.detach().to("cpu", torch.float32)
    if arch == "llama" and plan.gguf_name.endswith(("attn_q.weight", "attn_k.weight")):
        heads = config.num_attention_heads if "attn_q" in plan.gguf_name else (
            getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
        weight = _interleave_rotary_halves(weight, heads)
    return gguf.quants.quantize(weight.numpy(), gguf.GGMLQuantizationType(plan.ggml_type))


def _nbytes(plan: PlannedTensor) -> int:
    import gguf

    block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(plan.ggml_type)]
    count = int(np.prod(plan.shape))
    return count // block * type_size


def write_gguf(model, tokenizer, path: Path, *, quantization: str, name: str, chat_template: str | None,
               on_tensor: Callable[[int, int, str], None] | None = None) -> list[PlannedTensor]:
    """Write `model` and `tokenizer` to `path` (through a temporary file beside it); returns what was written."""
    import gguf

    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"export_quantization must be one of {', '.join(QUANTIZATIONS)} (got {quantization!r}).")
    problem = gguf_support_problem(model.config.to_dict())
    if problem:
        raise ConfigError(problem)
    arch = GGUF_ARCHITECTURES[model.config.model_type]
    plan = plan_tensors(model, arch, quantization)
    tok = gguf_tokenizer(tokenizer, model.config.vocab_size)
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    writer = gguf.GGUFWriter(partial, arch)
    try:
        # transformers reads a llama file whose name is exactly "mistral" as a mistral architecture, which its
        # own GGUF reader then cannot map: such a file could not be checked, so that one name gets a suffix.
        writer.add_name(name if name != "mistral" else "mistral-model")
        writer.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                              "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[quantization])
        if quantization == "q8_0":
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        _add_hyperparameters(writer, model.config, arch)
        _add_tokenizer(writer, tok, chat_template)
        for item in plan:
            writer.add_tensor_info(item.gguf_name, item.shape, np.dtype(np.float32), _nbytes(item),
                                   raw_dtype=gguf.GGMLQuantizationType(item.ggml_type))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        state = model.state_dict()
        for index, item in enumerate(plan, 1):
            writer.write_tensor_data(_tensor_data(state[item.hf_name], item, model.config, arch))
            if on_tensor:
                on_tensor(index, len(plan), item.gguf_name)
        writer.close()
        os.replace(partial, path)
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    return plan
