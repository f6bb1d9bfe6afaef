"""Reward modelling: a scalar score per answer, trained so the chosen answer of each pair scores higher.

    python -m engine.recipes.rm lf_runs/<run_id>/rm.yaml [--run-dir DIR]

The model is transformers' *ForSequenceClassification with one output: the base's body and a fresh score head.
A sequence's score is the head's output at its last token that is not padding (transformers' own pooling, so the
saved model scores the same in plain transformers). The loss is the pairwise ``-log σ(s_chosen - s_rejected)``
(units: pairs). Full and freeze tuning save a folder ``AutoModelForSequenceClassification.from_pretrained`` loads;
LoRA saves a PEFT adapter (task SEQ_CLS, the score head in modules_to_save). After saving, the result is loaded
back the way a user would and must give the trained scores; its held-out pair accuracy goes into the status.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.errors import EngineError
from engine.training.loss import model_inputs
from engine.training.session import Session
from engine.training.task import LossOut, StepContext, Task

SCORE_TOLERANCE = 1e-3  # fp32 reload: the same weights must give the same scores


class ScoreCapture:
    """The score head's output at every position, caught on its way through the model's own forward.

    The model is called as the strategy wrapped it (DDP, FSDP2, sequence parallelism all act there); transformers
    then pools one position itself, which is not what a sequence-parallel slice needs, so the loss reads the
    per-position scores the hook kept instead."""

    def __init__(self, scorer: torch.nn.Module) -> None:
        classifier = scorer.get_base_model() if hasattr(scorer, "get_base_model") else scorer
        self.scores: torch.Tensor | None = None
        classifier.score.register_forward_hook(self._keep)

    def _keep(self, _module, _args, output) -> None:
        self.scores = output

    def __call__(self, model, batch: dict) -> torch.Tensor:
        self.scores = None
        model(**model_inputs(batch))
        return self.scores.squeeze(-1).float()


class RewardCollator:
    """PreferenceCollator rows (N chosen, then N rejected) plus each row's pooled position, transformers' rule."""

    def __init__(self, pad_token_id: int) -> None:
        from engine.data import PreferenceCollator

        self.pairs, self.pad_token_id = PreferenceCollator(pad_token_id=pad_token_id), pad_token_id

    def __call__(self, features: list[dict]) -> dict:
        batch = self.pairs(features)
        batch["last_position"] = last_non_pad(batch["input_ids"], self.pad_token_id)
        return batch


def last_non_pad(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    positions = torch.arange(input_ids.shape[-1], device=input_ids.device)
    return (positions * (input_ids != pad_token_id)).argmax(-1)


def row_scores(scores: torch.Tensor, batch: dict, context: StepContext) -> torch.Tensor:
    """Each row's score at its pooled position; on a sequence slice only the rank holding it contributes."""
    positions = batch.get("position_ids")
    if positions is None:
        positions = torch.arange(scores.shape[-1], device=scores.device).expand_as(scores)
    picked = (scores * (positions == batch["last_position"][:, None])).sum(-1)
    return context.sequence_sum(picked) if context.sequence_parallel else picked


def setup(session: Session) -> Task:
    logger, tokenizer = session.logger, session.tokenizer

    # 1. Data: preference pairs, both answers scored whole (prompt included: the score reads the conversation).
    train_pairs, eval_pairs = session.train_and_eval(
        session.load_pairs, session.preference_pairs, unit="pairs",
        empty="No preference pair keeps an answer token after encoding: raise cutoff_len or check the data.")

    # 2. The reward model: the base's body with a one-output score head.
    base = session.load_base(head="score")
    base.config.pad_token_id = tokenizer.pad_token_id
    model = session.prepare(base)
    scores = ScoreCapture(model)

    # 3. The pairwise loss; accuracy and rewards as metrics.
    def loss(train_model, batch: dict, context: StepContext) -> LossOut:
        rewards = row_scores(scores(train_model, batch), batch, context)
        half = rewards.shape[0] // 2
        chosen, rejected = rewards[:half], rewards[half:]
        margin = chosen - rejected
        return LossOut(-F.logsigmoid(margin).sum(), {
            "accuracy": float((margin.detach() > 0).float().sum()),
            "rewards/chosen": float(chosen.detach().sum()), "rewards/rejected": float(rejected.detach().sum()),
            "rewards/margins": float(margin.detach().sum())})

    collate = RewardCollator(tokenizer.pad_token_id)

    def closing(output_dir: Path, stepper) -> dict[str, float]:
        if not eval_pairs:
            logger.note("no held-out pairs (val_size: 0): the reloaded reward model was checked on training pairs.")
        return check_saved_model(output_dir, stepper, scores, (eval_pairs or train_pairs)[:64], collate, session,
                                 held_out=bool(eval_pairs))

    return Task(model=model, train_samples=train_pairs, eval_samples=eval_pairs, collate=collate, loss=loss,
                units=lambda batch: batch["input_ids"].shape[0] // 2, per_example=True, batching="padded",
                summary_metrics=("accuracy",), closing=closing)


def check_saved_model(output_dir: Path, stepper, scores: ScoreCapture, pairs: list[dict], collate,
                      session: Session, *, held_out: bool = True) -> dict[str, float]:
    """Load the saved reward model as a user would (plain transformers, or PEFT for an adapter) and score held-out
    pairs with transformers' own pooling: the scores must equal the trained model's. Every rank computes the trained
    scores (the model may be sharded); the main rank loads and compares."""
    batch = {k: v.to(session.device) for k, v in collate(pairs).items()}
    stepper.task.model.eval()
    with torch.no_grad():
        prepared = stepper.prepare(batch)
        expected = row_scores(scores(stepper.train_model, prepared), prepared, stepper.context)
    stepper.task.model.train()
    if not session.strategy.is_main:
        return {}
    reloaded = load_reward_model(output_dir, session)
    with torch.no_grad():
        got = reloaded(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.squeeze(-1)
    gap = float((expected - got.float()).abs().max())
    if gap > SCORE_TOLERANCE:
        raise EngineError(f"The saved reward model in {output_dir} does not reproduce the trained scores (largest "
                          f"difference {gap:.2e} > {SCORE_TOLERANCE}); it was not saved correctly.")
    half = got.shape[0] // 2
    accuracy = float((got[:half] > got[half:]).float().mean())
    if session.logger.enabled:
        write_scores(session, pairs, got[:half].tolist(), got[half:].tolist())
    session.logger.info(f"reward model reloaded from {output_dir}: scores match (max diff {gap:.1e}); chosen above "
                        f"rejected on {accuracy:.0%} of {half} pairs")
    which = "held-out" if held_out else "training"
    if accuracy <= 0.5:
        session.logger.note(f"the reward model ranks the chosen answer first on only {accuracy:.0%} of {which} "
                            "pairs: train longer or on more pairs before using it.")
    return {"heldout_accuracy" if held_out else "train_pairs_accuracy": accuracy}


def write_scores(session: Session, pairs: list[dict], chosen: list[float], rejected: list[float]) -> None:
    """The held-out pairs with the saved model's scores, in the run folder (validation shows them): the question as
    written, and both answers decoded from the tokens that were scored (special tokens left out)."""
    import json

    from engine.data.encode import IGNORE_INDEX
    from engine.jsonio import write_text_atomic

    def text(ids: list[int]) -> str:
        return " ".join(session.tokenizer.decode(ids, skip_special_tokens=True).split())

    rows = []
    for pair, good, bad in zip(pairs, chosen, rejected):
        labels = pair["chosen_labels"]
        prompt = [i for i, label in zip(pair["chosen_input_ids"], labels) if label == IGNORE_INDEX]
        answer = [i for i, label in zip(pair["chosen_input_ids"], labels) if label != IGNORE_INDEX]
        worse = [i for i, label in zip(pair["rejected_input_ids"], pair["rejected_labels"]) if label != IGNORE_INDEX]
        asked = pair.get("prompt") or text(prompt)  # data tokenized elsewhere has only the templated tokens
        rows.append({"prompt": asked, "chosen": text(answer), "rejected": text(worse),
                     "chosen_score": round(float(good), 4), "rejected_score": round(float(bad), 4)})
    write_text_atomic(session.run.held_out_scores_path,
                      "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def load_reward_model(output_dir: Path, session: Session) -> torch.nn.Module:
    from transformers import AutoModelForSequenceClassification

    if session.method.adapter:
        from peft import PeftModel

        base = AutoModelForSequenceClassification.from_pretrained(session.model_path, num_labels=1,
                                                                  dtype=torch.float32)
        base.config.pad_token_id = session.tokenizer.pad_token_id
        model = PeftModel.from_pretrained(base, str(output_dir))
    else:
        model = AutoModelForSequenceClassification.from_pretrained(str(output_dir), dtype=torch.float32)
    return model.to(session.device).eval()


if __name__ == "__main__":
    from engine.recipes.entry import main

    sys.exit(main("rm"))
