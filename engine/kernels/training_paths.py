"""Faster training paths for LoRA on Llama-like models on CPU, switched on per module instance.

    applied = use_fast_training_paths(causal_lm)   # idempotent; the loss function calls it (engine.training.loss)

What changes (engine/kernels/ops/lora.py and eager_fused.py have the maths):
- every PEFT LoRA linear with a frozen base: one autograd function, the adapter added in place;
- every gate/up/down MLP whose three projections are such LoRA linears (SiLU): one function that keeps
  x, gate and up for backward instead of four intermediate-sized tensors;
- the RMSNorm modules and the rotary embedding of llama, mistral, qwen2 and qwen3: fewer passes over memory.

Measured on SmolLM2-135M (benchmarks/profile_step.py), these elementwise passes, copies and the extra
activations were the part of a step that is not matmul work. Every patched forward checks at each call that
its fast path computes what the stock module would (training; fp32 without autocast, or bf16 under CPU bf16
autocast with the frozen base loaded in bf16, as bf16: true trains on a CPU with bf16 units; one plain LoRA
adapter, nothing merged or disabled, no dropout, a frozen base) and otherwise runs the stock forward, so eval,
generation, merging, disabled adapters (DPO's reference pass) and other methods are untouched. Modules that
``kernel_config`` already patched keep their kernels. Only CPU models are switched: on a GPU the Triton kernels
of ``kernel_config`` are the fast path.
"""

from __future__ import annotations

import functools
import importlib

import torch
from torch import nn

from engine.kernels import module_patches as mp
from engine.kernels.ops.eager_fused import rms_norm_fewer_passes, rope_fewer_passes
from engine.kernels.ops.lora import lora_linear, lora_swiglu_mlp

_APPLIED_ATTR = "_lfa_fast_training_paths"
# model_type -> modeling module and its (RMSNorm, MLP, attention) classes; all share the Llama RMSNorm cast
_FAMILIES: dict[str, tuple[str, str]] = {
    "llama": ("transformers.models.llama.modeling_llama", "Llama"),
    "mistral": ("transformers.models.mistral.modeling_mistral", "Mistral"),
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2"),
    "qwen3": ("transformers.models.qwen3.modeling_qwen3", "Qwen3"),
}


def fast_paths_supported(model) -> bool:
    """Whether ``use_fast_training_paths`` has anything for this model (a transformers *ForCausalLM)."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in _FAMILIES:
        return False
    weight = next(model.parameters(), None)
    return weight is not None and weight.device.type == "cpu"


def use_fast_training_paths(model) -> list[str]:
    """Switch the modules of ``model`` to the fast paths; returns what was switched (empty when unsupported)."""
    done = model.__dict__.get(_APPLIED_ATTR)
    if done is not None:
        return done
    applied: list[str] = []
    if fast_paths_supported(model):
        modeling_name, prefix = _FAMILIES[model.config.model_type]
        modeling = importlib.import_module(modeling_name)
        classes = [getattr(modeling, prefix + suffix, None) for suffix in ("RMSNorm", "MLP", "Attention")]
        applied = _patch_modules(model, modeling, *classes)
    model.__dict__[_APPLIED_ATTR] = applied
    return applied


def _patch_modules(model, modeling, norm_cls, mlp_cls, attention_cls) -> list[str]:
    from peft.tuners.lora.layer import Linear as LoraLinear

    counts = {"lora_linear": 0, "lora_mlp": 0, "rms_norm": 0, "rope": 0}
    for module in list(model.modules()):
        done = module.__dict__.get(mp.PATCHED_ATTR, set())
        if type(module) is LoraLinear:
            module.forward = functools.partial(_lora_linear_forward, module, module.forward)
            counts["lora_linear"] += 1
        elif mlp_cls and type(module) is mlp_cls and "swiglu" not in done:
            module.forward = functools.partial(_mlp_forward, module, module.forward)
            counts["lora_mlp"] += 1
        elif norm_cls and type(module) is norm_cls and "rms_norm" not in done:
            module.forward = functools.partial(_norm_forward, module, module.forward)
            counts["rms_norm"] += 1
        elif attention_cls and type(module) is attention_cls and "rope" not in done:
            mp.route_function(modeling, "apply_rotary_pos_emb")
            stock = modeling.apply_rotary_pos_emb.original
            rope = functools.partial(_rope, module, stock)
            mp.override_in_forward(module, "fast_rope", {"apply_rotary_pos_emb": rope})
            counts["rope"] += 1
    return [name for name, count in counts.items() if count]


def _training_dtype(module, x: torch.Tensor) -> torch.dtype | None:
    """The dtype a fast path computes in when ``module`` trains on ``x``, else None (eval and generation keep the
    stock modules, bit for bit): fp32 without autocast, or bf16 when x is bf16 under CPU bf16 autocast, where
    every stock product would run in bf16 too."""
    if not (module.training and torch.is_grad_enabled()):
        return None
    if not torch.is_autocast_enabled(x.device.type):
        return torch.float32 if x.dtype == torch.float32 else None
    autocast = torch.get_autocast_dtype(x.device.type)
    return torch.bfloat16 if x.device.type == "cpu" and autocast == x.dtype == torch.bfloat16 else None


def _without_autocast(x: torch.Tensor):
    """The fused functions run their products in the dtype they were given, with autocast off."""
    return torch.autocast(x.device.type, enabled=False)


def lora_parts(module, dtype: torch.dtype = torch.float32) -> tuple | None:
    """(weight, bias, lora_a, lora_b, scaling) of a PEFT LoRA linear that may take the fast path in ``dtype``,
    else None: one active vanilla adapter (no DoRA or other variant, no LoRA bias, no dropout), not merged or
    disabled, a plain nn.Linear base whose weight and bias are frozen and in ``dtype``, adapters in ``dtype`` or
    fp32 (what trains is kept in fp32 under autocast)."""
    if module.merged or module.disable_adapters or module.fan_in_fan_out:
        return None
    active = module.active_adapters
    if len(active) != 1 or active[0] not in module.lora_A or active[0] in module.lora_variant:
        return None
    name = active[0]
    base, lora_a, lora_b = module.base_layer, module.lora_A[name], module.lora_B[name]
    if type(base) is not nn.Linear or not isinstance(module.lora_dropout[name], nn.Identity):
        return None
    if lora_a.bias is not None or lora_b.bias is not None:
        return None
    frozen = [base.weight] + ([base.bias] if base.bias is not None else [])
    if any(p.requires_grad for p in frozen):
        return None
    if any(p.dtype != dtype for p in frozen) or any(w.dtype not in (dtype, torch.float32)
                                                    for w in (lora_a.weight, lora_b.weight)):
        return None
    return base.weight, base.bias, lora_a.weight, lora_b.weight, module.scaling[name]


def _lora_linear_forward(module, stock, x, *args, **kwargs):
    dtype = None if args or kwargs else _training_dtype(module, x)
    parts = lora_parts(module, dtype) if dtype else None
    if parts is None:
        return stock(x, *args, **kwargs)
    with _without_autocast(x):
        return lora_linear(x, *parts)


def _mlp_forward(module, stock, x):
    dtype = _training_dtype(module, x)
    parts = _mlp_parts(module, dtype) if dtype else None
    if parts is None:
        return stock(x)
    with _without_autocast(x):
        return lora_swiglu_mlp(x, *parts)


def _mlp_parts(module, dtype: torch.dtype) -> tuple | None:
    from peft.tuners.lora.layer import Linear as LoraLinear

    if mp.gated_activation(module.act_fn) != "silu":
        return None
    parts = []
    for name in ("gate_proj", "up_proj", "down_proj"):
        projection = getattr(module, name)
        if type(projection) is not LoraLinear:
            return None
        found = lora_parts(projection, dtype)
        if found is None or not (found[2].requires_grad and found[3].requires_grad):
            return None
        parts.append(found)
    return tuple(parts)


def _norm_forward(module, stock, hidden_states):
    dtype = _training_dtype(module, hidden_states)
    if dtype is None or module.weight.dtype != dtype:
        return stock(hidden_states)
    with _without_autocast(hidden_states):
        return rms_norm_fewer_passes(hidden_states, module.weight, module.variance_epsilon)


def _rope(attention, stock, q, k, cos, sin, unsqueeze_dim=1):
    dtype = _training_dtype(attention, q)
    if cos.shape[-1] != q.shape[-1] or dtype is None or not k.dtype == cos.dtype == sin.dtype == dtype:
        return stock(q, k, cos, sin, unsqueeze_dim)  # partial rotary and other dtypes: as transformers does it
    with _without_autocast(q):
        return rope_fewer_passes(q, k, cos, sin, unsqueeze_dim)
