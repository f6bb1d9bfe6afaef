"""Optional GPU serving engines as ``infer_backend``: vLLM and SGLang (the huggingface backend is in chat_model).

Both are optional extras, CUDA only. Asking for one that is not installed stops with the install command and the
alternative, before any weights load. They take the same prompt token ids as the huggingface backend, so the
training template applies unchanged; LoRA adapters are served unmerged (one adapter; merge first for more).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from engine.errors import ConfigError, DeviceError

# backend name -> (import name, pip extra that installs it)
OPTIONAL_BACKENDS: dict[str, tuple[str, str]] = {
    "vllm": ("vllm", "pip install 'lf-assistant[vllm]'  (or: pip install vllm)"),
    "sglang": ("sglang", "pip install 'sglang[all]'"),
}


def check_backend(name: str) -> None:
    """Raise with the way forward when the backend cannot run here; return quietly when it can."""
    if name == "huggingface":
        return
    if name not in OPTIONAL_BACKENDS:
        raise ConfigError(f"infer_backend {name!r} is not supported; use huggingface, vllm or sglang.")
    module, install = OPTIONAL_BACKENDS[name]
    if importlib.util.find_spec(module) is None:
        raise DeviceError(f"infer_backend: {name} needs the {module} package, which is not installed. Install it with "
                          f"`{install}` (CUDA GPUs only), or set infer_backend: huggingface (works everywhere).")
    import torch

    if not torch.cuda.is_available():
        raise DeviceError(f"infer_backend: {name} runs on CUDA GPUs only and none is visible here. Set "
                          "infer_backend: huggingface to run on this machine.")


def _one_adapter(plan, name: str) -> str | None:
    if len(plan.adapters) > 1:
        raise ConfigError(f"infer_backend: {name} serves one LoRA adapter; {len(plan.adapters)} are configured. "
                          "Merge them first with `lf-assistant export`, or use infer_backend: huggingface.")
    return plan.adapters[0] if plan.adapters else None


class VllmBackend:
    def __init__(self, plan, config, tokenizer, template) -> None:
        from vllm import LLM

        self.adapter = _one_adapter(plan, "vllm")
        self.stop_ids = template.stop_token_ids(tokenizer)
        self.llm = LLM(model=plan.base_model, tokenizer=plan.tokenizer_source,
                       trust_remote_code=config.trust_remote_code,
                       dtype=config.infer_dtype, max_model_len=config.vllm_maxlen,
                       gpu_memory_utilization=config.vllm_gpu_util, enforce_eager=config.vllm_enforce_eager,
                       enable_lora=self.adapter is not None, max_lora_rank=config.vllm_max_lora_rank)

    def generate(self, prompts: list[list[int]], settings: dict, *, batch_size: int,
                 on_batch: Callable[[int], None] | None = None):
        from vllm import SamplingParams
        from vllm.lora.request import LoRARequest

        from engine.inference.config import Generation

        sampling = SamplingParams(
            temperature=settings["temperature"] if settings["do_sample"] else 0.0,
            top_p=settings["top_p"] if settings["do_sample"] else 1.0,
            top_k=settings["top_k"] if settings["do_sample"] else -1,
            repetition_penalty=settings["repetition_penalty"], max_tokens=settings["max_new_tokens"],
            stop_token_ids=self.stop_ids, skip_special_tokens=settings["skip_special_tokens"])
        lora = LoRARequest("adapter", 1, self.adapter) if self.adapter else None
        # vLLM schedules its own batches; batch_size only matters to the huggingface backend.
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompts], sampling, lora_request=lora)
        if on_batch:
            on_batch(len(prompts))
        return [Generation(text=o.outputs[0].text, new_tokens=len(o.outputs[0].token_ids), time_s=0.0,
                           cut=o.outputs[0].finish_reason == "length") for o in outputs]

    def close(self) -> None:
        self.llm = None


class SglangBackend:
    def __init__(self, plan, config, tokenizer, template) -> None:
        import sglang

        self.adapter = _one_adapter(plan, "sglang")
        self.stop_ids = template.stop_token_ids(tokenizer)
        extra = {"lora_paths": [self.adapter], "max_loras_per_batch": 1} if self.adapter else {}
        self.engine = sglang.Engine(model_path=plan.base_model, tokenizer_path=plan.tokenizer_source,
                                    trust_remote_code=config.trust_remote_code, context_length=config.sglang_maxlen,
                                    mem_fraction_static=config.sglang_mem_fraction, dtype=config.infer_dtype,
                                    log_level="error", **extra)

    def generate(self, prompts: list[list[int]], settings: dict, *, batch_size: int,
                 on_batch: Callable[[int], None] | None = None):
        from engine.inference.config import Generation

        params = {"max_new_tokens": settings["max_new_tokens"], "stop_token_ids": self.stop_ids,
                  "repetition_penalty": settings["repetition_penalty"],
                  "skip_special_tokens": settings["skip_special_tokens"],
                  "temperature": settings["temperature"] if settings["do_sample"] else 0.0}
        if settings["do_sample"]:
            params.update(top_p=settings["top_p"], top_k=settings["top_k"])
        lora = {"lora_path": [self.adapter] * len(prompts)} if self.adapter else {}
        outputs = self.engine.generate(input_ids=prompts, sampling_params=params, **lora)
        if on_batch:
            on_batch(len(prompts))
        return [Generation(text=o["text"], new_tokens=int(o.get("meta_info", {}).get("completion_tokens", 0)),
                           cut=_sglang_finish(o) == "length",
                           time_s=0.0) for o in outputs]

    def close(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
        self.engine = None


def _sglang_finish(output: dict) -> str | None:
    """Why SGLang ended an answer: meta_info.finish_reason is {"type": "length" | "stop" | ..., ...}."""
    reason = output.get("meta_info", {}).get("finish_reason")
    return reason.get("type") if isinstance(reason, dict) else reason


BACKEND_CLASSES = {"vllm": VllmBackend, "sglang": SglangBackend}


def load_backend(name: str, plan, config, tokenizer, template):
    """An optional backend, started (check_backend has passed)."""
    if config.quantization_bit is not None:
        raise ConfigError(f"infer_backend: {name} loads bitsandbytes weights its own way; remove quantization_bit or "
                          "use infer_backend: huggingface.")
    return BACKEND_CLASSES[name](plan, config, tokenizer, template)
