"""Pre-flight: time a few real optimizer steps of a run before it is started, and say whether it fits.

    python -m engine.recipes.measure CONFIG.yaml [--steps 3]      (engine.api.measure_steps starts it)

The run's own components do the work (Session, the stage recipe's setup(), StepPlan and Stepper from the training
shell), on the device this process sees, one process. The first step takes the longest micro-batches of the epoch
(it warms up, and its peak memory is the run's worst case); the next ``steps`` steps, the next-longest, are timed.
The prediction scales the measured throughput (padded tokens per second) to every step of the run and adds the
measured start-up (imports, model load, data encoding), which the real run pays too.

A micro-batch that does not fit (out of memory, or a peak above the memory the device has free) is halved, with
gradient_accumulation_steps raised to keep the effective batch, until one fits: that is the proposal.

Nothing is written into the run's output_dir or run folder: the logger writes into a temporary folder that is
removed afterwards. The last line on stdout is JSON: {"measurement": {...}} or {"error": "..."}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from engine.config import TrainConfig, load_config
from engine.errors import EngineError
from engine.measurement import Measurement
from engine.messages import Message
from engine.recipes import recipe
from engine.parallel.single import SingleDevice
from engine.rundir import RunDir
from engine.training.loop import RunLogger
from engine.training.session import Session
from engine.training.shell import StepPlan, make_stepper

# A peak above this share of the memory free to the run counts as not fitting: the allocator, other processes and
# the checkpoint save (a copy of the trained weights) need the rest.
FIT_SHARE = 0.9
# Timed steps stop once they took this long (after at least one): a slow step (a real model on a busy CPU, ~70 s
# measured on 2 shared cores) is measured well enough by one or two, and the user is waiting.
TIME_BUDGET_S = 30.0


class DoesNotFit(Exception):
    """The micro-batch ran out of memory, or its peak went above what the device has free (``message``: the same
    as an engine.messages.Message)."""

    def __init__(self, text: str, message: Message | None = None) -> None:
        super().__init__(text)
        self.message = message or Message("measure.error", text, {"error": text})


def sample_tokens(sample: dict) -> int:
    """Tokens a sample puts through the model: its longest input_ids (a pair's chosen or rejected side)."""
    lengths = [len(value) for key, value in sample.items() if key.endswith("input_ids")]
    return max(lengths) if lengths else 0


def group_tokens(group: list[list[int]], samples: list[dict]) -> int:
    """Padded tokens of an optimizer step: each micro-batch is as long as its longest sample."""
    return sum(len(micro) * max((sample_tokens(samples[i]) for i in micro), default=0) for micro in group)


def _memory_limit(device: torch.device) -> int | None:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device))
    try:
        import psutil

        return int(psutil.virtual_memory().available + psutil.Process().memory_info().rss)
    except Exception:  # noqa: BLE001 - without psutil the fit check is the out-of-memory error alone
        return None


def _peak(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(exc).lower()


class Bench:
    """The run's task, model and optimizer, stepped on chosen groups for one micro-batch size at a time."""

    def __init__(self, config: TrainConfig, session: Session, task) -> None:
        self.config, self.session, self.task = config, session, task
        self.strategy = SingleDevice()
        self.model = self.strategy.wrap(task.model, config)

    def plan(self, micro_batch: int, grad_accum: int) -> tuple[TrainConfig, StepPlan]:
        config = dataclasses.replace(self.config, per_device_train_batch_size=micro_batch,
                                     gradient_accumulation_steps=grad_accum)
        return config, StepPlan.build(config, self.task, self.strategy)

    def run(self, config: TrainConfig, plan: StepPlan, groups: list,
            limit: int | None) -> list[tuple[list, float, float]]:
        """Step through ``groups``; (group, seconds, CPU seconds of this process) of each timed step. The first is
        a warm-up (first calls allocate and pick kernels) and is timed only when it alone takes longer than the
        time budget."""
        stepper = make_stepper(config, self.task, plan, self.session, self.strategy, self.model)
        optimizer, scheduler = stepper.optimizer, stepper.scheduler
        device = self.session.device
        timed: list[tuple[list, float, float]] = []
        try:
            for index, group in enumerate(groups):
                began, cpu_began = time.perf_counter(), time.process_time()
                stepper.step(group)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                took, cpu_took = time.perf_counter() - began, time.process_time() - cpu_began
                if index == 0 and limit is not None and _peak(device) > FIT_SHARE * limit:
                    raise peak_too_high(_peak(device), limit)
                if index or took > TIME_BUDGET_S:  # a step this slow is its compute, not first-call costs
                    timed.append((group, took, cpu_took))
                if sum(seconds for _, seconds, _ in timed) > TIME_BUDGET_S:
                    break
        except Exception as exc:
            if not isinstance(exc, DoesNotFit) and not _is_oom(exc):
                raise
            if isinstance(exc, DoesNotFit):
                raise
            raise DoesNotFit(str(exc).splitlines()[0][:200]) from None
        finally:
            optimizer.zero_grad(set_to_none=True)
            del optimizer, scheduler, stepper
            if device.type == "cuda":
                torch.cuda.empty_cache()
        return timed


def peak_too_high(peak: int, limit: int) -> DoesNotFit:
    """The first step's peak memory is above FIT_SHARE of what the device has free."""
    fields = {"peak": f"{peak / 2**30:.1f}", "share": f"{FIT_SHARE:.0%}", "free": f"{limit / 2**30:.1f}"}
    text = f"peak {fields['peak']} GiB is above {fields['share']} of the {fields['free']} GiB free"
    return DoesNotFit(text, Message("measure.peak_above_free", text, fields))


def fit_micro_batch(attempt, micro: int, accum: int):
    """``attempt(micro, accum)`` until it does not raise DoesNotFit, halving the micro-batch and raising the
    accumulation so that micro x accum (the effective batch) stays. (micro, accum, result, reason): reason is
    the first micro-batch that did not fit, as an engine.messages.Message (None when the asked one fits);
    DoesNotFit when not even a micro-batch of 1 fits."""
    effective, reason = micro * accum, None
    while True:
        try:
            return micro, accum, attempt(micro, accum), reason
        except DoesNotFit as exc:
            if micro == 1:
                raise
            reason = reason or Message("measure.micro_batch_does_not_fit", f"micro-batch {micro} does not fit ({exc})",
                                       {"micro": micro, "why": exc.message})
            micro //= 2
            accum = math.ceil(effective / micro)


def choose_groups(plan: StepPlan, samples: list[dict], steps: int) -> list:
    """The warm-up step (the epoch's longest) and the ``steps`` next-longest, repeating when the epoch is short."""
    ranked = sorted(plan.groups(0), key=lambda group: -group_tokens(group, samples))
    wanted = steps + 1
    return [ranked[i % len(ranked)] for i in range(wanted)]


def run_tokens(plan: StepPlan, samples: list[dict]) -> tuple[float, int]:
    """(padded tokens of the whole run, its optimizer steps), from epoch 0's steps repeated over the run."""
    epoch_tokens = [group_tokens(group, samples) for group in plan.groups(0)]
    mean = sum(epoch_tokens) / max(len(epoch_tokens), 1)
    return mean * plan.total_steps, plan.total_steps


def measure(config: TrainConfig, steps: int = 3) -> Measurement:
    """Measure the run ``config`` describes on this process's device (see the module docstring)."""
    from engine.runstatus import process_start_time

    started = process_start_time(os.getpid()) or time.time()
    scratch = Path(tempfile.mkdtemp(prefix="lfa-measure-"))
    notes: list[Message] = []
    try:
        # Nothing of the real run is touched: logs, and any folder a recipe makes, go to the scratch folder.
        config = dataclasses.replace(config, output_dir=str(scratch / "output"), report_to="none",
                                     resume_from_checkpoint=None)
        run = RunDir(scratch / "run")
        run.path.mkdir(parents=True)
        session = Session.open(config, run, SingleDevice(), RunLogger(run))
        task = recipe(config.stage).setup(session)
        bench = Bench(config, session, task)
        startup = time.time() - started
        limit = _memory_limit(session.device)
        attempts = []

        def attempt(micro: int, accum: int):
            if session.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(session.device)
            measured_config, plan = bench.plan(micro, accum)
            groups = choose_groups(plan, task.train_samples, steps)
            # On a CPU the peak resident size only grows: after a first try it says nothing about a smaller one.
            check = limit if session.device.type == "cuda" or not attempts else None
            attempts.append(micro)
            return plan, bench.run(measured_config, plan, groups, check)

        asked = config.per_device_train_batch_size
        try:
            micro, accum, (plan, timed), reason = fit_micro_batch(attempt, asked, config.gradient_accumulation_steps)
        except DoesNotFit as exc:
            return _not_fitting(session, config, bench.plan(1, config.gradient_accumulation_steps)[1], startup,
                                limit, exc.message, notes)
        times = [seconds for _, seconds, _ in timed]
        tokens_per_s = sum(group_tokens(g, task.train_samples) for g, _, _ in timed) / max(sum(times), 1e-9)
        # Steps on a GPU wait for the device: their CPU time says nothing about other work on the machine.
        cpu_share = sum(cpu for _, _, cpu in timed) / max(sum(times), 1e-9) if session.device.type == "cpu" else None
        total_tokens, total_steps = run_tokens(plan, task.train_samples)
        predicted = startup + total_tokens / max(tokens_per_s, 1e-9)
        strategy = _strategy_name(config)
        if strategy != "single":
            notes.append(one_device_note(strategy))
        proposal = None
        if micro != asked:
            proposal = {"per_device_train_batch_size": micro, "gradient_accumulation_steps": accum}
            reason = proposal_reason(reason, micro, accum)
        return Measurement(device=str(session.device), micro_batch=micro, grad_accum=accum, steps_timed=len(times),
                           step_s=sum(times) / max(len(times), 1), tokens_per_s=tokens_per_s, startup_s=startup,
                           peak_bytes=_peak(session.device), limit_bytes=limit, total_steps=total_steps,
                           predicted_s=predicted, fits=True, proposal=proposal, reason=reason.text if reason else "",
                           notes=[note.text for note in notes], reason_message=reason.to_dict() if reason else None,
                           note_messages=[note.to_dict() for note in notes], cpu_share=cpu_share)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _strategy_name(config: TrainConfig) -> str:
    from engine.parallel import strategy_name

    return strategy_name(config, int(os.environ.get("WORLD_SIZE", "1")))


def proposal_reason(does_not_fit: Message, micro: int, accum: int) -> Message:
    """Why the proposal: the micro-batch that did not fit, and the one that does with its accumulation."""
    return Message("measure.proposal",
                   f"{does_not_fit}; {micro} fits, and gradient_accumulation_steps {accum} keeps the effective batch",
                   {"does_not_fit": does_not_fit, "micro": micro, "accum": accum})


def one_device_note(strategy: str) -> Message:
    return Message("measure.one_device", f"measured on one device; the run uses {strategy}", {"strategy": strategy})


def none_fits_note(why: Message) -> Message:
    return Message("measure.none_fits", f"even a micro-batch of 1 does not fit ({why}): lower cutoff_len, use LoRA, "
                   "or choose a device with more memory", {"why": why})


def _not_fitting(session, config, plan, startup, limit, why: Message, notes: list[Message]) -> Measurement:
    notes.append(none_fits_note(why))
    return Measurement(device=str(session.device), micro_batch=1, grad_accum=config.gradient_accumulation_steps,
                       steps_timed=0, step_s=0.0, tokens_per_s=0.0, startup_s=startup,
                       peak_bytes=_peak(session.device), limit_bytes=limit, total_steps=plan.total_steps,
                       predicted_s=0.0, fits=False, reason=why.text, notes=[note.text for note in notes],
                       reason_message=why.to_dict(), note_messages=[note.to_dict() for note in notes])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time a few real training steps of a config (pre-flight).")
    parser.add_argument("config", help="the training YAML")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps to time after one warm-up step")
    args = parser.parse_args(argv)
    try:
        result = measure(load_config(args.config), steps=max(1, args.steps))
    except EngineError as exc:
        coded = {"error_message": exc.message.to_dict()} if exc.message else {}
        print(json.dumps({"error": str(exc), **coded}), flush=True)
        return 2
    except Exception as exc:  # noqa: BLE001 - the caller shows the reason; a traceback helps in the log
        import traceback

        traceback.print_exc()
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    print(json.dumps({"measurement": result.to_dict()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
