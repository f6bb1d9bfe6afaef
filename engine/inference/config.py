"""The inference config: LLaMA-Factory's inference YAML keys (examples/inference/*.yaml), typed.

Importing this module does not import torch, so the TUI can build and check configs instantly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.fields import field_problems, opt
from engine.config.loader import load
from engine.config.model_source import INFER_DTYPES, ModelSource
from engine.errors import ConfigError

INFER_BACKENDS: tuple[str, ...] = ("huggingface", "vllm", "sglang")
# Methods whose output_dir is a LoRA adapter on top of the base; every other method writes a whole model.
ADAPTER_METHODS: tuple[str, ...] = ("lora", "qlora")
__all__ = ["ADAPTER_METHODS", "INFER_BACKENDS", "INFER_DTYPES", "InferConfig", "check_infer_config",
           "load_infer_config", "make_infer_config"]


@dataclass
class InferConfig(ModelSource):
    """What to load (``ModelSource``) and how to generate. Unknown keys are errors."""

    infer_backend: str = opt(
        "huggingface", "Generation engine: huggingface (everywhere), vllm or sglang (CUDA, optional extras).",
        choices=INFER_BACKENDS, section="model",
        choices_note="LLaMA-Factory's ktransformers backend is not supported.")
    default_system: str | None = opt(None, "System prompt used when a conversation has none.", section="generation")
    max_new_tokens: int = opt(1024, "Most tokens generated per answer.", section="generation", ge=1, le=10**6)
    do_sample: bool = opt(True, "Sample (true) or decode greedily (false, reproducible).", section="generation")
    temperature: float = opt(0.95, "Sampling temperature (ignored when do_sample is false).", section="generation",
                             ge=0, le=100)
    top_p: float = opt(0.7, "Nucleus sampling: keep the smallest set of tokens with this much probability.",
                       section="generation", gt=0, le=1)
    top_k: int = opt(50, "Sample among the k most likely tokens (0: no top-k).", section="generation",
                     ge=0, le=10**6)
    repetition_penalty: float = opt(1.0, "Above 1 discourages repeating tokens.", section="generation",
                                    gt=0, le=100)
    num_beams: int = opt(1, "Beam search width (1: no beam search).", section="generation", ge=1, le=1024)
    length_penalty: float = opt(1.0, "Beam search: exponent on the length (above 1 favours longer).",
                                section="generation", ge=-100, le=100)
    skip_special_tokens: bool = opt(True, "Drop special tokens from the decoded answer.", section="generation")
    vllm_maxlen: int = opt(4096, "vLLM: longest prompt + answer, in tokens.", section="backend", ge=1, le=1 << 24)
    vllm_gpu_util: float = opt(0.7, "vLLM: share of GPU memory it may take (0-1).", section="backend", gt=0, le=1)
    vllm_enforce_eager: bool = opt(False, "vLLM: no CUDA graphs (less memory, slower).", section="backend")
    vllm_max_lora_rank: int = opt(32, "vLLM: the largest LoRA rank it reserves room for.", section="backend",
                                  ge=1, le=65536)
    sglang_maxlen: int = opt(4096, "SGLang: longest prompt + answer, in tokens.", section="backend",
                             ge=1, le=1 << 24)
    sglang_mem_fraction: float = opt(0.7, "SGLang: share of GPU memory for weights and KV cache.",
                                     section="backend", gt=0, le=1)


def load_infer_config(source: str | Path | dict[str, Any], *overrides: str, **kw_overrides: Any) -> InferConfig:
    """An InferConfig from a YAML path or dict, with ``key=value`` strings and keyword overrides applied.

    Relative model and adapter paths stay relative to the working directory, as in LLaMA-Factory.
    """
    config = load("infer", source, *overrides, **kw_overrides)
    problems = check_infer_config(config)
    if problems:
        label = "config" if isinstance(source, dict) else str(source)
        raise ConfigError(f"{label} has problems:\n- " + "\n- ".join(problems))
    return config


def check_infer_config(config: InferConfig) -> list[str]:
    """Every problem of an inference config, as sentences that say what to change."""
    problems = field_problems(config)
    if not config.model_name_or_path:
        problems.append("model_name_or_path is empty: set it to the base model (LoRA) or the fine-tuned model "
                        "folder (full).")
    if config.finetuning_type in ("full", "freeze") and config.adapters():
        problems.append(f"finetuning_type is {config.finetuning_type}, whose output is a whole model with no adapter: "
                        "remove adapter_name_or_path and set model_name_or_path to the training output_dir.")
    if config.do_sample and config.temperature == 0:
        problems.append("temperature must be above 0 when do_sample is true; set do_sample: false for greedy output.")
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
