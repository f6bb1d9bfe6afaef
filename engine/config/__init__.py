"""Typed configs: training, inference and export; YAML is only their serialization."""

from engine.config.load import ignored_keys, load_config
from engine.config.loader import config_to_dict, dump_yaml, parse_overrides, read_yaml
from engine.config.train import TrainConfig
from engine.config.validate import validate

__all__ = ["TrainConfig", "config_to_dict", "dump_yaml", "ignored_keys", "load_config", "parse_overrides", "read_yaml",
           "validate"]
