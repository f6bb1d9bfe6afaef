"""The optimizer a run steps, named as Transformers names it (``optim``), with the Trainer's parameter groups.

Groups, as the Transformers Trainer builds them: weight decay on every trained weight except biases and norm
weights (their names: bias, layernorm, rmsnorm, norm, *_norm; or a torch LayerNorm). LoRA+ (``loraplus_lr_ratio``)
regroups as LLaMA-Factory does: LoRA's B matrices and every 1-D parameter at ``learning_rate x ratio``, embedding
adapters' B at ``loraplus_lr_embedding``, everything else at ``learning_rate``.

Optimizers: the torch ones Transformers maps its names to (AdamW, SGD, Adagrad, RMSprop), Transformers' Adafactor,
and bitsandbytes' 8-bit / paged ones, which need a CUDA GPU (validated before anything loads). Every other
Transformers name is refused by name in the config field, with what it needs.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from engine.config.choices import BNB_OPTIMIZERS, OPTIMIZERS, parse_optim_args
from engine.errors import ConfigError

_NO_DECAY = re.compile(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)")


def is_decayed(name: str, module: torch.nn.Module | None) -> bool:
    """Whether the Trainer applies weight decay to a parameter: not a bias, not a norm weight."""
    return not isinstance(module, torch.nn.LayerNorm) and not _NO_DECAY.search(name)


def param_groups(model: torch.nn.Module, config) -> list[dict[str, Any]]:
    """The trainable parameters in the Trainer's groups (LoRA+ groups when loraplus_lr_ratio is set)."""
    owners = {f"{module_name}.{name}" if module_name else name: module
              for module_name, module in model.named_modules() for name, _ in module.named_parameters(recurse=False)}
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    lr, decay = config.learning_rate, config.weight_decay
    ratio = getattr(config, "loraplus_lr_ratio", None)
    if ratio is None:
        groups = [{"params": [p for n, p in named if is_decayed(n, owners.get(n))], "weight_decay": decay},
                  {"params": [p for n, p in named if not is_decayed(n, owners.get(n))], "weight_decay": 0.0}]
    else:
        buckets: dict[str, list] = {"a": [], "b": [], "b_nodecay": [], "embedding": []}
        for name, param in named:
            if "lora_embedding_B" in name:
                buckets["embedding"].append(param)
            elif "lora_B" in name or param.ndim == 1:
                buckets["b" if is_decayed(name, owners.get(name)) else "b_nodecay"].append(param)
            else:
                buckets["a"].append(param)
        groups = [{"params": buckets["a"], "lr": lr, "weight_decay": decay},
                  {"params": buckets["b"], "lr": lr * ratio, "weight_decay": decay},
                  {"params": buckets["b_nodecay"], "lr": lr * ratio, "weight_decay": 0.0},
                  {"params": buckets["embedding"], "lr": config.loraplus_lr_embedding, "weight_decay": decay}]
    return [group for group in groups if group["params"]]


def build_optimizer(config, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer ``config.optim`` names over the model's trainable parameters."""
    groups = param_groups(model, config)
    if not groups:
        raise ConfigError("Nothing would train: no parameter requires a gradient.")
    name, args = config.optim, parse_optim_args(config.optim_args)
    lr = config.learning_rate
    adam = {"betas": (config.adam_beta1, config.adam_beta2), "eps": config.adam_epsilon}
    if name == "adamw_torch_fused":
        try:  # the fused kernel needs every parameter on one supported device type
            return torch.optim.AdamW(groups, lr=lr, fused=True, **adam)
        except RuntimeError:
            name = "adamw_torch"
    if name == "adamw_torch":
        # foreach: the multi-tensor path steps every parameter in a few kernels (same update as the loop)
        return torch.optim.AdamW(groups, lr=lr, foreach=True, **adam)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(groups, lr=lr, scale_parameter=False, relative_step=False)
    if name in ("sgd", "adagrad", "rmsprop"):
        cls = {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad, "rmsprop": torch.optim.RMSprop}[name]
        return cls(groups, lr=lr, **_torch_args(args))
    if name in BNB_OPTIMIZERS:
        return _bnb_optimizer(name, groups, lr, adam, args, config)
    raise ConfigError(f"optim {name!r} is not one of {', '.join(OPTIMIZERS)}.")


def _torch_args(args: dict[str, str]) -> dict[str, Any]:
    flags = ("nesterov", "centered")
    return {key: (value.lower() in ("true", "1", "yes")) if key in flags else float(value)
            for key, value in args.items()}


def _bnb_optimizer(name: str, groups, lr: float, adam: dict, args: dict[str, str], config):
    """bitsandbytes' AdamW / Lion / RMSprop / AdEMAMix with Transformers' arguments for each name."""
    from bitsandbytes import optim as bnb

    bits = {"optim_bits": 8 if "8bit" in name else 32}
    if "rmsprop" not in name:
        bits["is_paged"] = "paged" in name
    if "ademamix" in name:
        extra = {"betas": (float(args.get("beta1", config.adam_beta1)), float(args.get("beta2", config.adam_beta2)),
                           float(args.get("beta3", 0.9999))),
                 "alpha": float(args.get("alpha", 5.0)), "eps": float(args.get("eps", config.adam_epsilon))}
        extra.update({key: int(args[key]) for key in ("t_alpha", "t_beta3") if key in args})
        return bnb.AdEMAMix(groups, lr=lr, **extra, **bits)
    if "lion" in name:
        return bnb.Lion(groups, lr=lr, betas=adam["betas"], **bits)
    if "rmsprop" in name:
        return bnb.RMSprop(groups, lr=lr, **_torch_args(args), **bits)
    return bnb.AdamW(groups, lr=lr, **adam, **bits)
