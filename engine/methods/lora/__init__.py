"""LoRA: low-rank adapters on linear layers; only the adapters train and only they are saved."""

from __future__ import annotations

from pathlib import Path

import torch


# A reward model's score head (transformers' *ForSequenceClassification) trains in full beside the adapters.
SCORE_HEAD = "score"


def is_reward_model(model) -> bool:
    return isinstance(getattr(model, SCORE_HEAD, None), torch.nn.Linear) and model.get_output_embeddings() is None


def target_modules(model, lora_target: str) -> list[str] | str:
    """``all`` -> every linear layer's short name except the output head; else the comma-separated names."""
    if lora_target.strip() != "all":
        return [name.strip() for name in lora_target.split(",") if name.strip()]
    heads = {model.get_output_embeddings(), getattr(model, SCORE_HEAD, None)} - {None}
    names = set()
    for full_name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module not in heads:
            names.add(full_name.rsplit(".", 1)[-1])
    return sorted(names)


def prepare(model, config):
    from peft import LoraConfig, PeftModel, get_peft_model

    if config.adapter_name_or_path:
        from pathlib import Path

        from engine.models.cache import require_intact_safetensors

        adapter = Path(config.adapter_name_or_path)
        require_intact_safetensors([adapter / "adapter_model.safetensors"], "The adapter")
        return PeftModel.from_pretrained(model, config.adapter_name_or_path, is_trainable=True)
    reward = is_reward_model(model)
    lora_config = LoraConfig(
        task_type="SEQ_CLS" if reward else "CAUSAL_LM",
        r=config.lora_rank,
        lora_alpha=config.lora_alpha_value,
        lora_dropout=config.lora_dropout,
        target_modules=target_modules(model, config.lora_target),
        modules_to_save=[SCORE_HEAD] if reward else None,
    )
    return get_peft_model(model, lora_config)


def save(model, out_dir: Path) -> None:
    """A PEFT adapter folder (adapter_config.json + adapter_model.safetensors)."""
    model.save_pretrained(str(out_dir), safe_serialization=True)


def load_for_resume(model, checkpoint: Path) -> None:
    """Copy adapter weights from a checkpoint into the live PEFT model."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(checkpoint / "adapter_model.safetensors")))
