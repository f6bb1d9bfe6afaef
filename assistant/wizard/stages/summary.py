"""The closing summary: artifacts, the training result, validation, export, and the chat command — nothing else
(no offers of further work)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from assistant.formatting import fmt_duration
from assistant.i18n import t
from assistant.wizard.stages.train import display_path
from assistant.wizard.stages.validate import ANSWERS_FILE, INFER_FILE, chat_command
from assistant.wizard.state import WizardState
from engine.methods import is_adapter


@dataclass
class Summary:
    run_folder: str
    output_dir: str | None
    output_kind: str
    """adapter | model"""
    loss_plot: str | None
    steps: str
    epochs: str
    final_loss: str
    runtime_s: float | None
    """Seconds of training, every attempt together."""
    validation: str | None
    export_dir: str | None
    chat_command: str | None
    rewards: str | None = None
    """A preference run's last figures (reward accuracy / margin, KTO's margin / KL, a reward model's accuracy)."""
    answers: list[dict] | None = None
    """A few validation rows {prompt, base, tuned, reference?}: the effect of training at a glance."""
    load_hint: str | None = None
    """How to load the result where there is no chat (a reward model)."""
    resumed: str | None = None
    """Where the run was interrupted and resumed, and the steps trained again (None when it ran in one go)."""
    attempts: int = 1
    attempt_runtime_s: float | None = None
    """Seconds of training of the last attempt, when there were several."""

    @property
    def runtime(self) -> str:
        """The training time; after a resume, every attempt's together and the last one's."""
        if self.attempts < 2:
            return fmt_duration(self.runtime_s)
        return t("summary.runtime_attempts", total=fmt_duration(self.runtime_s), attempts=self.attempts,
                 last=fmt_duration(self.attempt_runtime_s))


def summarize(state: WizardState, run_folder: Path) -> Summary:
    from engine.rundir import RunDir, read_jsonl

    run = RunDir(Path(run_folder))
    status = run.read_status()
    metrics = run.read_metrics()
    epochs = [m["epoch"] for m in metrics if m.get("epoch") is not None]
    final = status.final_loss if status.final_loss is not None else status.loss
    answers = read_jsonl(run.path / ANSWERS_FILE)
    pair = f"({t('validate.base')}, {t('validate.tuned')})"
    validation = f"{len(answers)} × {pair} → {display_path(run.path / ANSWERS_FILE)}" if answers else None
    has_infer = (run.path / INFER_FILE).is_file()
    output = status.output_dir or state.output_dir
    figures = final_figures(status)
    return Summary(
        run_folder=display_path(run.path),
        output_dir=display_path(output) if output else None,
        output_kind="adapter" if is_adapter(state.method) else "model",
        loss_plot=display_path(status.loss_plot) if status.loss_plot else None,
        steps=f"{status.step}/{status.total_steps or '-'}",
        epochs=f"{epochs[-1]:.2f}" if epochs else "-",
        final_loss=f"{final:.4f}" if isinstance(final, (int, float)) else "-",
        runtime_s=status.runtime_s if status.runtime_s is not None else status.elapsed_s,
        validation=validation,
        export_dir=display_path(state.export_dir) if state.exported and state.export_dir else None,
        chat_command=chat_command(run.path, state.device) if has_infer else None,
        rewards=figures,
        answers=pick_answers(answers),
        load_hint=reward_model_hint(state, output) if status.stage == "rm" and output else None,
        resumed=resumed_words(status.resumes),
        attempts=len(status.resumes) + 1,
        attempt_runtime_s=status.attempt_elapsed_s if status.resumes else None,
    )


def resumed_words(resumes) -> str | None:
    """Each interruption and resume: 'after step 39, resumed from checkpoint 20: 19 steps trained again'."""
    said = []
    for resumed in resumes:
        if resumed.reached_step is None:
            said.append(t("summary.resumed_unknown", checkpoint=resumed.from_step))
        else:
            said.append(t("summary.resumed_value", reached=resumed.reached_step, checkpoint=resumed.from_step,
                          redone=resumed.redone))
    return "; ".join(said) or None


def final_figures(status) -> str | None:
    """The stage's own end figures from status.json (final_metrics), e.g. reward accuracies +0.92 · reward margins
    +0.41."""
    from assistant.formatting import metric_words

    values = status.final_metrics or {}
    shown = [f"{metric_words(name)} {value:+.3f}" for name, value in values.items()
             if isinstance(value, (int, float))]
    return " · ".join(shown) or None


def pick_answers(rows: list[dict], count: int = 2) -> list[dict]:
    """Validation rows to show: where base and tuned differ first (the effect), held-out rows before typed ones."""
    ranked = sorted(rows, key=lambda row: (row.get("base") == row.get("tuned"), row.get("reference") is None))
    return ranked[:count]


def reward_model_hint(state: WizardState, output: str) -> str:
    """A reward model has no chat: how to load it (transformers; PEFT on top of its base for LoRA)."""
    if is_adapter(state.method):
        return (f"AutoModelForSequenceClassification.from_pretrained(BASE, num_labels=1) + "
                f"PeftModel.from_pretrained(model, '{display_path(output)}')")
    return f"AutoModelForSequenceClassification.from_pretrained('{display_path(output)}')"
