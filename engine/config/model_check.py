"""LoRA and freeze settings checked against the model before it loads: module names and rank versus layer widths.

Only local model folders are inspected. ``config.json`` alone gives the widths of the usual decoder layers, which
is enough for ``lora_target: all`` (the default, kept instant). Named targets need the module names: the model is
then built on the meta device (no weights, no memory), never with remote code.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from engine.readers import clip, short_repr


@dataclass(frozen=True)
class LinearLayers:
    """The model's linear layers: full module name -> (in, out) widths, and the output head's name."""

    widths: dict[str, tuple[int, int]]
    head: str | None
    modules: tuple[str, ...] | None = None
    """Every module's full name (additional_target names whole modules, not only linear ones)."""
    parameters: tuple[str, ...] | None = None
    """Every parameter's full name (freeze tuning picks its modules by the parameters they hold)."""
    num_layers: int | None = None
    """The decoder layer count the loaded model reports (config.num_hidden_layers), as freeze tuning counts them."""

    def short_names(self) -> list[str]:
        return sorted({name.rsplit(".", 1)[-1] for name in self.widths if name != self.head})


def local_config(model: str | None) -> dict | None:
    """config.json of a local model folder, or None (hub id, missing, unreadable)."""
    if not model:
        return None
    path = Path(os.path.expanduser(model)) / "config.json"
    if not path.is_file():
        return None
    from engine.readers import read_json
    from engine.errors import EngineError

    try:
        data = read_json(path, what="model config")
    except EngineError:
        return None
    return data if isinstance(data, dict) else None


def config_widths(cfg: dict) -> dict[str, int]:
    """Layer widths named in config.json (the text config of a multimodal one): hidden, MLP, key/value heads."""
    cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
    widths = {}
    for key in ("hidden_size", "intermediate_size", "moe_intermediate_size", "q_lora_rank", "kv_lora_rank"):
        if isinstance(cfg.get(key), int) and cfg[key] > 0:
            widths[key] = cfg[key]
    heads, kv_heads, hidden = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads"), cfg.get("hidden_size")
    head_dim = cfg.get("head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int)
                                       and heads > 0 else None)
    if isinstance(kv_heads, int) and isinstance(head_dim, int) and kv_heads * head_dim > 0:
        widths["key/value projection"] = kv_heads * head_dim
    return widths


@functools.lru_cache(maxsize=4)
def _linear_layers(folder: str, stamp: float) -> LinearLayers | None:
    """Build the model on the meta device and list its linear layers (cached per config.json version)."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.from_pretrained(folder, trust_remote_code=False)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg, trust_remote_code=False)
    except Exception:  # an architecture this transformers cannot build without remote code: skip the check
        return None
    head = model.get_output_embeddings()
    widths = {name: (module.in_features, module.out_features) for name, module in model.named_modules()
              if isinstance(module, torch.nn.Linear)}
    head_name = next((name for name, module in model.named_modules() if module is head), None)
    from engine.methods.freeze import config_layer_count

    return LinearLayers(widths, head_name, tuple(name for name, _ in model.named_modules() if name),
                        tuple(name for name, _ in model.named_parameters()), config_layer_count(model.config))


def linear_layers(model: str) -> LinearLayers | None:
    folder = Path(os.path.expanduser(model)).resolve()
    config_path = folder / "config.json"
    return _linear_layers(str(folder), config_path.stat().st_mtime) if config_path.is_file() else None


def _matches(target: str, full_name: str) -> bool:
    """PEFT's rule for a target string: the full module name, or its last dotted parts."""
    return full_name == target or full_name.endswith("." + target)


def lora_target_problems(model: str | None, lora_target: str) -> list[str]:
    """A problem for each lora_target name that matches no linear layer of the (local) model."""
    names = [name.strip() for name in lora_target.split(",") if name.strip()]
    if not names or names == ["all"] or local_config(model) is None:
        return []
    layers = linear_layers(model)
    if layers is None:
        return []
    available = ", ".join(layers.short_names())
    problems = []
    for name in names:
        if name == "all":
            continue  # all beside other names is refused with the field's own rule (fields.alone_problem)
        if not any(_matches(name, full) for full in layers.widths):
            problems.append(f"lora_target {short_repr(name, 40)} matches no module of this model; its linear "
                            f"modules are: {clip(available, 300)}.")
    return problems


def smallest_targeted_width(model: str | None, lora_target: str) -> tuple[int, str] | None:
    """(width, which layer) of the narrowest layer LoRA would adapt, or None when it cannot be told cheaply."""
    cfg = local_config(model)
    if cfg is None:
        return None
    names = [name.strip() for name in lora_target.split(",") if name.strip()]
    if names in ([], ["all"]):
        widths = config_widths(cfg)
        return min(((width, key) for key, width in widths.items()), default=None)
    layers = linear_layers(model)
    if layers is None:
        return None
    matched = [(min(pair), full.rsplit(".", 1)[-1]) for full, pair in layers.widths.items()
               if any(_matches(name, full) for name in names)]
    return min(matched, default=None)


def lora_rank_warning(model: str | None, lora_target: str, lora_rank: int) -> str | None:
    """A warning when the rank is at least the narrowest adapted width: the adapter is then as large as (or
    larger than) the layer it adapts, and no longer low-rank."""
    smallest = smallest_targeted_width(model, lora_target)
    if smallest is None or lora_rank < smallest[0]:
        return None
    width, where = smallest
    return (f"lora_rank {lora_rank} is at least the width of the narrowest adapted layer ({where}: {width}); "
            "such an adapter is no longer low-rank and can be larger than the layer. A rank of 8 to 64 is usual.")


MODULE_KEYS: tuple[str, ...] = ("lora_target", "additional_target", "freeze_trainable_modules", "freeze_extra_modules")
"""The keys that take module names of the model (a comma-separated list of them)."""


def module_names(model: str | None, key: str, stage: str = "sft") -> list[str] | None:
    """The module names ``key`` (one of MODULE_KEYS) may take for this (local) model, as the checks of the key read
    them; None when they cannot be told without loading it (a hub id, an architecture built only by its own code).
    The names a key takes alone (``all``) are the field's, not listed here."""
    if key not in MODULE_KEYS or local_config(model) is None:
        return None
    layers = linear_layers(model)
    if layers is None:
        return None
    if key == "lora_target":
        return layers.short_names()
    if layers.parameters is None:
        return None
    from engine.methods.freeze import layer_modules, outside_layer_modules

    names = list(layers.parameters)
    if key == "freeze_trainable_modules":
        return layer_modules(names, layers.num_layers)
    if stage == "rm" and layers.head:  # a reward model loads with a score head in place of the output head
        names = [name for name in names if not name.startswith(f"{layers.head}.")] + ["score.weight"]
    outside = outside_layer_modules(names)
    if key == "additional_target" and layers.head and stage != "rm":  # a head tied to the embeddings is a module
        outside = sorted({*outside, layers.head.rsplit(".", 1)[-1]})
    return outside
