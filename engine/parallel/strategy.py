"""The ``Strategy`` protocol: what the training shell asks of single-device, DDP, FSDP2, DeepSpeed and Ulysses
alike. Each strategy module implements it (engine.parallel.single is the reference, where every collective is the
identity), so the shell never branches on which one runs."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

import torch


class Strategy(Protocol):
    name: str
    rank: int
    world_size: int
    is_main: bool
    dp_rank: int
    dp_size: int
    sp_rank: int
    """This rank's place in its sequence-parallel group (0 when sequences are not split)."""
    sp_size: int
    grad_norm_before_step: bool
    """clip_grad_norm returns this step's norm (DeepSpeed reports the previous step's, inside its own step)."""

    def wrap(self, model: torch.nn.Module, config) -> torch.nn.Module:
        """The module to call for training (DDP/FSDP2/DeepSpeed wrap here); the shell saves the unwrapped one."""

    def wrap_frozen(self, model: torch.nn.Module) -> None:
        """Ready a model that never trains (a reference) to run beside the trained one (SP attention routing)."""

    def shard_groups(self, groups: list) -> list:
        """This rank's share of an epoch's [optimizer step][micro-batch][sample] index groups."""

    def prepare_batch(self, batch: dict) -> dict:
        """The part of a collated micro-batch this rank computes (SP: a slice of the sequence)."""

    def sequence_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum a per-row tensor over the ranks that share each sequence (autograd-aware); identity without SP."""

    def sum_across_ranks(self, value: float) -> float: ...

    def any_rank(self, flag: bool) -> bool:
        """True everywhere when true on any rank: stops and divergence end the same step on every rank."""

    def loss_denominator(self, units: int) -> float:
        """The global step's units: what every micro-batch's summed loss is divided by."""

    def micro_batch(self, *, sync: bool):
        """A context for one micro-batch's forward and backward; ``sync`` only for a step's last, so gradients
        accumulate locally and are reduced once (DDP's no_sync otherwise: its SUM hook would add the earlier
        micro-batches' already-reduced gradients again)."""

    def backward(self, loss: torch.Tensor) -> None: ...

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer: ...

    def checkpoint_optimizer(self, optimizer: torch.optim.Optimizer):
        """What checkpoint files save and load as the optimizer state (FSDP2: the gathered full state)."""

    def clip_grad_norm(self, params, max_norm: float) -> torch.Tensor: ...

    def save_model(self, save_fn: Callable[[Path], None], folder: Path) -> None:
        """Write the model (rank 0 only in multi-process strategies, after gathering shards)."""

    def save_checkpoint(self, write: Callable, save_fn: Callable[[Path], None], optimizer) -> Path | None:
        """Run the checkpoint writer where and with what the strategy needs (rank 0, gathered state)."""

    def barrier(self) -> None: ...

    def close(self) -> None: ...
