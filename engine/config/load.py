"""The training config's loader, by the name every caller uses (engine.load_config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.config.loader import load
from engine.config.train import TrainConfig


def load_config(source: str | Path | dict[str, Any], *overrides: str, **kw_overrides: Any) -> TrainConfig:
    """A TrainConfig from a YAML path or a dict, with ``key=value`` strings and keyword overrides applied.

    Unknown keys raise ConfigError naming the nearest valid key; LLaMA-Factory keys lf-assistant does not support
    are refused by name. Relative paths in the config (dataset_dir, deepspeed) are later resolved against the
    config file's folder, then the working directory.
    """
    return load("train", source, *overrides, **kw_overrides)


def ignored_keys(source: str | Path | dict[str, Any] | TrainConfig) -> list[str]:
    """Keys of another tool's YAML that we accept but do not use (so the user is told, not surprised)."""
    config = source if isinstance(source, TrainConfig) else load_config(source)
    return list(config.unused_keys)
