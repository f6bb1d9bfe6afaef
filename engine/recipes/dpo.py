"""Preference training (DPO, IPO, hinge, ORPO, SimPO): the chosen answer rises against the rejected one.

    python -m engine.recipes.dpo lf_runs/<run_id>/dpo.yaml [--run-dir DIR]

Each pair is a prompt with a chosen and a rejected answer; both are scored on the same masked prompt. DPO, IPO
and hinge measure the policy against a frozen reference: for LoRA the same model with its adapter switched off
(no second copy in memory), for full and freeze tuning a frozen copy of the base. ORPO and SimPO need none.
Units are pairs: the loss is the mean over the step's pairs. Metrics: rewards/chosen, rewards/rejected,
rewards/accuracies, rewards/margins, logps/chosen, logps/rejected.
"""

from __future__ import annotations

import sys

from engine.training.preference import (PreferenceSettings, metric_sums, needs_reference, pair_logps,
                                        preference_loss, reference_logps_fn)
from engine.training.session import Session, disable_dropout, frozen_copy
from engine.training.task import LossOut, StepContext, Task

SUMMARY = ("rewards/accuracies", "rewards/margins")


def setup(session: Session) -> Task:
    from engine.data import PreferenceCollator

    config, logger = session.config, session.logger
    settings = PreferenceSettings.from_config(config)

    # 1. Data: preference pairs; the shared prompt is masked, only the two answers are scored.
    train_pairs, eval_pairs = session.train_and_eval(
        session.load_pairs, session.preference_pairs, unit="pairs",
        empty="No preference pair keeps an answer token after encoding: raise cutoff_len or check that the rows "
              "have non-empty chosen and rejected answers.")
    if config.packing or config.neat_packing or config.batching_strategy != "padded":
        logger.note("packing / batching_strategy do not apply to preference pairs; using padded micro-batches.")

    # 2. The policy, and the reference it is measured against.
    base = session.load_base(require_logits=True)
    reference_copy = None
    if needs_reference(settings.pref_loss) and not session.method.adapter:
        reference_copy = frozen_copy(base)
        logger.info("reference: a frozen copy of the base model (full/freeze tuning keeps two copies in memory)")
    model = session.prepare(base)
    disable_dropout(model)
    if needs_reference(settings.pref_loss) and reference_copy is None:
        logger.info("reference: the base model with the LoRA adapter disabled (no second copy in memory)")
        if config.adapter_name_or_path:
            logger.note("adapter_name_or_path is trained further, so the reference is the base WITHOUT it. For a "
                        "reference that includes that adapter (e.g. your SFT result), merge it first "
                        "(`lf-assistant export`) and train on the merged model.")

    reference = reference_logps_fn(model, reference_copy, settings.pref_loss)
    logger.info(f"loss {settings.pref_loss} | beta {settings.pref_beta} | pref_ftx {settings.pref_ftx}")

    # 3. The loss per pair, with the reward metrics the peers log.
    def loss(train_model, batch: dict, context: StepContext) -> LossOut:
        policy = pair_logps(train_model, batch, context.sequence_sum)
        out = preference_loss(settings, policy, reference(batch, context.sequence_sum) if reference else None)
        return LossOut(out.losses.sum(), metric_sums(out))

    return Task(model=model, train_samples=train_pairs, eval_samples=eval_pairs,
                collate=PreferenceCollator(pad_token_id=session.tokenizer.pad_token_id), loss=loss,
                units=lambda batch: batch["input_ids"].shape[0] // 2, per_example=True, batching="padded",
                frozen=[reference_copy] if reference_copy is not None else [], summary_metrics=SUMMARY)


if __name__ == "__main__":
    from engine.recipes.entry import main

    sys.exit(main("dpo"))
