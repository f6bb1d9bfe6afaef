"""Fine-tuning methods. Each folder has the same shape: ``prepare(model, config) -> model`` (sets what trains)
and ``save(model, tokenizer, out_dir)`` (writes what the method produces)."""

from __future__ import annotations

from types import ModuleType

from engine.errors import ConfigError


def get_method(name: str) -> ModuleType:
    """The method module for ``lora | qlora | full | freeze``."""
    from engine.methods import freeze, full, lora, qlora

    methods = {"lora": lora, "qlora": qlora, "full": full, "freeze": freeze}
    if name not in methods:
        raise ConfigError(f"Unknown fine-tuning method {name!r}. Valid: {', '.join(methods)}.")
    return methods[name]


def count_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total
