"""Freeze tuning: train only the last N decoder layers (or the first N when negative); the rest stays fixed.

As in LLaMA-Factory: N beyond the layer count trains every layer; ``freeze_extra_modules`` names modules outside
the decoder layers that train too (embed_tokens, norm, lm_head, ...), matched as there: every parameter whose name
contains the module name.

LLaMA-Factory picks layer N's parameters by ".N." (".N.module") anywhere in their names, so on a model with other
numbered parts (a mixture of experts whose experts are a list, ``mlp.experts.N``; parallel sublayers) it also trains
those parts of every layer. Training them is not what freeze_trainable_layers asks, so such a model is refused
with the names that collide rather than trained differently (``layer_number_collisions``).

The decoder layers are found by their names, whatever the architecture calls their list: ``model.layers.N``
(Llama and most), ``transformer.h.N`` (GPT-2), ``gpt_neox.layers.N``, ``model.decoder.layers.N``: of the lists
that a parameter name's first number indexes, the one with as many entries as the model has layers (the most
parameters among those, or overall when none has), never a vision or audio tower when another list qualifies.
"""

from __future__ import annotations

import re
from collections import Counter

from engine.errors import ConfigError
from engine.readers import comma_names
from engine.methods.full import load_for_resume, save  # noqa: F401 - output is a full model

_FIRST_NUMBER = re.compile(r"^(.+?)\.(\d+)\.")
_TOWER = re.compile(r"(^|[._])(vision|visual|vit|image|audio|speech)", re.IGNORECASE)
NO_LAYERS = ("finetuning_type: freeze trains whole decoder layers, and this model has no numbered layers (nor a "
             "layer count in its config.json) to pick them by. Use finetuning_type: lora or full.")
_LAYER_COUNT_KEYS = ("num_hidden_layers", "num_layers", "n_layer")


def config_layer_count(config) -> int | None:
    """The number of decoder layers in a transformers config or a config.json's dict (a composite model's text
    part), read as LLaMA-Factory reads it: num_hidden_layers, num_layers or n_layer."""
    def get(source, key):
        return source.get(key) if isinstance(source, dict) else getattr(source, key, None)

    text = get(config, "text_config")
    config = text if text is not None and not isinstance(text, (str, int, float, list)) else config
    for key in _LAYER_COUNT_KEYS:
        value = get(config, key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def layer_pattern(names, num_layers: int | None = None) -> re.Pattern | None:
    """The pattern of the decoder layers' names, ``^<list>\\.(N)\\.``, found from module or parameter names (None
    when nothing is numbered): the numbered list with ``num_layers`` entries holding the most names, else the
    list holding the most names; a vision or audio tower's list only when no other list qualifies."""
    names_per_list: Counter = Counter()
    indices: dict[str, set[str]] = {}
    for name in names:
        match = _FIRST_NUMBER.match(name + ".")
        if match:
            names_per_list[match.group(1)] += 1
            indices.setdefault(match.group(1), set()).add(match.group(2))
    if not names_per_list:
        return None
    exact = [prefix for prefix in names_per_list if num_layers and len(indices[prefix]) == num_layers]
    # a vision or audio tower as deep as the decoder is never the decoder, whatever its size
    prefix = max(exact or names_per_list, key=lambda p: (not _TOWER.search(p), names_per_list[p], p))
    return re.compile("^" + re.escape(prefix) + r"\.(\d+)\.")


def trainable_layer_ids(num_layers: int, trainable_layers: int) -> list[int]:
    """The last N layers (N > 0) or the first -N (N < 0), every layer when |N| exceeds the count."""
    if trainable_layers == 0:
        raise ConfigError("freeze_trainable_layers is 0: no layer would train. Use N > 0 (the last N layers) or "
                          "N < 0 (the first N).")
    if trainable_layers > 0:
        return list(range(max(0, num_layers - trainable_layers), num_layers))
    return list(range(min(-trainable_layers, num_layers)))


def layer_modules(names, num_layers: int | None = None) -> list[str]:
    """The modules of a decoder layer (what freeze_trainable_modules takes), from module or parameter names: the
    first name after the layer number, as LLaMA-Factory lists them (self_attn, mlp, input_layernorm, ...)."""
    names = list(names)
    pattern = layer_pattern(names, num_layers)
    found = set()
    for name in names:
        match = pattern and pattern.match(name + ".")
        if match:
            found.add((name + ".")[match.end():].split(".")[0])
    return sorted(found - {""})


def unknown_layer_modules(wanted: str, known: list[str]) -> str | None:
    """The problem when a freeze_trainable_modules name is no module of a layer (None when all are)."""
    names = [name for name in comma_names(wanted) if name != "all"]
    unknown = [name for name in names if name not in known]
    if not unknown or not known:
        return None
    return (f"freeze_trainable_modules: {', '.join(unknown)} is no module of this model's layers; they have: "
            f"{', '.join(known)} (or all).")


def outside_layer_modules(names) -> list[str]:
    """The modules that hold parameters outside the numbered layers (what freeze_extra_modules takes), from
    parameter names: embed_tokens, norm, lm_head (when not tied to the embeddings), ..."""
    return sorted({name.split(".")[-2] for name in names if re.search(r"\.\d+\.", name) is None and "." in name})


def unknown_extra_modules(wanted: str | None, known: list[str]) -> str | None:
    """The problem when a freeze_extra_modules name is no module outside the layers (None when all are)."""
    unknown = [name for name in comma_names(wanted) if name not in known]
    if not unknown:
        return None
    return (f"freeze_extra_modules: {', '.join(unknown)} matches no module outside the decoder layers; this model "
            f"has: {', '.join(known) or 'none'}.")


def module_problems(config, parameter_names, num_layers: int | None = None) -> list[str]:
    """What freeze_trainable_modules and freeze_extra_modules name that the model does not have, from its
    parameter names, and (given the layer count) layer numbers that collide with other numbered parts. Training
    checks the loaded model and ``validate`` (train --check) the same model built on the meta device, so a setting
    that would stop the run is refused before it starts."""
    names = list(parameter_names)
    if num_layers and layer_pattern(names, num_layers) is None:
        return [NO_LAYERS]
    problems = [unknown_layer_modules(config.freeze_trainable_modules, layer_modules(names, num_layers)),
                unknown_extra_modules(getattr(config, "freeze_extra_modules", None), outside_layer_modules(names))]
    if num_layers and config.freeze_trainable_layers and not problems[0]:
        problems.append(layer_number_collisions(config, names, num_layers))
    return [problem for problem in problems if problem]


def layer_selection(names, layer_ids, modules: list[str], num_layers: int | None = None) -> set[str]:
    """The parameters of the trained layers that train here: under the decoder layers' list (``layer_pattern``)
    for a trained N, in the named modules (all: every one)."""
    names = list(names)
    pattern = layer_pattern(names, num_layers)
    selected = set()
    for name in names:
        match = pattern and pattern.match(name)
        in_layer = bool(match) and int(match.group(1)) in layer_ids
        if in_layer and (modules == ["all"] or any(f".{m}." in name or name.endswith(f".{m}") for m in modules)):
            selected.add(name)
    return selected


def lf_layer_selection(names, layer_ids, modules: list[str]) -> set[str]:
    """The parameters LLaMA-Factory's freeze tuning picks for the same layers and modules: every name that
    contains ".N." (all) or ".N.module" for a trained N, wherever in the name."""
    patterns = [f".{index}.{'' if module == 'all' else module}" for module in modules for index in layer_ids]
    return {name for name in names if any(pattern in name for pattern in patterns)}


def layer_number_collisions(config, names: list[str], num_layers: int) -> str | None:
    """The problem when LLaMA-Factory's ".N." match would pick other parameters than the layers themselves."""
    listed = layer_modules(names, num_layers)
    if not listed:  # nothing numbered: prepare refuses the model (no layers to pick)
        return None
    layer_ids = trainable_layer_ids(num_layers, config.freeze_trainable_layers)
    modules = comma_names(config.freeze_trainable_modules) or ["all"]
    ours = layer_selection(names, layer_ids, modules, num_layers)
    theirs = lf_layer_selection(names, layer_ids, modules)
    if ours == theirs:
        return None
    extra, missed = sorted(theirs - ours), sorted(ours - theirs)
    differing = extra or missed
    shown = ", ".join(differing[:3]) + (f" (and {len(differing) - 3} more)" if len(differing) > 3 else "")
    layers = f"layer {layer_ids[0]}" if len(layer_ids) == 1 else f"layers {layer_ids[0]}-{layer_ids[-1]}"
    target = layers if modules == ["all"] else f"the {','.join(modules)} of {layers}"
    patterns = [f"'.{index}.{'' if module == 'all' else module}'" for module in modules for index in layer_ids]
    marks = " or ".join(patterns[:3]) + (" ..." if len(patterns) > 3 else "")
    effect = (f"also train {shown}, which lie outside {target}" if extra
              else f"leave out {shown}, which lie in {target}")
    advice = "use finetuning_type: lora"
    if layer_selection(names, layer_ids, listed, num_layers) == lf_layer_selection(names, layer_ids, listed) \
            == ours:
        advice = f"set freeze_trainable_modules: {','.join(listed)} (each layer's modules by name), or " + advice
    keys = f"freeze_trainable_layers: {config.freeze_trainable_layers}" + (
        "" if modules == ["all"] else f" with freeze_trainable_modules: {','.join(modules)}")
    return (f"{keys} is refused on this model. LLaMA-Factory picks {target} by {marks} anywhere in a parameter "
            f"name, so here it would {effect}; lf-assistant trains {target} alone and does not differ silently. "
            f"To train {target} alike in both, {advice}.")


def prepare(model, config):
    num_layers = config_layer_count(model.config)
    names = [name for name, _ in model.named_parameters()]
    if num_layers is None:
        raise ConfigError(NO_LAYERS)
    layer_ids = set(trainable_layer_ids(num_layers, config.freeze_trainable_layers))
    modules = comma_names(config.freeze_trainable_modules)
    extra = comma_names(getattr(config, "freeze_extra_modules", None))
    problems = module_problems(config, names, num_layers)
    if problems:
        raise ConfigError("\n".join(problems))
    in_layers = layer_selection(names, layer_ids, modules, num_layers)
    for name, parameter in model.named_parameters():
        # A reward model's score head is new: it always trains.
        trained = name in in_layers or name.startswith("score.") or any(m in name for m in extra)
        parameter.requires_grad_(trained)
    return model


def layer_note(num_layers: int, trainable_layers: int) -> str | None:
    """The note for freeze_trainable_layers beyond the layer count (every layer trains, as in LLaMA-Factory)."""
    if abs(trainable_layers) <= num_layers:
        return None
    return (f"freeze_trainable_layers is {trainable_layers} but the model has {num_layers} layers: all "
            f"{num_layers} train, as in LLaMA-Factory.")
