"""One process, one device: the strategy every other one (ddp, fsdp2, deepspeed, ulysses) mirrors.

Each strategy module offers the same functions through a ``Strategy`` object, so the recipes never branch on it.
"""

from __future__ import annotations

from pathlib import Path

import torch


class SingleDevice:
    """No communication: every collective is the identity."""

    name = "single"
    world_size = 1
    rank = 0
    is_main = True

    def wrap(self, model, config):
        """Return the model to train (DDP/FSDP wrap here); the recipe keeps the unwrapped one for saving."""
        return model

    def shard_groups(self, groups: list) -> list:
        """This rank's share of the epoch's optimizer-step groups of sample indices."""
        return groups

    def sum_across_ranks(self, value: float) -> float:
        return value

    def loss_denominator(self, step_tokens: int) -> float:
        """What a micro-batch's summed token loss is divided by, so the step's gradient is per trained token
        over the whole (global) step, whatever averaging the backend does afterwards."""
        return max(step_tokens, 1)

    def clip_grad_norm(self, params, max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, max_norm or float("inf"))

    def save_model(self, save_fn, folder: Path) -> None:
        """Write the model (rank 0 only in multi-process strategies, after gathering shards)."""
        save_fn(folder)

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass
