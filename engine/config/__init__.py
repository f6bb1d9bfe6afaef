"""Typed configs: training, inference and export; YAML is only their serialization.

``load(purpose, source, *overrides, **kw)`` is the one loader (train | infer | export); ``validate`` and
``warnings`` check a training config; ``default_differences`` lists where omitted keys differ from LLaMA-Factory.
"""

from engine.config.lf_defaults import DEFAULT_DIFFERENCES, DefaultDifference, default_differences
from engine.config.load import ignored_keys, load_config
from engine.config.loader import config_to_dict, dump_yaml, load, parse_overrides
from engine.readers import read_json, read_yaml, short_repr
from engine.config.train import TrainConfig
from engine.config.validate import validate, warnings

__all__ = ["DEFAULT_DIFFERENCES", "DefaultDifference", "TrainConfig", "config_to_dict", "default_differences",
           "dump_yaml", "ignored_keys", "load", "load_config", "parse_overrides", "read_json", "read_yaml", "short_repr", "validate", "warnings"]
