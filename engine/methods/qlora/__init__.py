"""QLoRA: LoRA adapters on a 4/8-bit bitsandbytes base (CUDA only; the loader refuses it elsewhere)."""

from __future__ import annotations

from engine.methods.lora import load_for_resume, save, target_modules  # noqa: F401 - same files as LoRA


def prepare(model, config):
    from peft import prepare_model_for_kbit_training

    from engine.methods import lora

    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=config.gradient_checkpointing)
    return lora.prepare(model, config)
