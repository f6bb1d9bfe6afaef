"""The training shell every stage runs in, read top to bottom.

    status = shell.train(config, run, recipe.setup)

A recipe's ``setup(session) -> Task`` declares its data, its model(s) and its loss per micro-batch. Everything
else is here, once: the strategy (single, DDP, FSDP2, DeepSpeed, Ulysses SP), step planning after the data is
sharded across ranks, the optimizer step (accumulation, unit-normalised loss, clipping, loss scaling), divergence,
checkpoints and resume through the strategy, stop agreement across ranks, logging and the final save.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.config import TrainConfig, validate
from engine.data.tokenized import TokenizedDataSaved
from engine.errors import ConfigError, EngineError
from engine.messages import Message
from engine.ownership import claim_output_dir, record_outputs, recording_outputs
from engine.parallel import setup_strategy
from engine.runstatus import Resumed, RunState, RunStatus
from engine.rundir import RunDir, metric_row
from engine.training import checkpoint as ckpt
from engine.training.batching import PaddedBatcher, build_batcher
from engine.training.loop import RunLogger, StopFlag
from engine.training.loss import trained_tokens
from engine.training.optim import build_optimizer
from engine.training.schedule import build_scheduler, warmup_steps_for
from engine.training.session import Session
from engine.training.setup import write_run_outputs
from engine.training.task import StepContext, Task


class Diverged(EngineError):
    """The loss or the gradient norm stopped being a finite number."""


def train(config: TrainConfig, run: RunDir, setup, *, on_log=None, stop: StopFlag | None = None) -> RunStatus:
    """Train the task ``setup`` declares, recording everything in ``run``. Returns the final status (the main
    rank's; other ranks return what they know)."""
    stop = stop or StopFlag()
    problems = validate(config)
    if problems:
        raise ConfigError("The config has problems:\n- " + "\n- ".join(problems))
    strategy = setup_strategy(config)
    logger = RunLogger(run, on_log, enabled=strategy.is_main)
    if strategy.is_main:
        from engine.trackers import open_trackers

        logger.trackers = open_trackers(config, run.path, on_error=logger.note)
    try:
        return _train(config, run, setup, strategy, logger, stop)
    finally:
        if logger.trackers is not None:
            logger.trackers.close()
        strategy.close()


def _train(config: TrainConfig, run: RunDir, setup, strategy, logger: RunLogger, stop: StopFlag) -> RunStatus:
    # 1. The stage's data, model(s) and loss; resumed weights go in before wrapping (FSDP2 shards them).
    session = Session.open(config, run, strategy, logger)
    try:
        task = setup(session)
    except TokenizedDataSaved as saved:  # a preprocessing run: the data is the result
        logger.event("tokenized_saved", path=str(config.tokenized_path))
        logger.info(str(saved))
        return finish(run, logger, RunState.COMPLETED, 0, str(saved))
    output_dir = Path(config.output_dir)
    if strategy.is_main:  # the model and data have loaded: now an earlier run's results may go (overwrite)
        claim_output_dir(output_dir, run.run_id, overwrite=config.overwrite_output_dir,
                         resume=bool(config.resume_from_checkpoint))
        ckpt.sweep_partial(output_dir)
    strategy.barrier()
    save = task.save or (lambda folder: session.method.save(task.model, folder))
    resume_from = ckpt.resolve_resume(config.resume_from_checkpoint, output_dir)
    if resume_from:
        (task.load or (lambda folder: session.method.load_for_resume(task.model, folder)))(resume_from)
    train_model = strategy.wrap(task.model, config)
    for frozen in task.frozen:
        strategy.wrap_frozen(frozen)

    # 2. Steps planned on this rank's share of the data; optimizer and schedule over them.
    plan = StepPlan.build(config, task, strategy)
    stepper = make_stepper(config, task, plan, session, strategy, train_model)
    optimizer, scheduler = stepper.optimizer, stepper.scheduler
    # each process takes its share of a step's micro-batches: how many share them is part of the grouping
    groups = [getattr(strategy, "dp_size", strategy.world_size), plan.batcher.groups(0)]
    digests = ckpt.data_digests(task.train_samples, groups, session.rows_digest)

    # 3. Resume: optimizer, schedule, RNG and the data position of the newest complete checkpoint.
    position = Position()
    resumes = []
    if resume_from:
        state = ckpt.load_training_state(resume_from, strategy.checkpoint_optimizer(optimizer), scheduler)
        changed = ckpt.resume_note(state, digests, plan.total_steps, resume_from)
        if "data_digest" not in state:
            logger.note(f"{resume_from.name} was saved by an earlier version that kept no digest of its data: "
                        "whether the same samples and batches follow cannot be checked (an upgrade may have changed "
                        "the val_size rows, truncation or pre-training rows).")
        if changed:
            logger.note(changed)
        position = Position(state["step"], state["epoch"], state["group"])
        resumes = resumed_record(run, logger, position.step, state, resume_from)
        carried = carry_log_history(run, state, position.step) if strategy.is_main else 0
        if carried:
            logger.event("metrics_carried", rows=carried, checkpoint=str(resume_from))
        redone = resumes[-1].redone
        logger.event("resumed", checkpoint=str(resume_from), step=position.step, redone=redone)
        logger.info(f"resumed from {resume_from} at step {position.step}"
                    + (f"; steps {position.step + 1}-{position.step + redone} are trained again" if redone else ""))
    elif config.resume_from_checkpoint:
        logger.note(f"resume_from_checkpoint: no complete checkpoint in {output_dir}; starting from step 0.")
    if strategy.is_main:
        with recording_outputs(output_dir, run.run_id):
            _note(logger, session.method.begin(task.model, config, output_dir, resumed=bool(resume_from)))
    # An ETA left by an interrupted attempt is no estimate of this one: none until this attempt logged a step.
    logger.status(state=RunState.RUNNING, step=position.step, total_steps=plan.total_steps, eta_s=None,
                  attempt_elapsed_s=0.0, **({"resumes": resumes} if resumes else {}),
                  output_dir=str(output_dir), template=session.template.name, base_model=session.model_path,
                  device=str(session.device), parallel=strategy.name, world_size=strategy.world_size)

    def checkpoint(step: int, epoch: int, group: int) -> None:
        trainer_state = {"step": step, "epoch": epoch, "group": group, "total_steps": plan.total_steps,
                         "run_id": run.run_id, "elapsed_s": round(logger.elapsed(), 2), **digests,
                         # the rows logged so far, as Hugging Face checkpoints keep them: a resume into another
                         # run folder charts the whole run
                         "log_history": [row for row in run.read_metrics() if row["step"] <= step]}
        if strategy.is_main:  # named before it is written: a folder of it is this run's even if the write dies
            record_outputs(output_dir, run.run_id, [f"checkpoint-{step}"])
        folder = strategy.save_checkpoint(
            lambda save_fn, optimizer_state: ckpt.save_checkpoint(
                output_dir, step, save_model=save_fn, optimizer=optimizer_state, scheduler=scheduler,
                trainer_state=trainer_state, save_only_model=config.save_only_model,
                total_limit=config.save_total_limit),
            save, optimizer)
        logger.event("checkpoint_saved", step=step, path=str(folder))
        logger.status(last_checkpoint=str(folder))

    # 4. The loop: one optimizer step per group of micro-batches.
    eval_every = config.eval_steps or config.logging_steps * 10
    logger.start_timer(position.step, plan.total_steps)
    step, epoch, start_group = position.step, position.epoch, position.group
    # The stop decision is taken once per step, by every rank together, and only that decision is acted on: a
    # signal landing between the agreement and the break would otherwise end one rank a step early (and hang the
    # others in their next collective).
    stopping = False
    while step < plan.total_steps and not stopping:
        groups = plan.groups(epoch)
        for group_index in range(start_group, len(groups)):
            result = stepper.step(groups[group_index])
            step += 1
            epoch_float = epoch + (group_index + 1) / len(groups)
            epoch_end = group_index == len(groups) - 1
            logger.step(step, result.loss, result.grad_norm, scheduler.get_last_lr()[0], result.input_tokens,
                        result.trained_tokens, epoch_float, extra=result.metrics,
                        log_now=step % config.logging_steps == 0 or step == plan.total_steps or result.diverged)
            if result.diverged:
                raise Diverged(diverged_message(step, result, output_dir))
            stopping = strategy.any_rank(stop.requested or (strategy.is_main and bool(run.stop_requested())))
            if stopping and not stop.requested:
                stop.request(run.stop_requested() or "stopped on another rank")
            last = step >= plan.total_steps
            if task.eval_samples and due(config.eval_strategy, step, eval_every, epoch_end, last):
                loss, metrics = stepper.evaluate()
                logger.eval(step, loss, epoch_float, metrics)
            if config.save_strategy != "no" and (due(config.save_strategy, step, config.save_steps, epoch_end,
                                                     False) or stopping):
                checkpoint(step, epoch, group_index + 1)
            if last or stopping:
                break
        else:
            epoch, start_group = epoch + 1, 0

    train_runtime = logger.elapsed()
    if stopping:
        logger.event("stopped", step=step)
        if strategy.is_main:
            run.clear_stop_request()
        said = f"stopped by request ({stop.reason}) at step {step}"
        return finish(run, logger, RunState.STOPPED, step, said,
                      exit_message=Message("run.stopped", said, {"reason": stop.reason, "step": step}).to_dict())

    # 5. The result: the trained weights, the tokenizer with its template, what produced them, the loss plot.
    with recording_outputs(output_dir, run.run_id, enabled=strategy.is_main):
        try:
            strategy.save_model(save, output_dir)
        except OSError as exc:
            raise EngineError(f"Training finished but the result could not be written to {output_dir}: "
                              f"{exc.strerror or exc}. The newest complete checkpoint there is intact; free space "
                              "or fix permissions, then `lf-assistant resume-train`.") from None
        closing = task.closing(output_dir, stepper) if task.closing else {}  # every rank: it may run the model
        if not strategy.is_main:
            return RunStatus(state=RunState.COMPLETED, step=step)
        metrics = write_run_outputs(output_dir, tokenizer=session.tokenizer, template=session.template,
                                    config=config, model_path=session.model_path, run=run, stage=config.stage)
        final = {**_final_metrics(metrics, task), **closing}
        _note(logger, session.method.end(task.model, config, output_dir))
    losses = [m["loss"] for m in metrics if m.get("loss") is not None]
    logger.event("completed", step=step, output_dir=str(output_dir))
    figures = "".join(f", {key} {value:.4f}" for key, value in final.items())
    logger.info(f"done: {step} steps, final loss {losses[-1] if losses else float('nan'):.4f}{figures}, "
                f"output in {output_dir}")
    return finish(run, logger, RunState.COMPLETED, step, "completed", final_loss=losses[-1] if losses else None,
                  final_metrics=final, train_runtime_s=train_runtime)


def resumed_record(run: RunDir, logger: RunLogger, from_step: int, state: dict | None = None,
                   checkpoint: Path | None = None) -> list[Resumed]:
    """The run's resumes with this one added, from the status the interrupted attempt left: this run folder's
    when the checkpoint is this run's, else the status of the run that saved it (a resume into a new folder),
    when its folder lies beside this one. How far that attempt got and its training time, which this attempt's
    elapsed time goes on from (from the checkpoint itself when the other run's folder is gone)."""
    before = run.read_status()
    saver = (state or {}).get("run_id")
    attempt = before if saver in (None, run.run_id) else _saver_status(run, saver, checkpoint)
    reached = None
    if attempt is not None:
        saved = Path(attempt.last_checkpoint or "").name.removeprefix("checkpoint-")
        # logged every logging_steps, saved every save_steps: the further of the two is how far it is known to have got
        furthest = max(attempt.step, int(saved) if saved.isdigit() else 0)
        reached = furthest if furthest >= from_step else None  # a status that knows nothing of this checkpoint
    if reached is not None:
        logger.earlier_s = attempt.elapsed_s or 0.0
    else:
        carried = (state or {}).get("elapsed_s")
        plain = isinstance(carried, (int, float)) and not isinstance(carried, bool)
        logger.earlier_s = float(carried) if plain and 0 <= carried < 1e9 else 0.0
    return [*before.resumes, Resumed(from_step=from_step, reached_step=reached, at=time.time())]


def carry_log_history(run: RunDir, state: dict, from_step: int) -> int:
    """A resume into a run folder that has no metrics yet (a new run from another run's checkpoint): the rows the
    checkpoint kept, up to its step, become this run's first rows, so its loss chart starts where training
    started. Returns how many rows were carried. Rows read from the checkpoint are cleaned as the metrics file's
    are (numbers only, a whole-number step)."""
    history = state.get("log_history")
    if not isinstance(history, list) or run.read_metrics():
        return 0
    rows = [row for row in map(metric_row, history) if row is not None and 0 < row["step"] <= from_step]
    for row in rows:
        run.append_metric(row)
    return len(rows)


def _saver_status(run: RunDir, saver: object, checkpoint: Path | None) -> RunStatus | None:
    """The status of the run that saved ``checkpoint``, a folder beside ``run`` named by the checkpoint's run_id,
    when that run's output_dir is where the checkpoint lies (else None: nothing is known of that attempt)."""
    from engine.names import name_problem
    from engine.rundir import is_run_folder

    if checkpoint is None or name_problem(saver) is not None or not is_run_folder(run.path.parent / saver):
        return None
    status = RunDir(run.path.parent / saver).read_status()
    try:
        same = bool(status.output_dir) and Path(status.output_dir).resolve() == checkpoint.parent.resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    return status if same else None


def _note(logger: RunLogger, note: str | None) -> None:
    if note:
        logger.info(note)


def finish(run: RunDir, logger: RunLogger, state: RunState, step: int, reason: str, **fields) -> RunStatus:
    fields.setdefault("exit_message", None)  # an earlier attempt's reason is no reason for this end
    if not logger.enabled:
        return RunStatus(state=state, step=step, exit_reason=reason)
    elapsed = logger.elapsed()  # elapsed_s too: a resume goes on from it, and a stop comes between two logs
    return run.update_status(state=state, step=step, finished_at=time.time(), exit_reason=reason,
                             runtime_s=elapsed, elapsed_s=elapsed, attempt_elapsed_s=logger.attempt_elapsed(),
                             num_input_tokens_seen=logger.input_tokens_seen,
                             num_trained_tokens=logger.trained_tokens_seen, **fields)


def due(strategy: str, step: int, every: int, epoch_end: bool, last: bool) -> bool:
    """Whether an eval or a checkpoint is due now under ``strategy`` (steps | epoch | no)."""
    if strategy == "no":
        return False
    if strategy == "epoch":
        return epoch_end or last
    return step % every == 0 or last


def make_stepper(config: TrainConfig, task: Task, plan: StepPlan, session: Session, strategy,
                 train_model) -> "Stepper":
    """The optimizer ``config.optim`` names (through the strategy), its schedule over ``plan`` and the loss scaler,
    assembled into the Stepper that runs one optimizer step: for training and for the pre-flight alike."""
    params = [p for p in task.model.parameters() if p.requires_grad]
    optimizer = strategy.wrap_optimizer(build_optimizer(config, task.model))
    scheduler = build_scheduler(optimizer, config.lr_scheduler_type, plan.total_steps,
                                warmup_steps_for(plan.total_steps, config.warmup_steps, config.warmup_ratio),
                                config.lr_scheduler_kwargs, config.learning_rate)
    scaler = torch.amp.GradScaler("cuda") if session.precision.autocast_dtype == torch.float16 else None
    return Stepper(config, task, plan, session, train_model, optimizer, scheduler, scaler, params)


def diverged_message(step: int, result: StepResult, output_dir: Path) -> str:
    kept = ckpt.find_complete_checkpoints(output_dir)
    last = f"the newest complete checkpoint is {kept[-1].name}" if kept else "no checkpoint was saved before it"
    return (f"Training diverged at step {step}: loss {result.loss}, gradient norm {result.grad_norm}. The weights "
            f"were not updated with that step and no result was saved ({last}). Lower learning_rate, check "
            "max_grad_norm, or look for broken rows in the data.")


def _final_metrics(metrics: list[dict], task: Task) -> dict[str, float]:
    final: dict[str, float] = {}
    for name in task.summary_metrics:
        value = next((m[name] for m in reversed(metrics) if m.get(name) is not None), None)
        if value is not None:
            final[name] = value
    return final


@dataclass
class Position:
    step: int = 0
    epoch: int = 0
    group: int = 0


@dataclass
class StepPlan:
    """How the epochs become this rank's optimizer steps."""

    batcher: object
    strategy: object
    total_steps: int

    @classmethod
    def build(cls, config: TrainConfig, task: Task, strategy) -> StepPlan:
        if task.batching == "padded":
            batcher = PaddedBatcher(task.train_samples, task.collate, config.per_device_train_batch_size,
                                    config.gradient_accumulation_steps, config.seed)
        else:
            batcher = build_batcher(config, task.train_samples, task.collate,
                                    pad_token_id=getattr(task.collate, "pad_token_id", None))
        per_epoch = len(strategy.shard_groups(batcher.groups(0)))  # this rank's steps: the global batch is split
        if per_epoch == 0:
            raise EngineError("No training step can be formed from the data: it has no sample left after encoding.")
        total = config.max_steps if config.max_steps > 0 else math.ceil(config.num_train_epochs * per_epoch)
        return cls(batcher, strategy, max(total, 1))

    def groups(self, epoch: int) -> list:
        return self.strategy.shard_groups(self.batcher.groups(epoch))


@dataclass
class StepResult:
    loss: float
    grad_norm: float
    input_tokens: int
    trained_tokens: int
    metrics: dict[str, float]
    diverged: bool


class Stepper:
    """One optimizer step and the evaluation, for whichever task and strategy."""

    def __init__(self, config, task: Task, plan: StepPlan, session: Session, train_model, optimizer, scheduler,
                 scaler, params) -> None:
        strategy = plan.strategy
        self.config, self.task, self.plan, self.strategy, self.session = config, task, plan, strategy, session
        self.train_model, self.optimizer, self.scheduler, self.scaler = train_model, optimizer, scheduler, scaler
        self.params = params
        self.context = StepContext(sequence_sum=strategy.sequence_sum, sequence_parallel=strategy.sp_size > 1,
                                   replica_mean=lambda value: strategy.sum_across_ranks(value) / strategy.world_size)
        # Per-example units are replicated on every rank of a sequence-parallel group: count them once.
        self.counts = not task.per_example or strategy.sp_rank == 0

    def prepare(self, batch: dict) -> dict:
        """A collated micro-batch on the device, as this rank computes it (SP: its slice of the sequence)."""
        batch = {k: v.to(self.session.device, non_blocking=True) for k, v in batch.items()}
        return self.strategy.prepare_batch(batch)

    def units(self, batch: dict) -> int:
        return self.task.units(batch) if self.counts else 0

    def step(self, micro_ids: list[list[int]]) -> StepResult:
        strategy, autocast = self.strategy, self.session.precision
        collated = [self.plan.batcher.collate(ids) for ids in micro_ids]
        batches = [self.prepare(batch) for batch in collated]
        denominator = strategy.loss_denominator(sum(self.units(b) for b in batches))
        loss_seen, metrics = 0.0, {}
        for index, batch in enumerate(batches):
            with strategy.micro_batch(sync=index == len(batches) - 1):
                with autocast_context(autocast):
                    out = self.task.loss(self.train_model, batch, self.context)
                    loss = out.loss / denominator
                strategy.backward(self.scaler.scale(loss) if self.scaler else loss)
            # Every rank adds the same metric keys (they are all-reduced one by one); a rank that does not count
            # (a second sequence-parallel rank of per-example units) adds zeros.
            weight = 1.0 if self.counts else 0.0
            loss_seen += weight * float(out.loss.detach())
            for key, value in out.metrics.items():
                metrics[key] = metrics.get(key, 0.0) + weight * value
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        grad_norm = float(strategy.clip_grad_norm(self.params, self.config.max_grad_norm))
        step_loss = strategy.sum_across_ranks(loss_seen) / denominator
        diverged = not math.isfinite(step_loss) or (
            self.scaler is None and getattr(strategy, "grad_norm_before_step", True) and not math.isfinite(grad_norm))
        diverged = strategy.any_rank(diverged)
        if diverged:
            self.optimizer.zero_grad(set_to_none=True)  # never let a non-finite gradient into the weights
        elif self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if not diverged:
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        metrics = self.means({key: strategy.sum_across_ranks(value) for key, value in sorted(metrics.items())},
                             denominator)
        # Token counts from the whole micro-batches, once per replica (a sequence-parallel slice carries padding
        # to a multiple of the group size).
        first = strategy.sp_rank == 0
        inputs = int(strategy.sum_across_ranks(sum(input_token_count(b) for b in collated) if first else 0))
        trained = int(strategy.sum_across_ranks(sum(trained_tokens(b) for b in collated) if first else 0))
        return StepResult(step_loss, grad_norm, inputs, trained, metrics, diverged)

    def evaluate(self) -> tuple[float, dict[str, float]]:
        """The eval loss (per unit) and metrics. Every rank scores every eval sample: FSDP2 needs every rank in
        every forward, and sequence parallelism splits each one; the sums are normalised alike."""
        model, task, size = self.task.model, self.task, self.config.per_device_eval_batch_size
        model.eval()
        loss_sum, units, metrics = 0.0, 0, {}
        with torch.no_grad(), autocast_context(self.session.precision):
            for start in range(0, len(task.eval_samples), size):
                batch = self.prepare(task.collate(task.eval_samples[start:start + size]))
                out = task.loss(self.train_model, batch, self.context)
                weight = 1.0 if self.counts else 0.0
                loss_sum, units = loss_sum + weight * float(out.loss), units + int(weight) * task.units(batch)
                for key, value in out.metrics.items():
                    metrics[key] = metrics.get(key, 0.0) + weight * value
        model.train()
        total = max(self.strategy.sum_across_ranks(units), 1)
        sums = {key: self.strategy.sum_across_ranks(value) for key, value in sorted(metrics.items())}
        return self.strategy.sum_across_ranks(loss_sum) / total, self.means(sums, total)

    def means(self, sums: dict[str, float], units: float) -> dict[str, float]:
        if self.task.metric_means:
            return self.task.metric_means(sums, units)
        return {key: value / units for key, value in sums.items()}


def autocast_context(precision):
    if precision.autocast_dtype is None:
        return torch.autocast("cpu", enabled=False)
    return torch.autocast(precision.device.type, dtype=precision.autocast_dtype)


def input_token_count(batch: dict) -> int:
    """Real (non-padding) input tokens; packed rows carry no attention mask and no padding."""
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else int(batch["input_ids"].numel())
