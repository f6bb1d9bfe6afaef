"""`kernel_config` -> kernels patched into a model: one patch function per model family, one plan for the loop.

    kernel_config: {name: auto}                      # what this device supports; never an error
    kernel_config: {name: none}                      # stock modules
    kernel_config: {name: rms_norm,swiglu,rope,fused_linear_ce}   # exactly these, or an error saying why not

`auto` is Triton for every kernel on a CUDA/ROCm GPU, and on CPU only the torch paths that beat eager there (the
chunked linear cross-entropy, the chunked gated delta rule). `fused_linear_ce` and `cross_entropy` are not module
patches of the decoder: the training loop reads `KernelPlan.fused_linear_ce` and calls
`plan.linear_cross_entropy(final_hidden, lm_head.weight, shifted_labels)` instead of computing logits;
`cross_entropy` replaces the model's `loss_function` (used when the model is called with `labels=`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from engine.config.kernel_choice import KERNEL_NAMES, parse_kernel_config  # noqa: F401 - re-exported
from engine.errors import ConfigError
from engine.kernels import module_patches as mp
from engine.kernels.ops.cross_entropy import causal_lm_loss
from engine.kernels.ops.fused_linear_ce import LinearReduction, linear_cross_entropy
from engine.kernels.ops.gated_delta_rule import causal_conv1d_segments, chunk_gated_delta_rule
from engine.kernels.ops.rms_norm import CastMode
from engine.kernels.ops.rope import rope
from engine.kernels.runtime import (
    Backend, BackendChoice, device_type, interpreter_enabled, require_triton, triton_problem, triton_runs_on,
)

MODULE_KERNELS: frozenset[str] = frozenset({"rms_norm", "swiglu", "rope", "gated_delta_rule"})
# kernels whose torch path is worth running without Triton (memory on CPU, packed sequences without `fla`)
TORCH_PATH_KERNELS: frozenset[str] = frozenset({"fused_linear_ce", "gated_delta_rule"})


@dataclass
class KernelPlan:
    """What `apply_kernels` did, for the training loop and the run manifest."""

    applied: list[str] = field(default_factory=list)
    """Kernels now active, in KERNEL_NAMES order."""
    fused_linear_ce: bool = False
    """True: compute the loss with `linear_cross_entropy` on the final hidden states; logits are never built."""
    notes: list[str] = field(default_factory=list)
    """Kernels left out and why (shown to the user; never an error under `auto`)."""
    backends: dict[str, Backend] = field(default_factory=dict)
    """The backend of each applied kernel: 'triton' or 'torch'."""

    def linear_cross_entropy(self, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *,
                             bias: torch.Tensor | None = None, chunk_size: int = 1024, ignore_index: int = -100,
                             reduction: LinearReduction = "sum") -> torch.Tensor:
        """The chunked (torch) or fused (Triton) linear cross-entropy this plan chose; labels already shifted."""
        return linear_cross_entropy(hidden, weight, labels, backend=self.backends.get("fused_linear_ce", "torch"),
                                    bias=bias, chunk_size=chunk_size, ignore_index=ignore_index, reduction=reduction)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The transformers model inside PEFT / DDP / compile wrappers."""
    while True:
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        elif isinstance(getattr(model, "module", None), nn.Module):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        else:
            return model


@dataclass(frozen=True)
class _Family:
    """Where a family's modules live in transformers and how its RMSNorm rounds."""

    modeling: str
    norms: tuple[str, ...]
    mlps: tuple[str, ...]
    attentions: tuple[str, ...]
    norm_offset: float = 0.0
    norm_cast: CastMode = "llama"
    linear_attentions: tuple[str, ...] = ()


def _patch_family(model: nn.Module, kernels: dict[str, Backend], family: _Family) -> tuple[list[str], list[str]]:
    """Patch every matching module instance; returns (kernels applied, notes)."""
    modeling = importlib.import_module(family.modeling)
    classes = {kind: tuple(getattr(modeling, n) for n in names) for kind, names in (
        ("norm", family.norms), ("mlp", family.mlps), ("attention", family.attentions),
        ("linear", family.linear_attentions))}
    if "rope" in kernels:
        mp.route_function(modeling, "apply_rotary_pos_emb")
    if "gated_delta_rule" in kernels and classes["linear"]:
        mp.route_function(modeling, "torch_chunk_gated_delta_rule")
        mp.route_function(modeling, "causal_conv1d_fn")
    hits: dict[str, int] = dict.fromkeys(kernels, 0)
    notes: list[str] = []
    for module in model.modules():
        if "rms_norm" in kernels and isinstance(module, classes["norm"]):
            mp.patch_rms_norm(module, family.norm_offset, family.norm_cast, kernels["rms_norm"])
            hits["rms_norm"] += 1
        elif "swiglu" in kernels and isinstance(module, classes["mlp"]):
            problem = mp.patch_gated_mlp(module, kernels["swiglu"])
            hits["swiglu"] += problem is None
            if problem and problem not in notes:
                notes.append(f"swiglu: {problem}")
        elif "rope" in kernels and isinstance(module, classes["attention"]):
            impl = _with_backend(rope, kernels["rope"])
            mp.override_in_forward(module, "rope", {"apply_rotary_pos_emb": impl})
            hits["rope"] += 1
        elif "gated_delta_rule" in kernels and classes["linear"] and isinstance(module, classes["linear"]):
            # the short convolution in front of the rule is replaced too, so packed sequences stay apart in both
            impl = _with_backend(chunk_gated_delta_rule, kernels["gated_delta_rule"])
            mp.override_in_forward(module, "gated_delta_rule", {"torch_chunk_gated_delta_rule": impl,
                                                                "causal_conv1d_fn": causal_conv1d_segments})
            hits["gated_delta_rule"] += 1
    return [name for name in KERNEL_NAMES if hits.get(name)], notes


def _with_backend(fn: Callable, backend: Backend) -> Callable:
    def call(*args, **kwargs):
        return fn(*args, backend=backend, **kwargs)

    return call


_LLAMA_LIKE = dict(norm_offset=0.0, norm_cast="llama")
_ZERO_CENTRED = dict(norm_offset=1.0, norm_cast="gemma")


def patch_llama(model: nn.Module, kernels: dict[str, Backend]) -> tuple[list[str], list[str]]:
    return _patch_family(model, kernels, _Family("transformers.models.llama.modeling_llama", ("LlamaRMSNorm",),
                                                 ("LlamaMLP",), ("LlamaAttention",), **_LLAMA_LIKE))


def patch_qwen2(model: nn.Module, kernels: dict[str, Backend]) -> tuple[list[str], list[str]]:
    return _patch_family(model, kernels, _Family("transformers.models.qwen2.modeling_qwen2", ("Qwen2RMSNorm",),
                                                 ("Qwen2MLP",), ("Qwen2Attention",), **_LLAMA_LIKE))


def patch_qwen3(model: nn.Module, kernels: dict[str, Backend]) -> tuple[list[str], list[str]]:
    return _patch_family(model, kernels, _Family("transformers.models.qwen3.modeling_qwen3", ("Qwen3RMSNorm",),
                                                 ("Qwen3MLP",), ("Qwen3Attention",), **_LLAMA_LIKE))


def patch_mistral(model: nn.Module, kernels: dict[str, Backend]) -> tuple[list[str], list[str]]:
    return _patch_family(model, kernels, _Family("transformers.models.mistral.modeling_mistral",
                                                 ("MistralRMSNorm",), ("MistralMLP",), ("MistralAttention",),
                                                 **_LLAMA_LIKE))


def patch_gemma(model: nn.Module, kernels: dict[str, Backend]) -> tuple[list[str], list[str]]:
    return _patch_family(model, kernels, _Family("transformers.models.gemma.modeling_gemma", ("GemmaRMSNorm",),
                                                 ("GemmaMLP",), ("GemmaAttention",), **_ZERO_CENTRED))


def patch_gemma3(model: nn.Module, kernels: dict[str, Backend]) -> tuple[list[str], list[str]]:
    return _patch_family(model, kernels, _Family("transformers.models.gemma3.modeling_gemma3", ("Gemma3RMSNorm",),
                                                 ("Gemma3MLP",), ("Gemma3Attention",), **_ZERO_CENTRED))


def patch_qwen3_5(model: nn.Module, kernels: dict[str, Backend]) -> tuple[list[str], list[str]]:
    return _patch_family(model, kernels, _Family("transformers.models.qwen3_5.modeling_qwen3_5",
                                                 ("Qwen3_5RMSNorm",), ("Qwen3_5MLP",), ("Qwen3_5Attention",),
                                                 linear_attentions=("Qwen3_5GatedDeltaNet",), **_ZERO_CENTRED))


def patch_qwen3_next(model: nn.Module, kernels: dict[str, Backend]) -> tuple[list[str], list[str]]:
    # the routed experts are fused 3-D weights, not gate/up/down modules: only the shared-expert MLPs are fused
    return _patch_family(model, kernels, _Family("transformers.models.qwen3_next.modeling_qwen3_next",
                                                 ("Qwen3NextRMSNorm",), ("Qwen3NextMLP",), ("Qwen3NextAttention",),
                                                 linear_attentions=("Qwen3NextGatedDeltaNet",), **_ZERO_CENTRED))


PATCHERS: dict[str, Callable[[nn.Module, dict[str, Backend]], tuple[list[str], list[str]]]] = {
    "llama": patch_llama,
    "qwen2": patch_qwen2,
    "qwen3": patch_qwen3,
    "mistral": patch_mistral,
    "gemma": patch_gemma,
    "gemma3": patch_gemma3,
    "gemma3_text": patch_gemma3,
    "qwen3_5": patch_qwen3_5,
    "qwen3_5_text": patch_qwen3_5,
    "qwen3_next": patch_qwen3_next,
}

# families whose decoder has gated-delta-rule (linear attention) layers; `auto` looks for that kernel only there
_LINEAR_ATTENTION_TYPES: frozenset[str] = frozenset({"qwen3_5", "qwen3_5_text", "qwen3_next"})


def _model_problem(name: str, model: nn.Module, model_type: str | None, require_logits: bool) -> str | None:
    """Why kernel `name` does not apply to this model / trainer, or None."""
    if name in MODULE_KERNELS and model_type not in PATCHERS:
        return (f"{name}: no kernel patches for model type '{model_type}' "
                f"(supported: {', '.join(sorted(PATCHERS))})")
    if name == "gated_delta_rule" and model_type not in _LINEAR_ATTENTION_TYPES:
        return f"gated_delta_rule: model type '{model_type}' has no gated-delta-rule (linear attention) layers"
    if name == "fused_linear_ce":
        if require_logits:
            return "fused_linear_ce: this trainer needs the full logits (weighted loss), so it stays off"
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if getattr(head, "weight", None) is None:
            return "fused_linear_ce: the model has no linear LM head to fuse with the loss"
        if getattr(getattr(model, "config", None), "final_logit_softcapping", None):
            return "fused_linear_ce: the model soft-caps its logits (final_logit_softcapping), which it does not do"
    if name == "cross_entropy" and not hasattr(model, "loss_function"):
        return "cross_entropy: the model has no `loss_function` to replace"
    return None


def _choose_backend(name: str, device: torch.device | str, backend: BackendChoice,
                    explicit: bool) -> tuple[Backend | None, str | None]:
    """(backend, None), or (None, why it is left out) under auto; an explicit request that cannot run raises."""
    if backend == "torch":
        return "torch", None
    if backend == "triton":
        require_triton(name, device)
        return "triton", None
    kind = device_type(device)
    if triton_runs_on(device) and (kind == "cuda" or (explicit and interpreter_enabled())):
        return "triton", None
    if name in TORCH_PATH_KERNELS:
        return "torch", None
    if explicit:
        require_triton(name, device)
    return None, triton_problem(device) or f"auto does not use the Triton interpreter on {kind}"


def _select(wanted: list[str], model: nn.Module, model_type: str | None, device: torch.device | str,
            backend: BackendChoice, explicit: bool, require_logits: bool) -> tuple[dict[str, Backend], list[str]]:
    """The backend of each kernel that will be applied, and notes for those left out (grouped by reason)."""
    chosen: dict[str, Backend] = {}
    notes: list[str] = []
    left_out: dict[str, list[str]] = {}
    for name in wanted:
        problem = _model_problem(name, model, model_type, require_logits)
        if problem and explicit:
            raise ConfigError(f"kernel_config asks for {problem}. Remove it or use kernel_config: {{name: auto}}.")
        if problem:
            notes.append(problem)
            continue
        chosen_backend, reason = _choose_backend(name, device, backend, explicit)
        if chosen_backend:
            chosen[name] = chosen_backend
        else:
            left_out.setdefault(reason, []).append(name)
    notes += [f"{', '.join(names)}: {reason}" for reason, names in left_out.items()]
    return chosen, notes


def apply_kernels(model: nn.Module, kernel_config: str | dict | list | None, *, device: torch.device | str,
                  require_logits: bool = False, backend: BackendChoice = "auto") -> KernelPlan:
    """Patch `model` in place (a PEFT / DDP wrapper is looked through) and return the plan for the loop.

    backend: 'auto' (Triton on a GPU, else the useful torch paths), or 'torch' / 'triton' for every kernel
    (tests and benchmarks compare the two on the same model).
    """
    selection = parse_kernel_config(kernel_config)
    if selection == "none":
        return KernelPlan(notes=["kernel_config: none (stock modules)"])
    explicit = selection != "auto"
    base = unwrap_model(model)
    model_type = getattr(getattr(base, "config", None), "model_type", None)
    wanted = selection if explicit else [
        name for name in KERNEL_NAMES if name != "gated_delta_rule" or model_type in _LINEAR_ATTENTION_TYPES]
    chosen, notes = _select(wanted, base, model_type, device, backend, explicit, require_logits)
    plan = KernelPlan(notes=notes)
    applied = _apply_module_kernels(base, model_type, chosen, plan.notes, explicit)
    if "cross_entropy" in chosen:
        base.loss_function = _with_backend(causal_lm_loss, chosen["cross_entropy"])
        applied.append("cross_entropy")
    plan.fused_linear_ce = "fused_linear_ce" in chosen
    applied += ["fused_linear_ce"] if plan.fused_linear_ce else []
    plan.applied = [name for name in KERNEL_NAMES if name in applied]
    plan.backends = {name: chosen[name] for name in plan.applied}
    return plan


def _apply_module_kernels(model: nn.Module, model_type: str | None, chosen: dict[str, Backend], notes: list[str],
                          explicit: bool) -> list[str]:
    module_kernels = {name: b for name, b in chosen.items() if name in MODULE_KERNELS}
    if not module_kernels:
        return []
    applied, family_notes = PATCHERS[model_type](model, module_kernels)
    notes.extend(family_notes)
    missing = [name for name in module_kernels if name not in applied]
    if missing and explicit:
        raise ConfigError(f"kernel_config asks for {', '.join(missing)}, but this {model_type} model has no module "
                          f"it applies to ({'; '.join(family_notes) or 'none found'}). Remove it from the list.")
    notes.extend(f"{name}: no matching module in this model" for name in missing if not family_notes)
    return applied
