"""Learning-rate schedules with linear warmup (cosine, linear, constant), as a LambdaLR so its state saves."""

from __future__ import annotations

import math

import torch


def warmup_steps_for(total_steps: int, warmup_steps: int, warmup_ratio: float) -> int:
    return warmup_steps if warmup_steps > 0 else math.ceil(total_steps * warmup_ratio)


def lr_lambda(kind: str, total_steps: int, warmup: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1) if warmup else 1.0
        if kind in ("constant", "constant_with_warmup"):
            return 1.0
        progress = (step - warmup) / max(1, total_steps - warmup)
        progress = min(1.0, progress)
        if kind == "linear":
            return max(0.0, 1.0 - progress)
        return 0.5 * (1.0 + math.cos(math.pi * progress))  # cosine

    return factor


def build_scheduler(optimizer, kind: str, total_steps: int, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(kind, total_steps, warmup))
