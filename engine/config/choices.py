"""The optimizers and learning-rate schedules a config may name, and what stops one from running here.

Declared in the config layer (no torch import) so that the config fields, the validator, the CLI and the TUI read
the same lists as the training code (``engine.training.optim`` and ``engine.training.schedule``) that builds them.
Names are Transformers' (``OptimizerNames``, ``SchedulerType``); the ones that cannot run here are refused by name
with what they need.
"""

from __future__ import annotations

import json
import math
from typing import Any

from engine.errors import ConfigError
from engine.readers import short_repr

TORCH_OPTIMIZERS: tuple[str, ...] = ("adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adagrad", "rmsprop")
# bitsandbytes' optimizers (8-bit state and/or paged memory): CUDA kernels only.
BNB_OPTIMIZERS: tuple[str, ...] = (
    "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_32bit", "paged_adamw_8bit", "ademamix", "ademamix_8bit",
    "paged_ademamix_32bit", "paged_ademamix_8bit", "lion_32bit", "lion_8bit", "paged_lion_32bit", "paged_lion_8bit",
    "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit")
OPTIMIZERS: tuple[str, ...] = TORCH_OPTIMIZERS + BNB_OPTIMIZERS
_INSTEAD = "use optim: adamw_torch (or adafactor for less optimizer memory)"
REFUSED_OPTIMIZERS: dict[str, str] = {
    **dict.fromkeys(("adamw_torch_4bit", "adamw_torch_8bit"),
                    f"is torchao's low-bit AdamW, which lf-assistant does not build; {_INSTEAD}, or a bitsandbytes "
                    "8-bit optimizer (adamw_8bit) on a CUDA GPU."),
    "adamw_torch_xla": f"is the TPU (torch_xla) AdamW; lf-assistant trains on CUDA GPUs and CPUs: {_INSTEAD}.",
    "adamw_torch_npu_fused": f"is the Ascend NPU (torch_npu) AdamW; lf-assistant trains on CUDA GPUs and CPUs: "
                             f"{_INSTEAD}.",
    "adamw_anyprecision": f"is torchdistx's AnyPrecisionAdamW, which lf-assistant does not build; {_INSTEAD}.",
    **dict.fromkeys(("galore_adamw", "galore_adamw_8bit", "galore_adafactor", "galore_adamw_layerwise",
                     "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise", "apollo_adamw",
                     "apollo_adamw_layerwise"),
                    "is a GaLore/APOLLO low-rank optimizer, which lf-assistant does not support; use finetuning_type: "
                    "lora (or freeze) for low-memory training."),
    **dict.fromkeys(("lomo", "adalomo"), "is LOMO, which fuses the update into the backward pass; lf-assistant "
                    f"does not support it: {_INSTEAD}."),
    "grokadamw": f"is GrokAdamW (the grokadamw package), which lf-assistant does not build; {_INSTEAD}.",
    **dict.fromkeys(("schedule_free_radam", "schedule_free_adamw", "schedule_free_sgd"),
                    "is a schedule-free optimizer (the schedulefree package), which lf-assistant does not build; "
                    "use optim: adamw_torch with an lr_scheduler_type."),
    "stable_adamw": f"is StableAdamW (the torch-optimi package), which lf-assistant does not build; {_INSTEAD}.",
}
# Transformers passes optim_args ("k=v,k=v") to these only; its AdamW and Adafactor never read them.
OPTIM_ARGS_READERS: dict[str, tuple[str, ...]] = {
    "sgd": ("momentum", "dampening", "weight_decay", "nesterov"),
    "adagrad": ("lr_decay", "weight_decay", "eps"),
    "rmsprop": ("momentum", "alpha", "eps", "weight_decay", "centered"),
    **dict.fromkeys(("rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit"),
                    ("alpha", "eps", "momentum", "centered")),
    **dict.fromkeys(("ademamix", "ademamix_8bit", "paged_ademamix_32bit", "paged_ademamix_8bit"),
                    ("beta1", "beta2", "beta3", "alpha", "eps", "t_alpha", "t_beta3")),
}
# Each schedule: the lr_scheduler_kwargs it takes (as transformers' function signature names them).
SCHEDULE_KWARGS: dict[str, tuple[str, ...]] = {
    "linear": (),
    "cosine": ("num_cycles",),
    "cosine_with_restarts": ("num_cycles",),
    "polynomial": ("lr_end", "power"),
    "constant": (),
    "constant_with_warmup": (),
    "inverse_sqrt": ("timescale",),
    "cosine_with_min_lr": ("num_cycles", "min_lr", "min_lr_rate"),
    "cosine_warmup_with_min_lr": ("num_cycles", "min_lr", "min_lr_rate", "warmup_lr_rate"),
    "warmup_stable_decay": ("num_stable_steps", "num_decay_steps", "warmup_type", "decay_type", "min_lr_ratio",
                            "num_cycles"),
}
SCHEDULES: tuple[str, ...] = tuple(SCHEDULE_KWARGS)
REFUSED_SCHEDULES: dict[str, str] = {
    "reduce_lr_on_plateau": "is Transformers' ReduceLROnPlateau, which lowers the rate when the eval metric stalls; "
                            "lf-assistant's schedules follow the step count. Use cosine_with_min_lr (lr_scheduler_"
                            "kwargs: {min_lr_rate: 0.1}) or constant.",
    "greedy": "is Transformers' GreedyLR, which adapts the rate to the training loss; lf-assistant's schedules "
              "follow the step count. Use cosine or cosine_with_min_lr.",
}
# Schedules whose kwargs Transformers never reads (it returns before passing them).
_KWARGS_IGNORED = ("constant", "constant_with_warmup")
_WSD_SHAPES = ("linear", "cosine", "1-sqrt")



def parse_optim_args(text: str | None) -> dict[str, str]:
    """Transformers' optim_args string ("momentum=0.9,nesterov=true") as a dict of strings."""
    if not text:
        return {}
    out = {}
    for item in str(text).replace(" ", "").split(","):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"optim_args: {item!r} is not key=value (write e.g. optim_args: momentum=0.9).")
        out[key] = value
    return out


def optimizer_problems(config) -> list[str]:
    """What stops ``optim`` (and optim_args) from running on this machine, as sentences."""
    problems = []
    name = config.optim
    try:
        args = parse_optim_args(config.optim_args)
    except ConfigError as exc:
        return [str(exc)]
    readers = OPTIM_ARGS_READERS.get(name, ())
    if args and not readers:
        problems.append(f"optim_args is set but optim {name} does not read it (as in Transformers, only sgd, "
                        "adagrad, rmsprop and bitsandbytes' rmsprop/ademamix do); use learning_rate, weight_decay, "
                        "adam_beta1, adam_beta2 and adam_epsilon instead.")
    for key in args:
        if readers and key not in readers:
            problems.append(f"optim_args: {key!r} is not read by {name} (it reads {', '.join(readers)}).")
    if name in BNB_OPTIMIZERS:
        import importlib.util

        from engine.models.offline import cuda_available

        if not cuda_available():
            problems.append(f"optim: {name} is a bitsandbytes optimizer (8-bit or paged state), which runs on CUDA "
                            "GPUs only; this machine has none. Use optim: adamw_torch (or adafactor).")
        elif importlib.util.find_spec("bitsandbytes") is None:
            problems.append(f"optim: {name} needs the bitsandbytes package: `pip install 'lf-assistant[bnb]'`.")
    return problems


def scheduler_kwargs(value: Any) -> dict[str, Any]:
    """lr_scheduler_kwargs as a dict: a YAML mapping, a JSON/YAML text of one, or nothing."""
    if value in (None, ""):
        return {}
    if isinstance(value, str):  # read within the same limits as a config file (aliases, depth, size)
        from engine.readers import load_yaml_text

        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            value = load_yaml_text(value, "lr_scheduler_kwargs")
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise ConfigError("lr_scheduler_kwargs must be a mapping of argument names to values, e.g. "
                          "{\"num_cycles\": 2} or {min_lr_rate: 0.1}.")
    return dict(value)


def schedule_problems(kind: str, kwargs_value: Any, learning_rate: float) -> list[str]:
    """Why ``kind`` with these lr_scheduler_kwargs cannot run (each sentence says what to change)."""
    try:
        kwargs = scheduler_kwargs(kwargs_value)
    except ConfigError as exc:
        return [str(exc)]
    if kind not in SCHEDULE_KWARGS or kind in _KWARGS_IGNORED:
        return []
    allowed = SCHEDULE_KWARGS[kind]
    problems = [f"lr_scheduler_kwargs: {key!r} is not an argument of the {kind} schedule"
                f"{' (it takes ' + ', '.join(allowed) + ')' if allowed else ' (it takes none)'}."
                for key in kwargs if key not in allowed]
    for key, value in kwargs.items():
        if key in ("warmup_type", "decay_type"):
            if value not in _WSD_SHAPES:
                problems.append(f"lr_scheduler_kwargs: {key} must be one of {', '.join(_WSD_SHAPES)}.")
        elif key in allowed and (isinstance(value, bool) or not isinstance(value, (int, float))
                                 or not math.isfinite(value)):
            problems.append(f"lr_scheduler_kwargs: {key} must be a number, got {short_repr(value, 40)}.")
    if problems:
        return problems
    if kind in ("cosine_with_min_lr", "cosine_warmup_with_min_lr"):
        given = [key for key in ("min_lr", "min_lr_rate") if key in kwargs]
        if len(given) != 1:
            problems.append(f"lr_scheduler_type {kind} needs exactly one of min_lr or min_lr_rate in "
                            "lr_scheduler_kwargs (e.g. {min_lr_rate: 0.1}), as in Transformers.")
    if kind == "polynomial" and not learning_rate > kwargs.get("lr_end", 1e-7):
        problems.append(f"lr_scheduler_kwargs: lr_end ({kwargs.get('lr_end', 1e-7):g}) must be below "
                        f"learning_rate ({learning_rate:g}).")
    if kind == "inverse_sqrt" and kwargs.get("timescale", 1) <= 0:
        problems.append("lr_scheduler_kwargs: timescale must be positive.")
    return problems


