"""LoRA: low-rank adapters on linear layers; only the adapters (and any additional_target modules) train and are
saved. The variants LLaMA-Factory offers are PEFT options here too:

- ``use_rslora``: scaling alpha / sqrt(r) instead of alpha / r;
- ``use_dora``: a trained magnitude vector per adapted layer (weight-decomposed LoRA);
- ``pissa_init``: adapters initialised from the principal singular vectors of each weight (the base keeps the
  residual); ``pissa_iter`` fast-SVD iterations (-1: exact SVD). The result is converted to a plain LoRA of the
  original base (see ``end``); ``pissa_convert`` also keeps that in ``pissa_converted/``, as LLaMA-Factory does;
- ``additional_target``: whole modules (e.g. embed_tokens, lm_head) trained beside the adapters and saved with them;
- ``adapter_name_or_path`` (comma-separated): every adapter but the last is merged into the base and training
  continues the last; with ``create_new_adapter`` all of them are merged and a new adapter starts.
"""

from __future__ import annotations

from pathlib import Path

import torch

from engine.readers import comma_names

# A reward model's score head (transformers' *ForSequenceClassification) trains in full beside the adapters.
SCORE_HEAD = "score"
PISSA_INIT, PISSA_BACKUP, PISSA_CONVERTED = "pissa_init", "pissa_backup", "pissa_converted"


def is_reward_model(model) -> bool:
    return isinstance(getattr(model, SCORE_HEAD, None), torch.nn.Linear) and model.get_output_embeddings() is None


def target_modules(model, lora_target: str) -> list[str] | str:
    """``all`` -> every linear layer's short name except the output head; else the comma-separated names."""
    if lora_target.strip() != "all":
        return comma_names(lora_target)
    heads = {model.get_output_embeddings(), getattr(model, SCORE_HEAD, None)} - {None}
    names = set()
    for full_name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module not in heads:
            names.add(full_name.rsplit(".", 1)[-1])
    return sorted(names)


def embedding_module_names(model) -> list[str]:
    """Short names of the input and output embeddings (what resize_vocab trains, as in LLaMA-Factory)."""
    wanted = {model.get_input_embeddings(), model.get_output_embeddings()} - {None}
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if module in wanted})


def init_weights(config) -> bool | str:
    if not getattr(config, "pissa_init", False):
        return True
    return "pissa" if config.pissa_iter == -1 else f"pissa_niter_{config.pissa_iter}"


def lora_config(model, config):
    from peft import LoraConfig

    reward = is_reward_model(model)
    extra = comma_names(getattr(config, "additional_target", None))
    if not extra and getattr(config, "resize_vocab", False):
        extra = embedding_module_names(model)  # new embedding rows must train, as LLaMA-Factory does
    if reward:
        extra.append(SCORE_HEAD)
    return LoraConfig(
        task_type="SEQ_CLS" if reward else "CAUSAL_LM",
        r=config.lora_rank,
        lora_alpha=config.lora_alpha_value,
        lora_dropout=config.lora_dropout,
        target_modules=target_modules(model, config.lora_target),
        use_rslora=getattr(config, "use_rslora", False),
        use_dora=getattr(config, "use_dora", False),
        init_lora_weights=init_weights(config),
        modules_to_save=extra or None,
    )


def prepare(model, config):
    from peft import PeftModel, get_peft_model

    adapters = comma_names(config.adapter_name_or_path)
    create_new = getattr(config, "create_new_adapter", False)
    to_merge, resume = (adapters, None) if create_new or not adapters else (adapters[:-1], adapters[-1])
    for adapter in to_merge:
        _require_adapter(adapter)
        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    if resume:
        _require_adapter(resume)
        return PeftModel.from_pretrained(model, resume, is_trainable=True)
    return get_peft_model(model, lora_config(model, config))


def _require_adapter(adapter: str) -> None:
    from engine.models.cache import require_intact_safetensors

    require_intact_safetensors([Path(adapter) / "adapter_model.safetensors"], "The adapter")


def save(model, out_dir: Path) -> None:
    """A PEFT adapter folder (adapter_config.json + adapter_model.safetensors)."""
    model.save_pretrained(str(out_dir), safe_serialization=True)


def load_for_resume(model, checkpoint: Path) -> None:
    """Copy adapter weights from a checkpoint into the live PEFT model."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(checkpoint / "adapter_model.safetensors")))


def _as_plain_lora(model, folder: Path, **kwargs) -> None:
    """Save with the config saying plain initialisation (what loads onto a base without re-running PiSSA)."""
    peft_config = model.peft_config["default"]
    kept = peft_config.init_lora_weights
    peft_config.init_lora_weights = True
    try:
        model.save_pretrained(str(folder), safe_serialization=True, **kwargs)
    finally:
        peft_config.init_lora_weights = kept


def begin(model, config, output_dir: Path, *, resumed: bool) -> str | None:
    """Before the first step of a PiSSA run: keep the adapter as initialised in pissa_init/ (the conversion at the
    end needs it). A resumed run keeps the one its first start wrote."""
    folder = output_dir / PISSA_INIT
    if not getattr(config, "pissa_init", False):
        return None
    if resumed and (folder / "adapter_model.safetensors").is_file():
        return None
    _as_plain_lora(model, folder)
    return f"PiSSA: the initial adapter is kept in {folder} for the conversion at the end."


def end(model, config, output_dir: Path) -> str | None:
    """After the final save of a PiSSA run: the adapter in output_dir becomes the plain LoRA of the ORIGINAL base
    that the trained PiSSA adapter amounts to (rank doubled; PEFT's conversion). Unconverted, loading it would
    re-run PiSSA's fast SVD, which is randomised, on the base: another residual, silently another model. The raw
    adapter is kept in pissa_backup/, and with pissa_convert the converted one also in pissa_converted/ (the
    folders LLaMA-Factory writes)."""
    if not getattr(config, "pissa_init", False):
        return None
    import shutil

    _as_plain_lora(model, output_dir / PISSA_BACKUP)
    converted = output_dir / PISSA_CONVERTED
    model.save_pretrained(str(converted), safe_serialization=True,
                          path_initial_model_for_weight_conversion=str(output_dir / PISSA_INIT))
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        shutil.copyfile(converted / name, output_dir / f".{name}.converting")
        (output_dir / f".{name}.converting").replace(output_dir / name)
    if not getattr(config, "pissa_convert", False):
        shutil.rmtree(converted)
    return (f"PiSSA: {output_dir} holds the trained adapter converted to a plain LoRA of the original base "
            f"(rank {2 * config.lora_rank}); the raw PiSSA adapter is in {output_dir / PISSA_BACKUP}.")
