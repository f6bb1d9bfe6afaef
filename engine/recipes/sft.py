"""Supervised fine-tuning, read top to bottom.

    python -m engine.recipes.sft lf_runs/<run_id>/sft.yaml [--run-dir DIR]

Writes metrics.jsonl / events.jsonl / status.json into the run folder and checkpoints into output_dir.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import torch

from engine.config import TrainConfig, validate
from engine.errors import ConfigError, EngineError
from engine.rundir import RunDir
from engine.training import checkpoint as ckpt
from engine.parallel import setup_strategy
from engine.training.batching import build_batcher
from engine.training.loop import RunLogger, StopFlag, split_validation
from engine.training.loss import causal_lm_loss_sum, trained_tokens
from engine.training.schedule import build_scheduler, warmup_steps_for
from engine.training.setup import (choose_precision, resolve_model_path, resolve_template,
                                   seed_everything, write_run_outputs)


def train(config: TrainConfig, run: RunDir, *, on_log=None, stop: StopFlag | None = None) -> dict:
    """Train as the config says, recording everything in ``run``. Returns the final status."""
    stop = stop or StopFlag()
    strategy = setup_strategy(config)
    logger = RunLogger(run, on_log, enabled=strategy.is_main)
    problems = validate(config)
    if problems:
        raise ConfigError("The config has problems:\n- " + "\n- ".join(problems))

    # 1. Model, tokenizer, template, precision.
    from engine.data import SFTCollator, encode_supervised, find_dataset_dir, load_examples
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
                f"device {precision.device} | precision {precision.autocast_dtype or torch.float32}")

    # 2. Data: load, encode (prompt tokens masked), hold out a validation share.
    dataset_dir = find_dataset_dir(config.dataset_dir, config_dir=Path(config.config_dir) if config.config_dir else None)
    examples = load_examples(config.dataset, dataset_dir, max_samples=config.max_samples)
    samples = encode_supervised(examples, tokenizer, template, config.cutoff_len,
                                train_on_prompt=config.train_on_prompt, mask_history=config.mask_history)
    if not samples:
        raise EngineError("No sample has a trained token after encoding: check cutoff_len and the data's answers.")
    train_samples, eval_samples = split_validation(samples, config.val_size, config.seed)
    if config.eval_dataset:
        eval_samples = encode_supervised(load_examples(config.eval_dataset, dataset_dir, max_samples=config.max_samples),
                                         tokenizer, template, config.cutoff_len)
    collate = SFTCollator(pad_token_id=tokenizer.pad_token_id)
    logger.info(f"data: {len(examples)} rows -> {len(train_samples)} train / {len(eval_samples)} eval samples")

    # 3. Model with the fine-tuning method applied.
    method = get_method(config.method)
    model = load_model(model_path, dtype="float32" if precision.autocast_dtype is None else "auto",
                       device=str(precision.device), trust_remote_code=config.trust_remote_code,
                       quantization_bit=config.quantization_bit)
    fused_linear_ce = False
    if config.kernel_config not in (None, "none"):
        from engine.kernels.patch import apply_kernels

        plan = apply_kernels(model, config.kernel_config, device=precision.device.type)
        fused_linear_ce = plan if plan.fused_linear_ce else False
        logger.info(f"kernels: {', '.join(plan.applied) or 'none'}" + "".join(f"; {n}" for n in plan.notes))
    if fused_linear_ce and strategy.world_size > 1:
        raise ConfigError(f"The fused linear cross-entropy kernel calls the model's layers directly, past the "
                          f"{strategy.name} wrapper, so gradients would not be synchronised across processes. Drop "
                          "fused_linear_ce from kernel_config for multi-process runs.")
    model = method.prepare(model, config).to(precision.device)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    model.train()
    trainable, total = count_parameters(model)
    output_dir = Path(config.output_dir)
    resume_from = ckpt.resolve_resume(config.resume_from_checkpoint, output_dir)
    if resume_from:  # weights go in before wrapping: FSDP2 then shards the resumed weights
        method.load_for_resume(model, resume_from)
    train_model = strategy.wrap(model, config)  # DDP / FSDP2 wrap here; `model` stays the one we save
    logger.info(f"trainable parameters: {trainable:,} of {total:,} ({100 * trainable / total:.2f}%)")

    # 4. Optimizer and schedule over the planned number of steps.
    batcher = build_batcher(config, train_samples, collate)
    per_epoch = len(strategy.shard_groups(batcher.groups(0)))  # this rank's steps: the global batch is split
    total_steps = config.max_steps if config.max_steps > 0 else math.ceil(config.num_train_epochs * per_epoch)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                                  eps=config.adam_epsilon, weight_decay=config.weight_decay)
    optimizer = strategy.wrap_optimizer(optimizer)
    warmup = warmup_steps_for(total_steps, config.warmup_steps, config.warmup_ratio)
    scheduler = build_scheduler(optimizer, config.lr_scheduler_type, total_steps, warmup)
    scaler = torch.amp.GradScaler("cuda") if precision.autocast_dtype == torch.float16 else None

    # 5. Resume: weights, optimizer, scheduler, RNG and the data position of the newest complete checkpoint.
    if strategy.is_main:
        output_dir.mkdir(parents=True, exist_ok=True)
    step, epoch, start_group = 0, 0, 0
    if resume_from:
        state = ckpt.load_training_state(resume_from, strategy.checkpoint_optimizer(optimizer), scheduler)
        step, epoch, start_group = state["step"], state["epoch"], state["group"]
        logger.event("resumed", checkpoint=str(resume_from), step=step)
        logger.info(f"resumed from {resume_from} at step {step}")
    elif config.resume_from_checkpoint:
        logger.note(f"resume_from_checkpoint: no complete checkpoint in {output_dir}; starting from step 0.")
    logger.status(state="running", step=step, total_steps=total_steps, output_dir=str(output_dir),
                  template=template.name, base_model=model_path, device=str(precision.device),
                  parallel=strategy.name, world_size=strategy.world_size)

    def save_model(folder: Path) -> None:
        strategy.save_model(lambda target: method.save(model, target), folder)

    def evaluate() -> float:
        model.eval()
        loss_sum, tokens = 0.0, 0
        with torch.no_grad(), autocast(precision):
            for i in range(0, len(eval_samples), config.per_device_eval_batch_size):
                batch = strategy.prepare_batch(
                    to_device(collate(eval_samples[i:i + config.per_device_eval_batch_size]), precision.device))
                part, n = causal_lm_loss_sum(train_model, batch, fused_linear_ce=fused_linear_ce)
                loss_sum, tokens = loss_sum + float(part), tokens + n
        model.train()
        return strategy.sum_across_ranks(loss_sum) / max(strategy.sum_across_ranks(tokens), 1)

    # 6. The loop: one optimizer step per group of micro-batches, loss normalised by the group's trained tokens.
    eval_every = config.eval_steps or config.logging_steps * 10
    logger.start_timer(step, total_steps)
    while step < total_steps and not stop.requested:
        groups = strategy.shard_groups(batcher.groups(epoch))
        for group_index in range(start_group, len(groups)):
            micro_batches = [strategy.prepare_batch(to_device(batcher.collate(ids), precision.device))
                             for ids in groups[group_index]]
            step_tokens = sum(trained_tokens(b) for b in micro_batches)
            denominator = strategy.loss_denominator(step_tokens)  # this step's trained tokens on all ranks
            loss_sum_seen = 0.0
            for batch in micro_batches:
                with autocast(precision):
                    loss_sum, _ = causal_lm_loss_sum(train_model, batch, fused_linear_ce=fused_linear_ce)
                    loss = loss_sum / denominator
                strategy.backward(scaler.scale(loss) if scaler else loss)
                loss_sum_seen += float(loss_sum.detach())
            if scaler:
                scaler.unscale_(optimizer)
            grad_norm = strategy.clip_grad_norm(params, config.max_grad_norm)
            if scaler:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            input_tokens = int(strategy.sum_across_ranks(sum(input_token_count(b) for b in micro_batches)))
            step_tokens = int(strategy.sum_across_ranks(step_tokens))
            step_loss = strategy.sum_across_ranks(loss_sum_seen) / max(step_tokens, 1)  # mean over the global step
            if strategy.any_rank(stop.requested) and not stop.requested:
                stop.request("stopped on another rank")
            epoch_float = epoch + (group_index + 1) / len(groups)
            logger.step(step, step_loss, float(grad_norm), scheduler.get_last_lr()[0], input_tokens, step_tokens,
                        epoch_float, log_now=step % config.logging_steps == 0 or step == total_steps)
            if eval_samples and config.eval_strategy != "no" and (step % eval_every == 0 or step == total_steps):
                logger.eval(step, evaluate(), epoch_float)
            at_save = config.save_strategy != "no" and step % config.save_steps == 0
            if at_save or (stop.requested and config.save_strategy != "no"):
                position = {"step": step, "epoch": epoch, "group": group_index + 1, "total_steps": total_steps}
                folder = strategy.save_checkpoint(
                    lambda save_fn, optimizer_state: ckpt.save_checkpoint(
                        output_dir, step, save_model=save_fn, optimizer=optimizer_state, scheduler=scheduler,
                        trainer_state=position, save_only_model=config.save_only_model,
                        total_limit=config.save_total_limit),
                    lambda target: method.save(model, target), optimizer)
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
                                model_path=model_path, run=run, stage="sft")
    losses = [m["loss"] for m in metrics if m.get("loss") is not None]
    logger.event("completed", step=step, output_dir=str(output_dir))
    logger.info(f"done: {step} steps, final loss {losses[-1] if losses else float('nan'):.4f}, "
                f"output in {output_dir}")
    return run.update_status(state="completed", step=step, finished_at=time.time(), exit_reason="completed",
                             final_loss=losses[-1] if losses else None, runtime_s=logger.elapsed(),
                             train_runtime_s=train_runtime, num_input_tokens_seen=logger.input_tokens_seen,
                             num_trained_tokens=logger.trained_tokens_seen)


def autocast(precision):
    if precision.autocast_dtype is None:
        return torch.autocast("cpu", enabled=False)
    return torch.autocast(precision.device.type, dtype=precision.autocast_dtype)


def input_token_count(batch: dict) -> int:
    """Real (non-padding) input tokens; packed rows carry no attention mask and no padding."""
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else int(batch["input_ids"].numel())


def to_device(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the detached training process."""
    from engine.api import load_config

    parser = argparse.ArgumentParser(description="Run supervised fine-tuning from a YAML config.")
    parser.add_argument("config", help="the run's sft.yaml")
    parser.add_argument("--run-dir", help="run folder (default: the config's folder)")
    args = parser.parse_args(argv)
    announce_rank()
    run = RunDir(Path(args.run_dir) if args.run_dir else Path(args.config).resolve().parent)
    stop = StopFlag()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.request(signal.Signals(signum).name))
    # Under torchrun only rank 0 writes the run folder, and the pid to signal is torchrun's: it forwards a stop
    # to every rank, and the ranks agree on the step to stop at.
    rank = int(os.environ.get("RANK", "0"))
    pid = os.getppid() if os.environ.get("TORCHELASTIC_RUN_ID") else os.getpid()
    if rank == 0:
        run.update_status(state="running", pid=pid, started_at=run.read_status().get("started_at") or time.time())
    prefix = f"rank {rank}: " if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
    try:
        config = load_config(args.config)
        status = train(config, run, stop=stop)
    except EngineError as exc:
        record_failure(run, prefix + str(exc))  # any rank: the one that failed knows why
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # noqa: BLE001 - record every death in status.json before exiting
        record_failure(run, f"{prefix}{type(exc).__name__}: {exc}")
        traceback.print_exc()
        return 1
    return 0 if status.get("state") in ("completed", "stopped") else 1


def announce_rank() -> None:
    """Under torchrun, one line from every rank: the launcher prefixes it, so train.log shows each rank started."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        print(f"rank {os.environ.get('RANK', '?')} of {world} started (pid {os.getpid()})", file=sys.stderr,
              flush=True)


def record_failure(run: RunDir, reason: str) -> None:
    run.append_event("failed", reason=reason)
    run.update_status(state="failed", finished_at=time.time(), exit_reason=reason)


if __name__ == "__main__":
    sys.exit(main())
