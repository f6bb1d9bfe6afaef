"""KTO: single answers labelled desirable or undesirable, no pairs needed.

    python -m engine.recipes.kto lf_runs/<run_id>/kto.yaml [--run-dir DIR]

The loss (Ethayarajh et al. 2024, as TRL and LLaMA-Factory compute it) compares each answer's policy/reference
log-ratio r with a KL baseline z, the mean log-ratio of mismatched answers over the step's batch on all replicas:
desirable answers add ``w_d·(1 - σ(β·(r - z)))``, undesirable ones ``w_u·(1 - σ(β·(z - r)))``. The reference is
the base with the adapter off (LoRA) or a frozen copy (full, freeze). Units are examples. Metrics: rewards/chosen
and rewards/rejected (means over each kind), rewards/margins, kl.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from engine.training.preference import row_logps
from engine.training.session import Session, disable_dropout, frozen_copy
from engine.training.task import LossOut, StepContext, Task


def setup(session: Session) -> Task:
    from engine.data.chunks import preprocessing_chunks
    from engine.data.encode import untrained_note
    from engine.data.feedback import FeedbackCollator, encode_feedback
    from engine.training.preference import LF_DIVIDES_BY_ZERO

    config, logger = session.config, session.logger

    # 1. Data: labelled answers, each with a mismatched answer for the KL baseline.
    def encode(examples: list[dict]) -> list[dict]:
        chunks = preprocessing_chunks(len(examples), config.preprocessing_batch_size, config.preprocessing_num_workers)
        encoded = encode_feedback(examples, session.tokenizer, session.template, config.cutoff_len, chunks)
        note = untrained_note(encoded, config.cutoff_len, "example")
        if note:
            logger.note(note + (LF_DIVIDES_BY_ZERO.format(what="pref_ftx SFT term") if config.pref_ftx > 1e-6
                                else ""))
        return list(encoded)

    def both_kinds(examples: list[dict]) -> str:
        desirable = sum(e["kto_tag"] for e in examples)
        if desirable in (0, len(examples)):
            logger.note(f"every example is {'desirable' if desirable else 'undesirable'}: KTO learns from both "
                        "kinds.")
        return f"{desirable} desirable"

    train_examples, eval_examples = session.train_and_eval(
        lambda names: session.load_examples(names, ranking=False), encode, unit="examples", describe=both_kinds,
        empty="No KTO example has a trained token after encoding: raise cutoff_len.")

    # 2. The policy and its reference.
    base = session.load_base(require_logits=True)
    reference_copy = None if session.method.adapter else frozen_copy(base)
    model = session.prepare(base)
    disable_dropout(model)

    def reference_logps(batch: dict, context: StepContext) -> torch.Tensor:
        with torch.no_grad():
            if reference_copy is not None:
                return row_logps(reference_copy, batch, context.sequence_sum)[0]
            with model.disable_adapter():
                return row_logps(model, batch, context.sequence_sum)[0]

    # 3. The loss per example.
    beta, weights, ftx = config.pref_beta, (config.kto_chosen_weight, config.kto_rejected_weight), config.pref_ftx

    def loss(train_model, batch: dict, context: StepContext) -> LossOut:
        tags = batch["kto_tags"]
        n = tags.shape[0]
        answers = {k: v[:n] for k, v in batch.items() if k != "kto_tags"}
        mismatched = {k: v[n:] for k, v in batch.items() if k != "kto_tags"}
        logps, tokens = row_logps(train_model, answers, context.sequence_sum)
        with torch.no_grad():
            kl_logps = row_logps(train_model, mismatched, context.sequence_sum)[0]
        ratio = logps - reference_logps(answers, context)
        kl = (kl_logps - reference_logps(mismatched, context)).mean()
        kl = max(context.replica_mean(float(kl)), 0.0)
        losses = torch.where(tags, weights[0] * (1 - F.sigmoid(beta * (ratio - kl))),
                             weights[1] * (1 - F.sigmoid(beta * (kl - ratio))))
        total = losses.sum()
        chosen = int(tags.sum())
        if ftx > 1e-6 and chosen:
            # LLaMA-Factory adds ftx · mean(SFT loss of the desirable answers) · n / n_desirable to the batch mean.
            sft = -(logps / tokens.clamp(min=1))[tags].mean()
            total = total + ftx * sft * n * n / chosen
        rewards = beta * ratio.detach()
        return LossOut(total, {"rewards/chosen_sum": float(rewards[tags].sum()),
                               "rewards/rejected_sum": float(rewards[~tags].sum()),
                               "count/chosen": float(chosen), "count/rejected": float(n - chosen),
                               "kl_sum": kl * n})

    return Task(model=model, train_samples=train_examples, eval_samples=eval_examples,
                collate=FeedbackCollator(pad_token_id=session.tokenizer.pad_token_id), loss=loss,
                units=lambda batch: batch["kto_tags"].shape[0], per_example=True, batching="padded",
                frozen=[reference_copy] if reference_copy is not None else [], metric_means=kto_means,
                summary_metrics=("rewards/margins", "kl"))


def kto_means(sums: dict[str, float], units: float) -> dict[str, float]:
    """Rewards averaged over each kind of example; the KL baseline over all of them."""
    chosen = sums.get("rewards/chosen_sum", 0.0) / max(sums.get("count/chosen", 0.0), 1.0)
    rejected = sums.get("rewards/rejected_sum", 0.0) / max(sums.get("count/rejected", 0.0), 1.0)
    return {"rewards/chosen": chosen, "rewards/rejected": rejected, "rewards/margins": chosen - rejected,
            "kl": sums.get("kl_sum", 0.0) / max(units, 1.0)}


if __name__ == "__main__":
    from engine.recipes.entry import main

    sys.exit(main("kto"))
