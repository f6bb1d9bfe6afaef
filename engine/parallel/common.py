"""What every multi-process strategy shares: joining the process group, splitting the data between replicas,
reductions, the global gradient norm, and rank-0-only writing.

Gradients are SUMMED across ranks (never averaged) and the recipe divides each micro-batch's summed token loss by
the trained-token count of the whole global step (``loss_denominator``). That makes one step exactly the step a
single process would take on the concatenated batch, whatever the mix of data and sequence parallelism: no
1/world_size factor has to be compensated anywhere.
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from engine.errors import DeviceError

# Long enough for rank 0 to gather and write a large checkpoint while the others wait in a barrier; short enough
# that a rank that died without taking the others down ends the run within the hour rather than never.
DEFAULT_TIMEOUT_S = 1800


def init_process_group() -> bool:
    """Join the torchrun process group (nccl on GPUs, gloo on CPU). Returns True when this call created it."""
    if dist.is_initialized():
        return False
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise DeviceError(f"WORLD_SIZE is {os.environ.get('WORLD_SIZE')} but {', '.join(missing)} is not set: start "
                          "multi-process runs with `lf-assistant launch` (it runs torchrun), not by hand.")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = timedelta(seconds=int(os.environ.get("LFA_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S)))
    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise DeviceError(f"local rank {local_rank} has no GPU: {torch.cuda.device_count()} visible. Start as many "
                              "processes per node as GPUs are chosen (nproc_per_node).")
        torch.cuda.set_device(local_rank)  # plain "cuda" now means this rank's GPU everywhere in the recipe
        dist.init_process_group("nccl", timeout=timeout, device_id=torch.device("cuda", local_rank))
    else:
        dist.init_process_group("gloo", timeout=timeout)
    return True


def comm_device() -> torch.device:
    """Where small tensors for collectives must live: the rank's GPU under nccl, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(value: float, group=None) -> float:
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=comm_device())
    dist.all_reduce(tensor, group=group)
    return float(tensor.item())


def shard_step_groups(groups: list[list[list[int]]], dp_rank: int, dp_size: int) -> list[list[list[int]]]:
    """This replica's share of an epoch: [optimizer step][micro-batch][sample index].

    A global step takes ``grad_accum x dp_size`` consecutive micro-batches and deals them out round-robin, so
    every replica runs the same number of micro-batches per step (a replica short of one would hang the others in
    the gradient reduction). The epoch's micro-batch count is rounded up to a multiple of ``dp_size`` by
    repeating its first micro-batches, as torch's DistributedSampler does.
    """
    if dp_size == 1:
        return groups
    grad_accum = max((len(g) for g in groups), default=1)
    micro = [mb for group in groups for mb in group]
    if not micro:
        return []
    shortfall = (-len(micro)) % dp_size
    micro += [micro[i % len(micro)] for i in range(shortfall)]
    mine = micro[dp_rank::dp_size]
    return [mine[i:i + grad_accum] for i in range(0, len(mine), grad_accum)]


def global_grad_norm(params, max_norm: float, *, sharded: bool, group=None) -> torch.Tensor:
    """Clip by the norm of the WHOLE gradient: with sharded gradients (FSDP2) every rank adds its shard's squares
    and the sum is all-reduced, so all ranks clip by the same, true factor."""
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in params if p.grad is not None]
    local = [g.to_local() if isinstance(g, DTensor) else g for g in grads]
    device = local[0].device if local else comm_device()
    squares = torch.zeros((), dtype=torch.float32, device=device)
    for grad in local:
        squares += grad.detach().float().pow(2).sum()
    if sharded:
        squares = squares.to(comm_device())
        dist.all_reduce(squares, group=group)
    total = squares.sqrt()
    if max_norm and max_norm > 0:
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for grad in local:
            grad.detach().mul_(coef.to(grad.device, grad.dtype))
    return total


def broadcast_parameters(model: torch.nn.Module, src: int = 0) -> None:
    """Make every rank start from rank ``src``'s weights (adapter init draws random numbers)."""
    for tensor in list(model.parameters()) + list(model.buffers()):
        if tensor.device.type == "meta":
            continue
        dist.broadcast(tensor.data, src=src)


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks, found by the class names the model declares as not splittable."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(inner, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if layers:
        return layers
    return [m for m in model.modules() if type(m).__name__.endswith(("DecoderLayer", "Block"))]


class DataParallelBase:
    """Process-group membership and the collectives the recipe calls; subclasses wrap the model."""

    name = "ddp"
    sharded_gradients = False
    grad_norm_before_step = True
    sp_rank, sp_size = 0, 1

    def __init__(self) -> None:
        self.owns_group = init_process_group()
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.is_main = self.rank == 0
        # Data-parallel coordinates; sequence parallelism groups several ranks onto one replica.
        self.dp_rank, self.dp_size = self.rank, self.world_size
        self.model: torch.nn.Module | None = None

    def wrap_frozen(self, model: torch.nn.Module) -> None:
        """A reference model runs replicated on every rank; no gradients, so nothing to synchronise."""

    def sequence_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def shard_groups(self, groups: list) -> list:
        return shard_step_groups(groups, self.dp_rank, self.dp_size)

    def prepare_batch(self, batch: dict) -> dict:
        return batch

    def sum_across_ranks(self, value: float) -> float:
        return all_reduce_sum(value)

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when it is true on one (a stop request must end the same step everywhere)."""
        return all_reduce_sum(1.0 if flag else 0.0) > 0

    def loss_denominator(self, step_tokens: int) -> float:
        return max(all_reduce_sum(step_tokens), 1.0)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def micro_batch(self, *, sync: bool):
        """The context one micro-batch's forward and backward run in; ``sync`` only for a step's last. FSDP2
        reduce-scatters each backward's own gradient into its shards, which accumulates correctly as it is."""
        return contextlib.nullcontext()

    def wrap_optimizer(self, optimizer):
        return optimizer

    def checkpoint_optimizer(self, optimizer):
        """What checkpoint files save and load as "the optimizer" (FSDP2: the gathered full state)."""
        return optimizer

    def clip_grad_norm(self, params, max_norm: float) -> torch.Tensor:
        return global_grad_norm(list(params), max_norm, sharded=self.sharded_gradients)

    def save_model(self, save_fn: Callable[[Path], None], folder: Path) -> None:
        if self.is_main:
            save_fn(folder)
        self.barrier()

    def save_checkpoint(self, write: Callable, save_fn: Callable[[Path], None], optimizer) -> Path | None:
        """Rank 0 writes the checkpoint folder (one writer per file); the others wait until it is complete."""
        folder = write(save_fn, optimizer) if self.is_main else None
        self.barrier()
        return folder

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self.owns_group = False
