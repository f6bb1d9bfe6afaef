"""Preference training (DPO, ORPO, SimPO), read top to bottom.

    python -m engine.recipes.dpo lf_runs/<run_id>/dpo.yaml [--run-dir DIR]

Each pair is a prompt with a chosen and a rejected answer. The policy learns to raise the chosen answer's
log-probability relative to the rejected one; DPO (pref_loss: sigmoid) measures that against a frozen reference:
for LoRA the same model with its adapter switched off (no second copy in memory), for full and freeze tuning a
frozen copy of the base. ORPO and SimPO need no reference. Writes metrics.jsonl (loss plus rewards/chosen,
rewards/rejected, rewards/accuracies, rewards/margins, logps/chosen, logps/rejected), events.jsonl and status.json
into the run folder, and checkpoints into output_dir, exactly like the SFT recipe.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

from engine.config import TrainConfig, validate
from engine.errors import ConfigError, DataError, EngineError
from engine.parallel import setup_strategy
from engine.recipes.sft import announce_rank, autocast, record_failure, to_device
from engine.rundir import RunDir
from engine.training import checkpoint as ckpt
from engine.training.batching import PaddedBatcher
from engine.training.loop import RunLogger, StopFlag, split_validation
from engine.training.preference import (PairLogps, PreferenceSettings, has_trained_tokens, metric_sums,
                                        needs_reference, pair_logps, preference_loss)
from engine.training.schedule import build_scheduler, warmup_steps_for
from engine.training.setup import (choose_precision, resolve_model_path, resolve_template,
                                   seed_everything, write_run_outputs)

ADAPTER_METHODS = ("lora", "qlora")


def train(config: TrainConfig, run: RunDir, *, on_log=None, stop: StopFlag | None = None) -> dict:
    """Train on preference pairs as the config says, recording everything in ``run``. Returns the final status."""
    stop = stop or StopFlag()
    strategy = setup_strategy(config)
    logger = RunLogger(run, on_log, enabled=strategy.is_main)
    problems = validate(config)
    if config.stage != "dpo":
        problems.append(f"stage is {config.stage!r}; this recipe trains stage: dpo.")
    if problems:
        raise ConfigError("The config has problems:\n- " + "\n- ".join(problems))
    settings = PreferenceSettings.from_config(config)

    # 1. Model, tokenizer, template, precision.
    from engine.data import PreferenceCollator, encode_preference, find_dataset_dir, load_examples
    from engine.methods import count_parameters, get_method
    from engine.models.loading import load_model, load_tokenizer

    seed_everything(config.seed)
    model_path = resolve_model_path(config)
    precision = choose_precision(config)
    if precision.note:
        logger.note(precision.note)
    tokenizer = load_tokenizer(model_path, trust_remote_code=config.trust_remote_code)
    template = resolve_template(config, model_path, tokenizer)
    logger.info(f"model {model_path} | template {template.name} | method {config.method} | "
                f"loss {settings.pref_loss} (beta {settings.pref_beta}) | device {precision.device} | "
                f"precision {precision.autocast_dtype or torch.float32}")

    # 2. Data: preference pairs; the shared prompt is masked, only the two answers are scored.
    dataset_dir = find_dataset_dir(config.dataset_dir, config_dir=Path(config.config_dir) if config.config_dir else None)

    def encode(names: str) -> list[dict]:
        examples = load_examples(names, dataset_dir, max_samples=config.max_samples, ranking=True)
        encoded = encode_preference(examples, tokenizer, template, config.cutoff_len)
        if encoded.dropped:
            logger.note(f"{len(encoded.dropped)} pair(s) dropped: no answer token fits in cutoff_len "
                        f"{config.cutoff_len} (first: {encoded.dropped[0]}).")
        if encoded.truncated:
            logger.info(f"{encoded.truncated} pair(s) cut to cutoff_len {config.cutoff_len}")
        # Identical answers give a zero gradient and a reward margin stuck at 0: say so rather than train on them.
        same = [pair for pair in encoded if pair["chosen_input_ids"] == pair["rejected_input_ids"]]
        if same:
            logger.note(f"{len(same)} pair(s) have the same chosen and rejected answer (after cutoff_len) and "
                        "teach nothing; fix those rows or raise cutoff_len.")
        return [pair for pair in encoded if has_trained_tokens(pair)]

    pairs = encode(config.dataset)
    if not pairs:
        raise DataError("No preference pair has a trained token on both answers after encoding: raise cutoff_len "
                        "or check that every row has non-empty chosen and rejected answers.")
    train_pairs, eval_pairs = split_validation(pairs, config.val_size, config.seed)
    if config.eval_dataset:
        eval_pairs = encode(config.eval_dataset)
    collate = PreferenceCollator(pad_token_id=tokenizer.pad_token_id)
    logger.info(f"data: {len(pairs)} pairs -> {len(train_pairs)} train / {len(eval_pairs)} eval")

    # 3. Model with the method applied, and the reference it is measured against.
    method = get_method(config.method)
    model = load_model(model_path, dtype="float32" if precision.autocast_dtype is None else "auto",
                       device=str(precision.device), trust_remote_code=config.trust_remote_code,
                       quantization_bit=config.quantization_bit)
    if config.kernel_config not in (None, "none"):
        from engine.kernels.patch import apply_kernels

        plan = apply_kernels(model, config.kernel_config, device=precision.device.type, require_logits=True)
        logger.info(f"kernels: {', '.join(plan.applied) or 'none'}" + "".join(f"; {n}" for n in plan.notes))
    frozen_copy = None
    if needs_reference(settings.pref_loss) and config.method not in ADAPTER_METHODS:
        frozen_copy = freeze(copy.deepcopy(model)).to(precision.device)
        logger.info("reference: a frozen copy of the base model (full/freeze tuning keeps two copies in memory)")
    model = method.prepare(model, config).to(precision.device)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    disable_dropout(model)
    model.train()
    reference = reference_logps_fn(model, frozen_copy, settings.pref_loss)
    if reference and frozen_copy is None:
        logger.info("reference: the base model with the LoRA adapter disabled (no second copy in memory)")
        if config.adapter_name_or_path:
            logger.note("adapter_name_or_path is trained further, so the DPO reference is the base WITHOUT it. "
                        "For a reference that includes that adapter (e.g. your SFT result), merge it first "
                        "(`lf-assistant export`) and train DPO on the merged model.")
    trainable, total = count_parameters(model)
    train_model = strategy.wrap(model, config)  # DDP / FSDP2 wrap here; `model` stays the one we save
    logger.info(f"trainable parameters: {trainable:,} of {total:,} ({100 * trainable / total:.2f}%)")

    # 4. Optimizer and schedule over the planned number of steps. Pairs are not packed: both answers of a pair
    # must be scored on the same prompt, so each micro-batch is padded to its longest sequence.
    if config.packing or config.neat_packing or config.batching_strategy != "padded":
        logger.note("packing / batching_strategy do not apply to preference pairs; using padded micro-batches.")
    batcher = PaddedBatcher(train_pairs, collate, config.per_device_train_batch_size,
                            config.gradient_accumulation_steps, config.seed)
    per_epoch = batcher.steps_per_epoch()
    total_steps = config.max_steps if config.max_steps > 0 else math.ceil(config.num_train_epochs * per_epoch)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                                  eps=config.adam_epsilon, weight_decay=config.weight_decay)
    warmup = warmup_steps_for(total_steps, config.warmup_steps, config.warmup_ratio)
    scheduler = build_scheduler(optimizer, config.lr_scheduler_type, total_steps, warmup)
    scaler = torch.amp.GradScaler("cuda") if precision.autocast_dtype == torch.float16 else None

    # 5. Resume: weights, optimizer, scheduler, RNG and the data position of the newest complete checkpoint.
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    step, epoch, start_group = 0, 0, 0
    resume_from = ckpt.resolve_resume(config.resume_from_checkpoint, output_dir)
    if resume_from:
        method.load_for_resume(model, resume_from)
        state = ckpt.load_training_state(resume_from, optimizer, scheduler)
        step, epoch, start_group = state["step"], state["epoch"], state["group"]
        logger.event("resumed", checkpoint=str(resume_from), step=step)
        logger.info(f"resumed from {resume_from} at step {step}")
    elif config.resume_from_checkpoint:
        logger.note(f"resume_from_checkpoint: no complete checkpoint in {output_dir}; starting from step 0.")
    logger.status(state="running", step=step, total_steps=total_steps, output_dir=str(output_dir),
                  template=template.name, base_model=model_path, device=str(precision.device),
                  parallel=strategy.name, world_size=strategy.world_size, pref_loss=settings.pref_loss)

    def save_model(folder: Path) -> None:
        strategy.save_model(lambda target: method.save(model, target), folder)

    def score(batch: dict):
        """Per-pair losses, rewards and log-probs of one collated micro-batch of pairs."""
        with autocast(precision):
            policy = pair_logps(train_model, batch)
            return preference_loss(settings, policy, reference(batch) if reference else None)

    def evaluate() -> tuple[float, float]:
        model.eval()
        loss_sum, correct = 0.0, 0.0
        with torch.no_grad():
            for i in range(0, len(eval_pairs), config.per_device_eval_batch_size):
                out = score(to_device(collate(eval_pairs[i:i + config.per_device_eval_batch_size]), precision.device))
                loss_sum += float(out.losses.sum())
                correct += metric_sums(out)["rewards/accuracies"]
        model.train()
        count = strategy.sum_across_ranks(len(eval_pairs))
        return strategy.sum_across_ranks(loss_sum) / count, strategy.sum_across_ranks(correct) / count

    # 6. The loop: one optimizer step per group of micro-batches; every pair in the step weighs the same.
    eval_every = config.eval_steps or config.logging_steps * 10
    logger.start_timer(step, total_steps)
    while step < total_steps and not stop.requested:
        groups = strategy.shard_groups(batcher.groups(epoch))
        for group_index in range(start_group, len(groups)):
            step_pairs = sum(len(ids) for ids in groups[group_index])
            denominator = strategy.loss_denominator(step_pairs)
            step_loss, input_tokens, trained_tokens = 0.0, 0, 0
            sums: dict[str, float] = {}
            for ids in groups[group_index]:
                batch = to_device(batcher.collate(ids), precision.device)
                out = score(batch)
                loss = out.losses.sum() / denominator
                (scaler.scale(loss) if scaler else loss).backward()
                step_loss += float(loss.detach())
                input_tokens += int(batch["attention_mask"].sum())
                trained_tokens += int((batch["labels"][:, 1:] != -100).sum())
                for key, value in metric_sums(out).items():
                    sums[key] = sums.get(key, 0.0) + value
            if scaler:
                scaler.unscale_(optimizer)
            grad_norm = strategy.clip_grad_norm(params, config.max_grad_norm)
            step_loss = strategy.sum_across_ranks(step_loss)
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            epoch_float = epoch + (group_index + 1) / len(groups)
            logger.step(step, step_loss, float(grad_norm), scheduler.get_last_lr()[0], input_tokens, trained_tokens,
                        epoch_float, log_now=step % config.logging_steps == 0 or step == total_steps,
                        extra={key: value / step_pairs for key, value in sums.items()})
            if eval_pairs and config.eval_strategy != "no" and (step % eval_every == 0 or step == total_steps):
                eval_loss, eval_accuracy = evaluate()
                logger.eval(step, eval_loss, epoch_float)
                logger.info(f"step {step} eval rewards/accuracies {eval_accuracy:.3f}")
            at_save = config.save_strategy != "no" and step % config.save_steps == 0
            if at_save or (stop.requested and config.save_strategy != "no"):
                position = {"step": step, "epoch": epoch, "group": group_index + 1, "total_steps": total_steps}
                folder = ckpt.save_checkpoint(output_dir, step, save_model=save_model, optimizer=optimizer,
                                              scheduler=scheduler, trainer_state=position,
                                              save_only_model=config.save_only_model,
                                              total_limit=config.save_total_limit)
                logger.event("checkpoint_saved", step=step, path=str(folder))
                logger.status(last_checkpoint=str(folder))
            if step >= total_steps or stop.requested:
                break
        else:
            epoch, start_group = epoch + 1, 0

    train_runtime = logger.elapsed()
    if stop.requested:
        logger.event("stopped", step=step)
        strategy.close()
        return logger.status(state="stopped", step=step, finished_at=time.time(),
                             exit_reason=f"stopped by request ({stop.reason}) at step {step}")

    # 7. The result: adapter or model, tokenizer carrying the chat template, what produced it, the loss plot.
    save_model(output_dir)
    strategy.close()
    if not strategy.is_main:
        return {"state": "completed", "step": step}
    metrics = write_run_outputs(output_dir, tokenizer=tokenizer, template=template, config=config,
                                model_path=model_path, run=run, stage="dpo")
    last = next((m for m in reversed(metrics) if m.get("loss") is not None), {})
    logger.event("completed", step=step, output_dir=str(output_dir))
    logger.info(f"done: {step} steps, final loss {last.get('loss', float('nan')):.4f}, reward accuracy "
                f"{last.get('rewards/accuracies', float('nan')):.3f}, margin {last.get('rewards/margins', 0.0):.4f}, "
                f"output in {output_dir}")
    return run.update_status(state="completed", step=step, finished_at=time.time(), exit_reason="completed",
                             final_loss=last.get("loss"), final_reward_accuracy=last.get("rewards/accuracies"),
                             final_reward_margin=last.get("rewards/margins"), runtime_s=logger.elapsed(),
                             train_runtime_s=train_runtime, num_input_tokens_seen=logger.input_tokens_seen,
                             num_trained_tokens=logger.trained_tokens_seen)


def freeze(model: torch.nn.Module) -> torch.nn.Module:
    """A model that never trains: eval mode, no gradients."""
    model.eval()
    model.requires_grad_(False)
    return model


def disable_dropout(model: torch.nn.Module) -> None:
    """Dropout off, as the peers do for DPO: policy and reference must score a sequence the same way at step 0."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def reference_logps_fn(model, frozen_copy, pref_loss: str) -> Callable[[dict], PairLogps] | None:
    """How the reference log-probs are computed: None (reference-free losses), the frozen copy, or the policy
    with its adapter disabled (peft's ``disable_adapter()`` context, so the base weights are shared)."""
    if not needs_reference(pref_loss):
        return None

    def reference(batch: dict) -> PairLogps:
        with torch.no_grad():
            if frozen_copy is not None:
                return pair_logps(frozen_copy, batch)
            with model.disable_adapter():
                return pair_logps(model, batch)

    return reference


def main(argv: list[str] | None = None) -> int:
    """Entry point of the detached training process."""
    from engine.api import load_config

    parser = argparse.ArgumentParser(description="Run preference training (DPO / ORPO / SimPO) from a YAML config.")
    parser.add_argument("config", help="the run's dpo.yaml")
    parser.add_argument("--run-dir", help="run folder (default: the config's folder)")
    args = parser.parse_args(argv)
    announce_rank()
    run = RunDir(Path(args.run_dir) if args.run_dir else Path(args.config).resolve().parent)
    stop = StopFlag()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.request(signal.Signals(signum).name))
    run.update_status(state="running", pid=os.getpid(), started_at=run.read_status().get("started_at") or time.time())
    try:
        config = load_config(args.config)
        status = train(config, run, stop=stop)
    except EngineError as exc:
        record_failure(run, str(exc))
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # noqa: BLE001 - record every death in status.json before exiting
        record_failure(run, f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
        return 1
    return 0 if status.get("state") in ("completed", "stopped") else 1


if __name__ == "__main__":
    sys.exit(main())
