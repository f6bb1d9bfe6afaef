"""Loading a training config from YAML or a dict, with overrides: the one entry every caller uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.config.loader import build_dataclass, parse_overrides, read_yaml
from engine.config.train import ACCEPTED_FOREIGN_KEYS, KEY_ALIASES, TrainConfig
from engine.errors import ConfigError


def load_config(source: str | Path | dict[str, Any], *overrides: str, **kw_overrides: Any) -> TrainConfig:
    """A TrainConfig from a YAML path or a dict, with ``key=value`` strings and keyword overrides applied.

    Unknown keys raise ConfigError naming the nearest valid key. Relative paths in the config (dataset_dir,
    deepspeed) are later resolved against the config file's folder, then the working directory.
    """
    if isinstance(source, dict):
        data, config_dir = dict(source), None
    else:
        data, config_dir = read_yaml(source), str(Path(source).resolve().parent)
    data.update(parse_overrides(list(overrides)))
    data.update(kw_overrides)
    for alias, key in KEY_ALIASES.items():
        if alias in data:
            value = data.pop(alias)
            if key in data and data[key] not in (None, value, 1):
                raise ConfigError(f"{alias}={value} and {key}={data[key]} disagree; keep one of them.")
            data[key] = value
    config, _ignored = build_dataclass(TrainConfig, data, accepted_foreign=ACCEPTED_FOREIGN_KEYS,
                                       source=str(source) if not isinstance(source, dict) else "config")
    config.config_dir = config_dir
    return config


def ignored_keys(source: str | Path | dict[str, Any]) -> list[str]:
    """Keys of another tool's YAML that we accept but do not use (so the user is told, not surprised)."""
    data = dict(source) if isinstance(source, dict) else read_yaml(source)
    return sorted(k for k in data if k in ACCEPTED_FOREIGN_KEYS)
