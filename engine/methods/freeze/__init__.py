"""Freeze tuning: train only the last N decoder layers (or the first N when negative); the rest stays fixed."""

from __future__ import annotations

import re

from engine.errors import ConfigError
from engine.methods.full import load_for_resume, save  # noqa: F401 - output is a full model


def trainable_layer_ids(num_layers: int, trainable_layers: int) -> list[int]:
    if trainable_layers == 0 or abs(trainable_layers) > num_layers:
        raise ConfigError(f"freeze_trainable_layers must be between 1 and {num_layers} (or -1 to -{num_layers}) "
                          f"for this model, got {trainable_layers}.")
    if trainable_layers > 0:
        return list(range(num_layers - trainable_layers, num_layers))
    return list(range(-trainable_layers))


def prepare(model, config):
    num_layers = model.config.num_hidden_layers
    layer_ids = set(trainable_layer_ids(num_layers, config.freeze_trainable_layers))
    modules = [m.strip() for m in config.freeze_trainable_modules.split(",") if m.strip()]
    layer_pattern = re.compile(r"\.layers\.(\d+)\.")
    for name, parameter in model.named_parameters():
        match = layer_pattern.search(name)
        in_layer = bool(match) and int(match.group(1)) in layer_ids
        in_module = modules == ["all"] or any(f".{m}." in name or name.endswith(f".{m}") for m in modules)
        # A reward model's score head is new: it always trains.
        parameter.requires_grad_((in_layer and in_module) or name.startswith("score."))
    return model
