"""One process, one device: the strategy every other one (ddp, fsdp2, deepspeed, ulysses) mirrors.

Each strategy implements engine.parallel.strategy.Strategy, so the training shell never branches on which runs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch


class SingleDevice:
    """No communication: every collective is the identity."""

    name = "single"
    world_size = 1
    rank = 0
    is_main = True
    dp_rank, dp_size, sp_rank, sp_size = 0, 1, 0, 1
    grad_norm_before_step = True

    def wrap(self, model, config):
        """Return the model to train (DDP/FSDP wrap here); the recipe keeps the unwrapped one for saving."""
        return model

    def wrap_frozen(self, model) -> None:
        """A model that never trains (a reference) needs nothing on one device."""

    def sequence_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def shard_groups(self, groups: list) -> list:
        """This rank's share of the epoch's optimizer-step groups of sample indices."""
        return groups

    def prepare_batch(self, batch: dict) -> dict:
        """The part of a collated micro-batch this rank computes (sequence parallelism: a slice of the sequence)."""
        return batch

    def sum_across_ranks(self, value: float) -> float:
        return value

    def any_rank(self, flag: bool) -> bool:
        """True everywhere when true on any rank (a stop request must end the same step on every rank)."""
        return flag

    def loss_denominator(self, step_tokens: int) -> float:
        """What a micro-batch's summed token loss is divided by, so the step's gradient is per trained token
        over the whole (global) step, whatever averaging the backend does afterwards."""
        return max(step_tokens, 1)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def micro_batch(self, *, sync: bool):
        """The context one micro-batch's forward and backward run in (``sync``: the step's last); nothing here."""
        return contextlib.nullcontext()

    def wrap_optimizer(self, optimizer):
        """The optimizer the loop steps (DeepSpeed wraps it in its engine)."""
        return optimizer

    def checkpoint_optimizer(self, optimizer):
        """What checkpoint files save and load as the optimizer state (FSDP2: the gathered full state)."""
        return optimizer

    def clip_grad_norm(self, params, max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, max_norm or float("inf"))

    def save_model(self, save_fn, folder: Path) -> None:
        """Write the model (rank 0 only in multi-process strategies, after gathering shards)."""
        save_fn(folder)

    def save_checkpoint(self, write, save_fn, optimizer) -> Path | None:
        """Run ``write(save_fn, optimizer)`` (engine.training.checkpoint.save_checkpoint) where and with what the
        strategy needs: on rank 0 only, with gathered weights and optimizer state when they are sharded."""
        return write(save_fn, optimizer)

    def barrier(self) -> None:
        pass

    def close(self) -> None:
        pass
