"""The inference config: LLaMA-Factory's inference YAML keys (examples/inference/*.yaml), typed.

Declared here with the training and export configs, so the one loader (engine.config.loader) knows all three;
engine.inference loads, checks and uses it. Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config.fields import opt
from engine.config.model_source import ModelSource

INFER_BACKENDS: tuple[str, ...] = ("huggingface", "vllm", "sglang")


@dataclass
class InferConfig(ModelSource):
    """What to load (``ModelSource``) and how to generate. Unknown keys are errors."""

    infer_backend: str = opt(
        "huggingface", "Generation engine: huggingface (everywhere), vllm or sglang (CUDA, optional extras).",
        choices=INFER_BACKENDS, section="model",
        choices_note="LLaMA-Factory's ktransformers backend is not supported.")
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
