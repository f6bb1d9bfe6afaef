"""Learning-rate schedules: every Transformers ``lr_scheduler_type`` that steps with the optimizer, as a LambdaLR.

The factors are the ones ``transformers.get_scheduler`` computes (tests compare them step by step), including its
edges: warmup starts at 0 (step / warmup), ``constant`` ignores warmup, ``polynomial`` ends at ``lr_end``.
``lr_scheduler_kwargs`` passes each schedule's own arguments (``num_cycles``, ``min_lr_rate``, ...) as there, and
``warmup_stable_decay`` fills its phase lengths as LLaMA-Factory does (a third of the post-warmup steps stable, the
rest decaying). A LambdaLR's state is plain numbers, so a checkpoint's schedule loads with weights_only=True.

Two Transformers schedules are refused by name: ``reduce_lr_on_plateau`` and ``greedy`` react to eval or loss
values rather than to the step, and the training shell steps schedules once per optimizer step.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from engine.config.choices import REFUSED_SCHEDULES, SCHEDULE_KWARGS, SCHEDULES, scheduler_kwargs
from engine.errors import ConfigError

Factor = Callable[[int], float]


def warmup_steps_for(total_steps: int, warmup_steps: int, warmup_ratio: float) -> int:
    return warmup_steps if warmup_steps > 0 else math.ceil(total_steps * warmup_ratio)


def lr_lambda(kind: str, total_steps: int, warmup: int, kwargs: dict[str, Any] | None = None,
              learning_rate: float = 1.0) -> Factor:
    """The factor applied to each group's learning rate at a step (0-based), as Transformers computes it."""
    kwargs = dict(kwargs or {})
    if kind == "constant":
        return lambda step: 1.0
    if kind == "warmup_stable_decay":
        return _wsd(total_steps, warmup, kwargs)
    if kind == "cosine_warmup_with_min_lr":
        return _cosine_warmup_min_lr(total_steps, warmup, kwargs, learning_rate)
    if kind not in SCHEDULE_KWARGS:
        raise ConfigError(f"lr_scheduler_type {kind!r} is not one of {', '.join(SCHEDULES)}.")
    after = _after_warmup(kind, total_steps, warmup, kwargs, learning_rate)

    def factor(step: int) -> float:
        if step < warmup:
            return step / max(1, warmup)
        return after(step)

    return factor


def _after_warmup(kind: str, total: int, warmup: int, kwargs: dict[str, Any], learning_rate: float) -> Factor:
    def progress(step: int) -> float:
        return (step - warmup) / max(1, total - warmup)

    if kind == "constant_with_warmup":
        return lambda step: 1.0
    if kind == "linear":
        return lambda step: max(0.0, (total - step) / max(1, total - warmup))
    if kind in ("cosine", "cosine_with_min_lr"):
        cycles = float(kwargs.get("num_cycles", 0.5))
        floor = _min_lr_rate(kwargs, learning_rate) if kind == "cosine_with_min_lr" else 0.0
        return lambda step: max(0.0, _cosine(cycles, progress(step)) * (1 - floor) + floor)
    if kind == "cosine_with_restarts":
        cycles = float(kwargs.get("num_cycles", 1))

        def restarts(step: int) -> float:
            done = progress(step)
            return 0.0 if done >= 1.0 else max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((cycles * done) % 1.0))))

        return restarts
    if kind == "polynomial":
        return _polynomial(total, warmup, float(kwargs.get("lr_end", 1e-7)), float(kwargs.get("power", 1.0)),
                           learning_rate)
    # inverse_sqrt
    timescale = kwargs.get("timescale") or warmup or 10_000
    return lambda step: 1.0 / math.sqrt((step + timescale - warmup) / timescale)


def _cosine(cycles: float, progress: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * cycles * 2.0 * progress))


def _min_lr_rate(kwargs: dict[str, Any], learning_rate: float) -> float:
    if kwargs.get("min_lr") is not None:
        return float(kwargs["min_lr"]) / learning_rate
    if kwargs.get("min_lr_rate") is None:
        raise ConfigError("cosine_with_min_lr needs min_lr or min_lr_rate in lr_scheduler_kwargs.")
    return float(kwargs["min_lr_rate"])


def _polynomial(total: int, warmup: int, lr_end: float, power: float, lr_init: float) -> Factor:
    def factor(step: int) -> float:
        if step > total:
            return lr_end / lr_init
        remaining = 1 - (step - warmup) / max(1, total - warmup)
        return ((lr_init - lr_end) * remaining ** power + lr_end) / lr_init

    return factor


def _cosine_warmup_min_lr(total: int, warmup: int, kwargs: dict[str, Any], learning_rate: float) -> Factor:
    """Transformers' cosine_warmup_with_min_lr: warmup counts from step + 1 (or from warmup_lr_rate), and the
    cosine progress is one step ahead of plain cosine's."""
    cycles, floor = float(kwargs.get("num_cycles", 0.5)), _min_lr_rate(kwargs, learning_rate)
    start = kwargs.get("warmup_lr_rate")

    def factor(step: int) -> float:
        if step < warmup:
            if start is None:
                return (step + 1.0) / max(1.0, warmup)
            return float(start) + (1.0 - float(start)) * step / max(1, warmup - 1)
        done = (step - warmup + 1.0) / max(1.0, total - warmup)
        return max(0.0, _cosine(cycles, done) * (1 - floor) + floor)

    return factor


def _wsd(total: int, warmup: int, kwargs: dict[str, Any]) -> Factor:
    """Warmup, stable, decay: LLaMA-Factory fills num_stable_steps (a third of what follows warmup) and
    num_decay_steps (the rest) when lr_scheduler_kwargs leaves them out."""
    remaining = total - warmup
    stable = int(kwargs.get("num_stable_steps", remaining // 3))
    decay = int(kwargs.get("num_decay_steps", remaining - remaining // 3))
    warm_shape, decay_shape = kwargs.get("warmup_type", "linear"), kwargs.get("decay_type", "cosine")
    floor, cycles = float(kwargs.get("min_lr_ratio", 0.0)), float(kwargs.get("num_cycles", 0.5))

    def shaped(shape: str, progress: float, rising: bool) -> float:
        if shape == "linear":
            value = progress if rising else 1.0 - progress
        elif shape == "cosine":
            value = 0.5 * (1.0 - math.cos(math.pi * progress)) if rising else _cosine(cycles, progress)
        else:  # 1-sqrt
            value = 1.0 - math.sqrt(1.0 - progress) if rising else 1.0 - math.sqrt(progress)
        return max(0.0, value * (1.0 - floor) + floor)

    def factor(step: int) -> float:
        if step < warmup:
            return shaped(warm_shape, step / max(1, warmup), True)
        if step < warmup + stable:
            return 1.0
        if step < warmup + stable + decay:
            return shaped(decay_shape, (step - warmup - stable) / max(1, decay), False)
        return floor

    return factor


def build_scheduler(optimizer, kind: str, total_steps: int, warmup: int, kwargs: Any = None,
                    learning_rate: float | None = None):
    """A LambdaLR with the schedule's factor for every parameter group (LoRA+ groups keep their own base rate)."""
    import torch

    if kind in REFUSED_SCHEDULES:
        raise ConfigError(f"lr_scheduler_type: {kind} {REFUSED_SCHEDULES[kind]}")
    rate = learning_rate if learning_rate is not None else optimizer.defaults.get("lr", 1.0)
    factor = lr_lambda(kind, total_steps, warmup, scheduler_kwargs(kwargs), rate)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
