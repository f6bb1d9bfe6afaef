"""The inference config: LLaMA-Factory's inference YAML keys (examples/inference/*.yaml), typed.

Importing this module does not import torch, so the TUI can build and check configs instantly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.loader import build_dataclass, parse_overrides, read_yaml
from engine.config.train import opt
from engine.errors import ConfigError

INFER_BACKENDS: tuple[str, ...] = ("huggingface", "vllm", "sglang")
INFER_DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")
# Methods whose output_dir is a LoRA adapter on top of the base; every other method writes a whole model.
ADAPTER_METHODS: tuple[str, ...] = ("lora", "qlora")


@dataclass
class InferConfig:
    """What to load and how to generate. Unknown keys are errors; LLaMA-Factory's tuning-only keys are accepted."""

    model_name_or_path: str | None = opt(
        None, "The base model (LoRA/QLoRA) or the fine-tuned model folder (full/freeze).", section="model")
    adapter_name_or_path: str | None = opt(
        None, "LoRA adapter folder(s), comma-separated, applied in order. Never set for a full fine-tune.",
        section="model")
    template: str | None = opt(
        None, "Chat template; must be the one used in training. Empty: the one recorded by training.",
        section="model")
    finetuning_type: str | None = opt(
        None, "How the model was trained (lora, qlora, full, freeze); read from the run when empty.",
        choices=("lora", "qlora", "full", "freeze"), section="model")
    infer_backend: str = opt(
        "huggingface", "Generation engine: huggingface (everywhere), vllm or sglang (CUDA, optional extras).",
        choices=INFER_BACKENDS, section="model")
    trust_remote_code: bool = opt(
        False, "Run Python code shipped inside the model folder. Only with your explicit consent.", section="model")
    infer_dtype: str = opt(
        "auto", "Weights dtype: auto is the checkpoint's dtype on a GPU and float32 on a CPU.", choices=INFER_DTYPES,
        section="model")
    quantization_bit: int | None = opt(
        None, "Load the base in 4 or 8 bits (bitsandbytes, CUDA only).", choices=(4, 8), section="model")
    default_system: str | None = opt(None, "System prompt used when a conversation has none.", section="generation")
    enable_thinking: bool | None = opt(
        True, "Reasoning templates: true lets the model think; false (or null) starts its answer with an empty "
        "thought. Use training's value.", section="generation")
    preserve_thinking: bool = opt(
        False, "Reasoning templates: keep the thoughts of earlier answers in the prompt (dropped by default).",
        section="generation")
    tool_format: str | None = opt(
        None, "Tool-calling format instead of the template's; must be training's.", section="generation")
    allow_special_tokens_in_text: bool = opt(
        False, "Let control-token strings typed inside messages (e.g. <|im_end|>) become control tokens. Off: they "
        "stay plain text, so a message cannot forge a system or assistant turn.", section="generation")
    max_new_tokens: int = opt(1024, "Most tokens generated per answer.", section="generation")
    do_sample: bool = opt(True, "Sample (true) or decode greedily (false, reproducible).", section="generation")
    temperature: float = opt(0.95, "Sampling temperature (ignored when do_sample is false).", section="generation")
    top_p: float = opt(0.7, "Nucleus sampling: keep the smallest set of tokens with this much probability.",
                       section="generation")
    top_k: int = opt(50, "Sample among the k most likely tokens.", section="generation")
    repetition_penalty: float = opt(1.0, "Above 1 discourages repeating tokens.", section="generation")
    num_beams: int = opt(1, "Beam search width (1: no beam search).", section="generation")
    length_penalty: float = opt(1.0, "Beam search: exponent on the length (above 1 favours longer).",
                                section="generation")
    skip_special_tokens: bool = opt(True, "Drop special tokens from the decoded answer.", section="generation")
    vllm_maxlen: int = opt(4096, "vLLM: longest prompt + answer, in tokens.", section="backend")
    vllm_gpu_util: float = opt(0.7, "vLLM: share of GPU memory it may take (0-1).", section="backend")
    vllm_enforce_eager: bool = opt(False, "vLLM: no CUDA graphs (less memory, slower).", section="backend")
    vllm_max_lora_rank: int = opt(32, "vLLM: the largest LoRA rank it reserves room for.", section="backend")
    sglang_maxlen: int = opt(4096, "SGLang: longest prompt + answer, in tokens.", section="backend")
    sglang_mem_fraction: float = opt(0.7, "SGLang: share of GPU memory for weights and KV cache.",
                                     section="backend")

    def adapters(self) -> list[str]:
        """The adapter folders, in the order they are applied."""
        if not self.adapter_name_or_path:
            return []
        return [part.strip() for part in str(self.adapter_name_or_path).split(",") if part.strip()]


# Keys LLaMA-Factory's inference YAML may carry that only tune its own loaders or multimodal inputs.
ACCEPTED_FOREIGN_INFER_KEYS = {
    "stage", "do_train", "flash_attn", "use_fast_tokenizer", "cache_dir", "model_revision", "hf_hub_token",
    "ms_hub_token", "om_hub_token", "low_cpu_mem_usage", "rope_scaling", "max_length", "use_cache",
    "print_param_status", "image_max_pixels", "image_min_pixels", "video_max_pixels", "video_min_pixels",
    "video_fps", "video_maxlen", "vllm_config", "sglang_config", "sglang_tp_size",
    "sglang_lora_backend", "quantization_method", "quantization_type", "double_quantization", "use_unsloth",
    "enable_liger_kernel", "moe_aux_loss_coef", "disable_gradient_checkpointing", "upcast_layernorm",
    "upcast_lmhead_output", "infer_backend_config", "offload_folder", "device_map",
}


def load_infer_config(source: str | Path | dict[str, Any], *overrides: str, **kw_overrides: Any) -> InferConfig:
    """An InferConfig from a YAML path or dict, with ``key=value`` strings and keyword overrides applied.

    Relative model and adapter paths stay relative to the working directory, as in LLaMA-Factory.
    """
    data = dict(source) if isinstance(source, dict) else read_yaml(source)
    data.update(parse_overrides(list(overrides)))
    data.update(kw_overrides)
    label = "config" if isinstance(source, dict) else str(source)
    config, _ignored = build_dataclass(InferConfig, data, accepted_foreign=ACCEPTED_FOREIGN_INFER_KEYS, source=label)
    problems = check_infer_config(config)
    if problems:
        raise ConfigError(f"{label} has problems:\n- " + "\n- ".join(problems))
    return config


def check_infer_config(config: InferConfig) -> list[str]:
    """Every problem of an inference config, as sentences that say what to change."""
    problems = []
    if not config.model_name_or_path:
        problems.append("model_name_or_path is empty: set it to the base model (LoRA) or the fine-tuned model "
                        "folder (full).")
    if config.infer_backend not in INFER_BACKENDS:
        problems.append(f"infer_backend {config.infer_backend!r} is not supported here; use one of "
                        f"{', '.join(INFER_BACKENDS)}.")
    if config.infer_dtype not in INFER_DTYPES:
        problems.append(f"infer_dtype must be one of {', '.join(INFER_DTYPES)} (got {config.infer_dtype!r}).")
    if config.finetuning_type in ("full", "freeze") and config.adapters():
        problems.append(f"finetuning_type is {config.finetuning_type}, whose output is a whole model with no adapter: "
                        "remove adapter_name_or_path and set model_name_or_path to the training output_dir.")
    if config.max_new_tokens < 1:
        problems.append(f"max_new_tokens must be at least 1 (got {config.max_new_tokens}).")
    if config.do_sample and config.temperature <= 0:
        problems.append("temperature must be above 0 when do_sample is true; set do_sample: false for greedy output.")
    if not 0 < config.top_p <= 1:
        problems.append(f"top_p must be in (0, 1] (got {config.top_p}).")
    if config.num_beams < 1:
        problems.append(f"num_beams must be at least 1 (got {config.num_beams}).")
    return problems


def make_infer_config(output_dir: str | Path, *, base_model: str, method: str, template: str | None,
                      trust_remote_code: bool = False) -> dict[str, Any]:
    """The LLaMA-Factory-shaped inference dict for a training result.

    LoRA/QLoRA: the base model plus the adapter in output_dir. Full/freeze: output_dir is the model, and there is
    no adapter key at all (naming one would load nothing, or fail). Greedy decoding, so validation is reproducible.
    """
    if method in ADAPTER_METHODS:
        config: dict[str, Any] = {"model_name_or_path": str(base_model), "adapter_name_or_path": str(output_dir)}
    elif method in ("full", "freeze"):
        config = {"model_name_or_path": str(output_dir)}
    else:
        raise ConfigError(f"Unknown fine-tuning method {method!r}; use one of lora, qlora, full, freeze.")
    if template:
        config["template"] = template
    config.update({"infer_backend": "huggingface", "trust_remote_code": trust_remote_code, "do_sample": False})
    return config
