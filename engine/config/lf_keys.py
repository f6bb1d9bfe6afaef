"""LLaMA-Factory keys that are not lf-assistant fields: how each is handled, and the message that says so.

A key is either refused by name (``Rule.refuse``: the feature it belongs to, and the nearest supported alternative)
or accepted and named once as not used (``Rule.unused``: only keys that change nothing that is trained or
generated: logging, workers, caches, hub tokens). A refused key is still accepted at LLaMA-Factory's default value,
because that value means "feature off" there and here alike (``use_galore: false``). The table itself is
``engine.config.lf_table.LF_KEYS``; a key moves out of it when it becomes a field of one of the configs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.messages import Message
from engine.readers import short_repr

TRAIN, INFER, EXPORT = "train", "infer", "export"
ALL = frozenset({TRAIN, INFER, EXPORT})
WHAT = {TRAIN: "training", INFER: "chat and validation", EXPORT: "export"}


@dataclass(frozen=True)
class Rule:
    """How one LLaMA-Factory key is handled."""

    feature: str | None = None
    """Refused keys: what they belong to in LLaMA-Factory ("LLaMA-Factory's GaLore optimizer")."""
    alternative: str | None = None
    """The nearest supported way to get the same, as an instruction ("use finetuning_type: lora")."""
    scope: frozenset[str] = frozenset({TRAIN})
    """Configs in which a non-default value is refused; elsewhere the key changes nothing and is not used."""
    defaults: tuple[Any, ...] = ()
    """Values accepted as "feature off" (LLaMA-Factory's default, and its spellings)."""
    reason: str | None = None
    """Unused keys: why the key changes nothing here."""
    always: bool = False
    """Refuse every value (keys with no "off" value, e.g. another tool's file layout)."""

    def decide(self, key: str, value: Any, purpose: str) -> str | None:
        """The refusal message for ``key: value`` in a ``purpose`` config; None when it is accepted (not used)."""
        refusal = self.refusal(key, value, purpose)
        return refusal.text if refusal else None

    def refusal(self, key: str, value: Any, purpose: str) -> Message | None:
        """``decide``'s sentence as a code with its values; the feature and the alternative are phrases of this
        table (code ``words``: a front end translates them by their English text)."""
        if self.feature is None or purpose not in self.scope:
            return None
        if not self.always and _is_default(value, self.defaults):
            return None
        shown = "" if self.always else f": {_yaml_scalar(value)}"
        text = f"`{key}{shown}` belongs to {self.feature}, which lf-assistant does not support"
        fields = {"key": key, "shown": shown, "feature": Message("words", self.feature)}
        if self.alternative:
            return Message("config.lf_refused", f"{text}; {self.alternative}.",
                           dict(fields, alternative=Message("words", self.alternative)))
        return Message("config.lf_refused_bare", text + ".", fields)

    def unused_reason(self, purpose: str) -> str:
        if self.reason:
            return self.reason
        return f"only matters for {', '.join(WHAT[p] for p in sorted(self.scope))}, not for {WHAT[purpose]}"


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return short_repr(value, 40) if not isinstance(value, str) else short_repr(value, 40).strip("'\"")


def _is_default(value: Any, defaults: tuple[Any, ...]) -> bool:
    for default in defaults:
        if value is None or value == "":
            if default is None or default is False or default == "":
                return True
        elif isinstance(default, bool) or isinstance(value, bool):
            if value is default:
                return True
        elif isinstance(default, str) and isinstance(value, str):
            if value.strip().lower() == default.lower():
                return True
        elif isinstance(default, (int, float)) and isinstance(value, (int, float)) and value == default:
            return True
    return False


def refused(feature: str, alternative: str | None = None, *, scope: frozenset[str] = frozenset({TRAIN}),
            **defaults: Any) -> dict[str, Rule]:
    """A group of keys of one LLaMA-Factory feature, each with LLaMA-Factory's default (the "off" value)."""
    return {key: Rule(feature, alternative, scope, (default,) if not isinstance(default, tuple) else default)
            for key, default in defaults.items()}


def refused_always(feature: str, alternative: str | None, *keys: str,
                   scope: frozenset[str] = ALL) -> dict[str, Rule]:
    """Keys refused whatever their value (they have no "off" value)."""
    return {key: Rule(feature, alternative, scope, (), always=True) for key in keys}


def unused(reason: str, *keys: str) -> dict[str, Rule]:
    """Keys accepted and named once as not used: they change nothing that is trained or generated."""
    return {key: Rule(reason=reason) for key in keys}


@dataclass
class KeyVerdicts:
    """What the loader found among keys that are not fields of the config being read."""

    refused: list[str] = field(default_factory=list)
    unused: dict[str, str] = field(default_factory=dict)


# --- whole files that are not lf-assistant configs --------------------------------------------------------------

ACCELERATE_KEYS = ("compute_environment", "distributed_type")
V1_MARKERS = ("model_class", "train_dataset", "micro_batch_size", "dist_config", "peft_config", "sample_backend")


def foreign_file_problem(data: dict[str, Any], known: set[str], source: str, purpose: str = TRAIN) -> str | None:
    """A sentence when the file as a whole is another tool's config (Accelerate, LLaMA-Factory v1), a config for
    another command, or not a config at all; None when it reads as a config of ``purpose`` (key checks follow)."""
    keys = [str(key) for key in data]
    if any(key in data for key in ACCELERATE_KEYS):
        return (f"{source} is an Accelerate launcher config (compute_environment, distributed_type), not a training "
                "config. lf-assistant starts the processes itself: run `lf-assistant train CONFIG --nproc-per-node "
                "N` (or `lf-assistant launch`) with fsdp: full_shard or deepspeed: FILE in the training YAML.")
    if "model" in data and sum(key in data for key in V1_MARKERS) >= 1:
        return (f"{source} is a LLaMA-Factory v1 config (model, model_class, train_dataset, micro_batch_size, ...), "
                "which lf-assistant does not read. It reads LLaMA-Factory's training YAMLs: write model_name_or_path, "
                "dataset and dataset_dir, finetuning_type, per_device_train_batch_size (see examples/).")
    if len(keys) >= 3 and not any(key in known for key in keys):  # fewer: likely typos, "Did you mean" helps more
        shown = ", ".join(short_repr(key, 30) for key in keys[:3])
        return (f"{source} does not look like a config: none of its {len(keys)} keys ({shown}"
                f"{', ...' if len(keys) > 3 else ''}) is a config key. Is it the right file?")
    if purpose == TRAIN and "dataset" not in data and "stage" not in data:
        if "export_dir" in data:
            return f"{source} is an export config (export_dir, no dataset): run `lf-assistant export {source}`."
        if "infer_backend" in data:
            return f"{source} is an inference config (infer_backend, no dataset): run `lf-assistant chat {source}`."
    return None
