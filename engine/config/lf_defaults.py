"""Where lf-assistant's default differs from LLaMA-Factory's, and why.

A LLaMA-Factory YAML that omits one of these keys trains differently here than there. The table is shown by
``lf-assistant train --check`` and the wizard's diff table, for the keys a config leaves out; every other
omitted key takes LLaMA-Factory's default (the fields declare the same values).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class DefaultDifference(NamedTuple):
    key: str
    lf_default: Any
    ours: Any
    reason: str


# LLaMA-Factory's value is the one its parser ends with when the key is omitted: its own hparams default, or the
# Transformers TrainingArguments default it keeps (Transformers 5.x, which LLaMA-Factory pins).
DEFAULT_DIFFERENCES: tuple[DefaultDifference, ...] = (
    DefaultDifference("do_train", False, True,
                      "this command trains; LLaMA-Factory does nothing without do_train: true"),
    DefaultDifference("per_device_train_batch_size", 8, 1,
                      "one sample per device fits every GPU and the CPU; raise it (or gradient_accumulation_steps) "
                      "once memory allows"),
    DefaultDifference("per_device_eval_batch_size", 8, 1, "one eval sample per device fits every GPU and the CPU"),
    DefaultDifference("lr_scheduler_type", "linear", "cosine",
                      "cosine is what LLaMA-Factory's own examples set; the linear default only applies when a YAML "
                      "omits it"),
    DefaultDifference("logging_steps", 500, 10,
                      "fine-tunes are often a few hundred steps; logging every 500 would show no loss curve"),
    DefaultDifference("gradient_checkpointing", "on (unless disable_gradient_checkpointing: true)", "off",
                      "off trains about a third faster and small models fit without it; set gradient_checkpointing: "
                      "true for long sequences or large models"),
    DefaultDifference("plot_loss", False, True, "the loss plot costs nothing and the run review shows it"),
    DefaultDifference("eval_strategy", "no", "steps",
                      "with eval data (val_size or eval_dataset) the eval loss is reported as training goes"),
    DefaultDifference("eval_steps", "logging_steps", "logging_steps x 10",
                      "each eval is a pass over the eval rows; every tenth log keeps it a small share of the run"),
    DefaultDifference("resume_from_checkpoint", "the last checkpoint of a non-empty output_dir", "none (asks)",
                      "a non-empty output_dir is refused with the choice to resume (auto) or overwrite, so a run "
                      "never continues an unrelated one silently"),
    DefaultDifference("output_dir", "trainer_output", "saves/<model>/<method>/<run_id>",
                      "every run gets its own folder; two runs never share checkpoints"),
    DefaultDifference("template", "the tokenizer's own chat template (else empty)",
                      "the model family's LLaMA-Factory template (else the tokenizer's)",
                      "the named templates render exactly as LLaMA-Factory's examples train; a parsed chat template "
                      "can differ from them (system prompt, thinking tags)"),
    DefaultDifference("allow_special_tokens_in_text", "on (control-token text becomes control tokens)", "off",
                      "a data row cannot forge a turn with text such as <|im_end|>; set it to true for "
                      "LLaMA-Factory's encoding"),
)


def default_differences(config: Any) -> list[DefaultDifference]:
    """The rows for keys the config omitted. ``config``: the dict read from the YAML (its keys are the ones
    given) or a TrainConfig from the loader (its ``given_keys``)."""
    given = set(config) if isinstance(config, dict) else set(getattr(config, "given_keys", ()))
    if "disable_gradient_checkpointing" in given:
        given.add("gradient_checkpointing")
    if "evaluation_strategy" in given:
        given.add("eval_strategy")
    return [row for row in DEFAULT_DIFFERENCES if row.key not in given]
