"""A rough memory and run-time estimate shown before launch, so an out-of-memory run is caught before it starts.

Memory = weights + trainable state + activations:
- weights: parameters x bytes per weight (fp32 4 on CPU, bf16 2 on GPU, 4-bit ~0.55 with quantization overhead);
- full / freeze training adds, per trained parameter, a gradient (same dtype) and AdamW's two fp32 moments
  (8 bytes), plus an fp32 master copy under mixed precision (4 bytes) — the usual 16 bytes per parameter;
- LoRA adds adapters of ~1% of the parameters with the same per-parameter cost;
- activations per layer ~ 34 x tokens x hidden bytes in 16-bit (Korthikanti et al., 2022, without recompute),
  divided by ~5 with gradient checkpointing.
Time = tokens to process x FLOPs per token / (peak FLOP/s x utilisation): 6 x params FLOPs per token for full
training, ~4 x for LoRA (no weight gradients of the frozen base).
Preference training (stage dpo) scores two answers per prompt, so tokens count twice; DPO's reference adds a
forward pass (2 x params per token) and, for full/freeze tuning, a frozen copy of the weights in memory (LoRA's
reference is the base with the adapter off; ORPO and SimPO have none). The CPU figures were measured on this project's
2-core CI box (tiny Qwen3, 0.8 M params: ~5,600 tokens/s fp32), the GPU ones are H100-class bf16 at 35 % MFU.
Both are order-of-magnitude figures and the screen says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from engine.methods import is_adapter

PEAK_FLOPS = {"cpu": 1.0e11, "gpu": 4.0e14}
UTILISATION = {"cpu": 0.3, "gpu": 0.35}
ACTIVATION_FACTOR = 34
CHECKPOINTING_SAVING = 5
LORA_SHARE = 0.01
CHARS_PER_TOKEN = 3.2
# A training process spends this long before its first step (interpreter, torch/transformers imports, model
# load, tokenization): ~10-15 s measured on the 2-core CI box; GPU processes also initialise CUDA.
STARTUP_S = {"cpu": 15.0, "gpu": 30.0}


@dataclass
class Estimate:
    memory_bytes: float | None
    seconds: float | None
    params: float | None
    basis: str
    """What the figures rest on (parameter count source), shown next to them."""


def _model_shape(model_path: str | None) -> tuple[int | None, int | None]:
    """(hidden_size, num_hidden_layers) from config.json when the model is on disk."""
    if not model_path:
        return None, None
    try:
        config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    config = config.get("text_config", config)
    return config.get("hidden_size"), config.get("num_hidden_layers")


def _params(model: str | None, model_path: str | None) -> tuple[float | None, str]:
    from engine.models.registry import find_model

    entry = find_model(model or "") if model else None
    if entry is not None:
        return entry.params_b * 1e9, "registry"
    if model_path and Path(model_path).is_dir():
        weights = sum(p.stat().st_size for p in Path(model_path).glob("*.safetensors"))
        if weights:
            return weights / 2, "weights on disk"  # 16-bit checkpoints: 2 bytes per parameter
    return None, "unknown"


def estimate(config: dict, *, model: str | None, method: str, on_gpu: bool, rows: int | None,
             mean_chars: float | None, devices: int = 1, total_steps: int | None = None) -> Estimate:
    """Memory per device and wall time of the whole run (None where the inputs are unknown)."""
    params, basis = _params(model, config.get("model_name_or_path"))
    if params is None:
        return Estimate(None, None, None, basis)
    weight_bytes = 0.55 if method == "qlora" else (2 if on_gpu else 4)
    trained = params * (LORA_SHARE if is_adapter(method) else 1.0)
    preference = config.get("stage") == "dpo"
    reference = preference and config.get("pref_loss", "sigmoid") == "sigmoid"
    copies = 2 if reference and not is_adapter(method) else 1
    memory = params * weight_bytes * copies + trained * 16
    hidden, layers = _model_shape(config.get("model_name_or_path"))
    tokens_per_row = min(config["cutoff_len"], (mean_chars or 4 * config["cutoff_len"]) / CHARS_PER_TOKEN)
    if hidden and layers:
        micro_tokens = config["per_device_train_batch_size"] * tokens_per_row * (2 if preference else 1)
        activations = ACTIVATION_FACTOR * micro_tokens * hidden * layers * (1 if on_gpu else 2)
        memory += activations / (CHECKPOINTING_SAVING if config.get("gradient_checkpointing") else 1)
    seconds = None
    if rows is not None:
        epochs = config["num_train_epochs"] if not config.get("max_steps", -1) > 0 else 1
        tokens = rows * tokens_per_row * epochs
        if total_steps and config.get("max_steps", -1) > 0:
            per_step = config["per_device_train_batch_size"] * config["gradient_accumulation_steps"] * devices
            tokens = total_steps * per_step * tokens_per_row
        per_token = (4 if is_adapter(method) else 6) + (2 if reference else 0)
        flops = tokens * (2 if preference else 1) * per_token * params
        kind = "gpu" if on_gpu else "cpu"
        seconds = STARTUP_S[kind] + flops / (PEAK_FLOPS[kind] * UTILISATION[kind] * devices)
    return Estimate(memory, seconds, params, basis)
