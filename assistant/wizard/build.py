"""The only place wizard answers become an engine training config.

It starts from the official example YAML for the model family and method, applies each change the answers call
for, and records every change as a diff row (parameter | default | new | reason). The default column is the
example's value (or the engine default for keys the example does not set). What `build_train_config` returns is
exactly what `engine.api.prepare_run` will write: paths are absolute already, values are typed by the engine's
own config dataclass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from assistant.i18n import t, t_or
from assistant.wizard.adapt import adaptations
from assistant.wizard.stages.model import rule_words
from assistant.wizard.skill import Skill
from assistant.wizard.state import WizardState
from engine.methods import is_adapter

# Demo sizes with a reason of their own (the others share "reason.demo").
REASON_KEYS = ("reason.demo_logging_steps", "reason.demo_save_steps", "reason.demo_cutoff_len")
# finetuning_type written to the config for each method; QLoRA is LoRA on a quantized base.
METHOD_TYPES: dict[str, str] = {"lora": "lora", "qlora": "lora", "full": "full", "freeze": "freeze"}


@dataclass
class DiffRow:
    parameter: str
    default: Any
    new: Any
    reason: str

    def to_dict(self) -> dict:
        return {"parameter": self.parameter, "default": self.default, "new": self.new, "reason": self.reason}


@dataclass
class BuiltConfig:
    """A training config ready to confirm: its values, the example's values, the diff and the step count."""

    config: dict[str, Any]
    defaults: dict[str, Any]
    diff: list[DiffRow]
    notes: list[str] = field(default_factory=list)
    lf_defaults: list[DiffRow] = field(default_factory=list)
    """Keys the example omits whose default here differs from LLaMA-Factory's: parameter, LLaMA-Factory's value,
    ours, and why (engine.config.lf_defaults)."""
    rows: int | None = None
    """Training rows after max_samples (None when a dataset's size is unknown)."""
    total_steps: int | None = None


def _normalize(values: dict[str, Any]) -> dict[str, Any]:
    """Typed through the engine's TrainConfig: '1e-4' becomes 1e-4, foreign keys drop out, defaults fill in."""
    from engine.api import load_config
    from engine.config import config_to_dict

    return config_to_dict(load_config(values))


def example_values(example: str | Path) -> dict[str, Any]:
    from engine.config import read_yaml

    return _normalize(read_yaml(example))


def output_dir_for(state: WizardState, base: Path | None = None, stage: str = "sft") -> str:
    """saves/<model>/<method>/<stage>_<stamp> (absolute): checkpoints stay out of lf_runs/ and models/."""
    from engine.rundir import default_output_dir

    relative = default_output_dir(str(state.model_path or state.model or "model"), state.method or "lora",
                                  state.run_id or "run", stage)
    return str(((base or Path.cwd()) / relative).resolve())


def model_location(state: WizardState) -> str:
    """The folder training will load: the complete local copy, else the running download's target."""
    location = state.model_path or state.download.get("target") or state.model or ""
    path = Path(location).expanduser()
    return str(path.resolve()) if path.exists() or state.download.get("target") else location


def _device_changes(state: WizardState, values: dict) -> list[tuple[str, Any, str]]:
    changes = []
    on_cpu = not state.device or state.device.get("platform") == "cpu"
    units = (state.device or {}).get("bf16_units")
    if on_cpu and values.get("fp16"):
        changes.append(("fp16", False, t("reason.cpu_fp16") if units else t("reason.cpu_precision")))
    if on_cpu and values.get("bf16") and not units:
        changes.append(("bf16", False, t("reason.cpu_precision")))
    elif on_cpu and units and not values.get("bf16") and (state.method or "lora") == "lora":
        # measured for LoRA, which has fused bf16 paths on a CPU (benchmarks/RESULTS.md); the others: as the example
        changes.append(("bf16", True, t("reason.cpu_bf16", units=units)))
    multi = bool(state.device) and len(state.device.get("indices", [])) > 1
    if values.get("deepspeed") and not multi:
        changes.append(("deepspeed", None, t("reason.no_deepspeed")))
    return changes


def _model_changes(state: WizardState, skill: Skill, values: dict) -> list[tuple[str, Any, str]]:
    from engine.models.registry import FAMILIES

    changes = [("model_name_or_path", model_location(state), t("reason.model")),
               ("template", state.template, t("reason.template", rule=rule_words(state.template_rule or "registry")))]
    family = FAMILIES.get(state.family or "")
    if values.get("trust_remote_code") and not (family and family.trust_remote_code):
        changes.append(("trust_remote_code", False, t("reason.no_remote_code")))
    method = state.method or "lora"
    changes.append(("finetuning_type", METHOD_TYPES[method], _method_reason(state, skill)))
    if method == "qlora" and not values.get("quantization_bit"):
        changes.append(("quantization_bit", 4, t("reason.method", method=method)))
    if method != "qlora" and values.get("quantization_bit"):
        changes.append(("quantization_bit", None, t("reason.method", method=method)))
    return changes


def _method_reason(state: WizardState, skill: Skill) -> str:
    """Why finetuning_type is what it is; for preference training, what the method costs in reference memory."""
    method = state.method or "lora"
    reason = t("reason.method", method=method)
    if skill.training_stage != "dpo":
        return reason
    if is_adapter(method):
        return f"{reason}; {t('reason.pref_lora')}"
    if _pref_loss(state, skill) == "sigmoid":
        return f"{reason}; {t('reason.pref_full_reference')}"
    return f"{reason}; {t('reason.pref_no_reference', loss=_pref_loss(state, skill))}"


def _pref_loss(state: WizardState, skill: Skill) -> str:
    table = skill.stage("config").settings.get("pref_loss", {})
    return table.get(state.workflow or "dpo", "sigmoid")


def _preference_changes(state: WizardState, skill: Skill) -> list[tuple[str, Any, str]]:
    """stage: dpo, the loss the workflow names, and the beta that loss wants (each with its reason)."""
    if skill.training_stage != "dpo":
        return [("stage", skill.training_stage, t("reason.workflow", workflow=state.workflow or "sft"))]
    settings = skill.stage("config").settings
    loss = _pref_loss(state, skill)
    changes = [("stage", "dpo", t("reason.workflow", workflow=state.workflow or "dpo")),
               ("pref_loss", loss, t(f"reason.pref_loss_{loss}"))]
    beta = settings.get("pref_beta", {}).get(state.workflow or "dpo")
    if beta is not None:
        changes.append(("pref_beta", beta, t(f"reason.pref_beta_{state.workflow}")))
    return changes


def _continued_adapter_notes(state: WizardState, skill: Skill, config: dict) -> list[str]:
    """Preference training on top of an SFT adapter: the reference is the base WITHOUT that adapter."""
    if skill.training_stage != "dpo" or not config.get("adapter_name_or_path"):
        return []
    if config.get("pref_loss") != "sigmoid":
        return []
    return [t("config.adapter_reference", adapter=str(config["adapter_name_or_path"]))]


def _demo_changes(state: WizardState, skill: Skill) -> list[tuple[str, Any, str]]:
    if state.family != "demo":
        return []
    settings = skill.stage("config").settings
    changes = [(key, value, t(f"reason.demo_{key}") if f"reason.demo_{key}" in REASON_KEYS else t("reason.demo"))
               for key, value in settings.get("demo_adaptations", {}).items()]
    rate = settings.get("demo_learning_rate", {}).get(state.method or "lora")
    if rate:
        key = "reason.demo_lr_pref" if skill.training_stage == "dpo" else "reason.demo_lr"
        changes.append(("learning_rate", rate, t(key)))
    return changes


def _changes(state: WizardState, skill: Skill, defaults: dict) -> list[tuple[str, Any, str]]:
    """Every change to the example, in order; a later change of the same key wins (and gives the reason)."""
    changes = _model_changes(state, skill, defaults)
    changes += _preference_changes(state, skill)
    mixed = [name for name in state.mixed_in if name in state.datasets]
    changes.append(("dataset", ",".join(state.datasets),
                    t("reason.dataset_mixed", mixed=", ".join(mixed)) if mixed else t("reason.dataset")))
    if state.dataset_dir:
        changes.append(("dataset_dir", str(Path(state.dataset_dir).resolve()), t("reason.dataset_dir")))
    changes.append(("output_dir", output_dir_for(state, stage=skill.training_stage), t("reason.output_dir")))
    changes += _device_changes(state, defaults)
    changes += _demo_changes(state, skill)
    so_far = {**defaults, **{key: value for key, value, _ in changes}}
    changes += adaptations(state, skill, so_far)  # this machine and this data: assistant/wizard/adapt.py
    changes += [(key, value, t("reason.small_data")) for key, value in state.suggestions.items()]
    changes += [(key, value, t("reason.user")) for key, value in state.edits.items()]
    return changes


def build_train_config(state: WizardState, skill: Skill) -> BuiltConfig:
    """The config for this state, with the diff against the example and the small-dataset numbers."""
    defaults = example_values(state.example)
    values, reasons = dict(defaults), {}
    for key, value, reason in _changes(state, skill, defaults):
        values[key], reasons[key] = value, reason
    config = _normalize(values)
    diff = [DiffRow(key, defaults.get(key), config[key], reasons.get(key, t("reason.user")))
            for key in config if config[key] != defaults.get(key)]
    built = BuiltConfig(config, defaults, diff, notes=_continued_adapter_notes(state, skill, config),
                        lf_defaults=_lf_default_rows(state.example, config, diff))
    built.rows = training_rows(state, config)
    built.total_steps = total_steps(config, built.rows, devices=device_count(state))
    if config.get("stage") == "pt" and config.get("packing") is not False and not (config.get("max_steps") or 0) > 0:
        built.total_steps = None  # texts packed into cutoff_len rows: the count follows the tokens (pre-flight)
    _limit_checkpoints(built, state)
    _evaluate_often(built, state)
    return built


EVALS_PER_RUN = 4


def _evaluate_often(built: BuiltConfig, state: WizardState) -> None:
    """With held-out rows, an eval interval (default logging_steps x 10) longer than a quarter of the run measures
    the eval loss once or twice at best: set it so the run measures it about EVALS_PER_RUN times."""
    config, steps = built.config, built.total_steps
    held = (config.get("val_size") or 0) > 0 or bool(config.get("eval_dataset"))
    if (not held or not steps or config.get("eval_strategy", "steps") != "steps" or config.get("eval_steps")
            or "eval_steps" in state.edits):
        return
    default = (config.get("logging_steps") or 10) * 10
    wanted = max(1, steps // EVALS_PER_RUN)
    if default <= wanted:
        return
    config["eval_steps"] = wanted
    built.diff.append(DiffRow("eval_steps", built.defaults.get("eval_steps"), wanted,
                              t("reason.eval_steps", default=default, steps=steps, times=EVALS_PER_RUN)))


KEEP_CHECKPOINTS = 3


def _limit_checkpoints(built: BuiltConfig, state: WizardState) -> None:
    """Many checkpoints and no save_total_limit: keep the newest few (each holds the optimizer state, about three
    times the trained weights), unless the user set the limit by hand."""
    config, steps = built.config, built.total_steps
    every = config.get("save_steps") or 0
    if (not steps or every <= 0 or config.get("save_strategy", "steps") != "steps"
            or config.get("save_total_limit") is not None or "save_total_limit" in state.edits):
        return
    count = steps // every
    if count <= KEEP_CHECKPOINTS:
        return
    config["save_total_limit"] = KEEP_CHECKPOINTS
    built.diff.append(DiffRow("save_total_limit", built.defaults.get("save_total_limit"), KEEP_CHECKPOINTS,
                              t("reason.save_total_limit", count=count, keep=KEEP_CHECKPOINTS)))


def _lf_default_rows(example, config: dict[str, Any], diff: list[DiffRow]) -> list[DiffRow]:
    """Where the example leaves a key out and our default is not LLaMA-Factory's, with the reason (the wizard
    shows them under the diff, as `train --check` lists them)."""
    from engine.config import default_differences, read_yaml

    changed = {row.parameter for row in diff}
    return [DiffRow(row.key, _lf_default_words(row.key, "default", row.lf_default),
                    _lf_default_words(row.key, "ours", row.ours), t_or(f"lf_default.{row.key}", row.reason))
            for row in default_differences(read_yaml(example)) if row.key not in changed and row.key in config]


def _lf_default_words(key: str, side: str, value: Any) -> Any:
    """A value of that table in the interface language where it is words ("off", "none (asks)"), else itself."""
    return t_or(f"lf_default.{key}.{side}", value) if isinstance(value, str) else value


def device_count(state: WizardState) -> int:
    return max(1, len((state.device or {}).get("indices") or []))


def training_rows(state: WizardState, config: dict) -> int | None:
    """Rows trained on: each dataset capped at max_samples (LLaMA-Factory's per-dataset semantics)."""
    counts = [state.dataset_rows.get(name) for name in state.datasets]
    if not counts or any(c is None for c in counts):
        return None
    cap = config.get("max_samples")
    rows = sum(min(c, cap) if cap else c for c in counts)
    from engine.data.chunks import holdout_count

    return max(0, rows - holdout_count(rows, config.get("val_size") or 0))


def total_steps(config: dict, rows: int | None, *, devices: int = 1) -> int | None:
    """ceil(rows / (batch x grad_accum x devices)) x epochs (as the engine counts: a short last group of
    micro-batches still makes a step), or max_steps when set."""
    if config.get("max_steps") and config["max_steps"] > 0:
        return int(config["max_steps"])
    if rows is None:
        return None
    micro_batches = math.ceil(rows / (config["per_device_train_batch_size"] * devices))
    per_epoch = max(1, math.ceil(micro_batches / config["gradient_accumulation_steps"]))
    return math.ceil(config["num_train_epochs"] * per_epoch)
