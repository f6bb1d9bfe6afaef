"""Changes to the example config that come from this machine and this data, each with its reason for the diff.

build.py applies them after its own (model, method, data, device, demo sizes), before the user's accepted advice
and edits, which always win:

- a small real model trained on a CPU gets the skill's `cpu_small_model` changes (a learning rate and batch
  shape that show an effect within the steps a CPU run affords);
- a few rows of the user's data are held out of training (val_size) so validation can ask them and show the
  answers the data gives beside the model's;
- batching_strategy: packed on a CPU (the skill's `packed_batching`), where the model and the example allow it:
  the same samples, steps and loss as padded micro-batches, without the work on padding;
- with packed batching on a CPU, gradient accumulation folded into one micro-batch per step: the same samples
  per step and the same loss (the shell divides by the whole step's units however the step is split), in one
  larger product per layer, which a CPU runs faster; the pre-flight takes it back if it does not fit;
- the pre-flight's proposal, when the configured micro-batch did not fit: the largest one that did, with
  gradient accumulation raised to keep the effective batch.
"""

from __future__ import annotations

from typing import Any

from assistant.i18n import t, t_message
from assistant.wizard.skill import Skill
from assistant.wizard.state import WizardState

Change = tuple[str, Any, str]


def _on_cpu(state: WizardState) -> bool:
    return not state.device or state.device.get("platform") == "cpu"


def params_b(state: WizardState) -> float | None:
    """The model's size in billions of parameters: the registry's figure, else the weights on disk counted as
    fp32 (4 bytes each: a 16-bit file then reads as half its size, which only errs towards "small")."""
    from pathlib import Path

    from engine.models.registry import find_model

    for name in (state.model, state.model_path):
        entry = find_model(name or "") if name else None
        if entry is not None:
            return entry.params_b
    if state.model_path and Path(state.model_path).is_dir():
        weights = sum(p.stat().st_size for p in Path(state.model_path).glob("*.safetensors"))
        return weights / 4e9 if weights else None
    return None


def cpu_small_model_changes(state: WizardState, skill: Skill) -> list[Change]:
    """The skill's `cpu_small_model` changes when a real model of at most `max_params_b` trains on a CPU."""
    rule = skill.stage("config").settings.get("cpu_small_model")
    if not rule or state.family == "demo" or not _on_cpu(state):
        return []
    size = params_b(state)
    if size is None or size > float(rule.get("max_params_b", 0)):
        return []
    reason = t("reason.cpu_small_model", params=f"{size * 1000:.0f}M")
    return [(key, value, reason) for key, value in (rule.get("changes") or {}).items()]


def held_out_changes(state: WizardState, skill: Skill) -> list[Change]:
    """val_size: the data stage's `held_out` rows, when the chosen data has at least four times as many."""
    count = int(skill.stage("data").settings.get("held_out", 0) or 0)
    rows = sum(state.dataset_rows.get(name, 0) for name in state.datasets)
    if not count or rows < 4 * count:
        return []
    return [("val_size", count, t("reason.held_out", count=count))]


def packed_batching_changes(state: WizardState, skill: Skill, values: dict[str, Any]) -> list[Change]:
    """batching_strategy: packed on a CPU (where it was measured) when the skill asks for it, the example packs
    nothing itself (LLaMA-Factory's packing / neat_packing) and the model needs no remote code (packed rows rely on
    transformers' per-sample attention)."""
    if not skill.stage("config").settings.get("packed_batching") or not _on_cpu(state):
        return []
    if values.get("packing") or values.get("neat_packing") or values.get("trust_remote_code"):
        return []
    if values.get("batching_strategy", "padded") != "padded":
        return []
    return [("batching_strategy", "packed", t("reason.packed_batching"))]


# Stages whose loss is a sum over trained tokens, so a step's split into micro-batches changes nothing (tested:
# test_gradient_accumulation_normalises_by_tokens). KTO estimates its KL term from the other answers of a
# micro-batch, so its split matters; DPO and RM are left as configured until a parity test covers them.
FOLDABLE_STAGES = ("sft", "pt")


def folded_accumulation_changes(state: WizardState, values: dict[str, Any]) -> list[Change]:
    """One micro-batch of per_device_train_batch_size x gradient_accumulation_steps samples per step, when packed
    batching trains on a CPU (measured: benchmarks/RESULTS.md, the wizard's run on SmolLM2-135M-Instruct)."""
    strategy = state.edits.get("batching_strategy", values.get("batching_strategy"))  # the user's choice wins
    if strategy != "packed" or not _on_cpu(state):
        return []
    if values.get("stage", "sft") not in FOLDABLE_STAGES:
        return []
    if {"per_device_train_batch_size", "gradient_accumulation_steps"} & set(state.edits):
        return []  # the user shaped the step: folding one of the two would change its size behind their back
    micro = int(values.get("per_device_train_batch_size") or 1)
    accum = int(values.get("gradient_accumulation_steps") or 1)
    if accum <= 1:
        return []
    # the whole step, not the recipe's split: the diff's left column is the example's, which may split it otherwise
    reason = t("reason.folded_accumulation", total=micro * accum)
    return [("per_device_train_batch_size", micro * accum, reason), ("gradient_accumulation_steps", 1, reason)]


def measured_changes(state: WizardState) -> list[Change]:
    """The pre-flight's proposal the user has (its micro-batch did fit where the configured one did not)."""
    fit = state.fit or {}
    if not fit.get("per_device_train_batch_size"):
        return []
    reason = t("reason.measured", why=t_message(fit.get("reason_message"), fit.get("reason", "")))
    return [("per_device_train_batch_size", fit["per_device_train_batch_size"], reason),
            ("gradient_accumulation_steps", fit["gradient_accumulation_steps"], reason)]


def adaptations(state: WizardState, skill: Skill, values: dict[str, Any]) -> list[Change]:
    """Every change of this module; ``values`` is the config as changed so far (the example and the stages)."""
    changes = cpu_small_model_changes(state, skill) + held_out_changes(state, skill)
    values = {**values, **{key: value for key, value, _ in changes}}
    changes += packed_batching_changes(state, skill, values)
    values = {**values, **{key: value for key, value, _ in changes}}
    return changes + folded_accumulation_changes(state, values) + measured_changes(state)
