"""The inference config: LLaMA-Factory's inference YAML keys (examples/inference/*.yaml), typed.

Importing this module does not import torch, so the TUI can build and check configs instantly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.fields import field_problems
from engine.config.infer import INFER_BACKENDS, InferConfig
from engine.config.loader import load_checked
from engine.config.model_source import INFER_DTYPES
from engine.errors import ConfigError
from engine.methods import ADAPTER_METHODS  # noqa: F401 - re-exported: which methods write an adapter

__all__ = ["ADAPTER_METHODS", "INFER_BACKENDS", "INFER_DTYPES", "InferConfig", "check_infer_config",
           "load_infer_config", "make_infer_config"]


def load_infer_config(source: str | Path | dict[str, Any], *overrides: str, **kw_overrides: Any) -> InferConfig:
    """An InferConfig from a YAML path or dict, with ``key=value`` strings and keyword overrides applied.

    Relative model and adapter paths stay relative to the working directory, as in LLaMA-Factory.
    """
    return load_checked("infer", check_infer_config, source, *overrides, **kw_overrides)


def check_infer_config(config: InferConfig) -> list[str]:
    """Every problem of an inference config, as sentences that say what to change."""
    problems = field_problems(config)
    if not config.model_name_or_path:
        problems.append("model_name_or_path is empty: set it to the base model (LoRA) or the fine-tuned model "
                        "folder (full).")
    if config.finetuning_type in ("full", "freeze") and config.adapters():
        problems.append(f"finetuning_type is {config.finetuning_type}, whose output is a whole model with no adapter: "
                        "remove adapter_name_or_path and set model_name_or_path to the training output_dir.")
    # temperature 0 with do_sample is greedy decoding, as in LLaMA-Factory (generation_settings turns sampling off)
    return problems


def make_infer_config(output_dir: str | Path, *, base_model: str, method: str, template: str | None,
                      trust_remote_code: bool = False) -> dict[str, Any]:
    """The LLaMA-Factory-shaped inference dict for a training result.

    LoRA/QLoRA: the base model plus the adapter in output_dir. Full/freeze: output_dir is the model, and there is
    no adapter key at all (naming one would load nothing, or fail). Greedy decoding, so validation is reproducible.
    """
    config = result_model_keys(output_dir, base_model=base_model, method=method, template=template)
    config.update({"infer_backend": "huggingface", "trust_remote_code": trust_remote_code, "do_sample": False})
    return config


def result_model_keys(output_dir: str | Path, *, base_model: str, method: str, template: str | None) -> dict[str, Any]:
    """The keys that load a training result, as LLaMA-Factory's inference and export YAMLs name it: LoRA/QLoRA,
    the base plus the adapter in output_dir; full/freeze, output_dir itself (no adapter key: naming one would load
    nothing, or fail). The chat template the run trained with, when there is one."""
    if method in ADAPTER_METHODS:
        config: dict[str, Any] = {"model_name_or_path": str(base_model), "adapter_name_or_path": str(output_dir)}
    elif method in ("full", "freeze"):
        config = {"model_name_or_path": str(output_dir)}
    else:
        raise ConfigError(f"Unknown fine-tuning method {method!r}; use one of lora, qlora, full, freeze.")
    if template:
        config["template"] = template
    return config


@dataclass
class Generation:
    """One answer: its text, how many tokens it took, its share of the batch's wall time, and whether it was cut
    at max_new_tokens instead of ending with a stop token."""

    text: str
    new_tokens: int
    time_s: float
    cut: bool = False
