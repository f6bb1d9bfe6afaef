"""DistributedDataParallel: every rank holds the whole model and its own share of each global batch.

The default when several processes run and nothing else is asked. Gradients are summed across ranks by a
communication hook instead of DDP's built-in average (see engine.parallel.common for why), so the recipe's
token-normalised loss gives exactly the single-process gradient of the concatenated batch.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from engine.parallel.common import DataParallelBase, broadcast_parameters


def sum_gradients_hook(process_group, bucket):
    """DDP communication hook: all-reduce SUM of the bucket, no division by the world size."""
    group = process_group if process_group is not None else dist.group.WORLD
    return dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future().then(lambda fut: fut.value()[0])


class DDPStrategy(DataParallelBase):
    """Replicated model, data split across ranks, summed gradients."""

    name = "ddp"
    sharded_gradients = False

    def wrap(self, model: torch.nn.Module, config) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        self.model = model
        broadcast_parameters(model)
        device = next(model.parameters()).device
        device_ids = [device.index] if device.type == "cuda" else None
        # Every trainable parameter takes part in every step of a causal LM; searching for unused ones costs a
        # traversal of the graph per step (HF Trainer's default of True warns about exactly that).
        # Buffers (rotary frequencies) are equal everywhere: no broadcast before every forward.
        wrapped = DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=False,
                                          forward_sync_buffers=False)
        wrapped.register_comm_hook(None, sum_gradients_hook)
        self.wrapped = wrapped
        return wrapped

    def micro_batch(self, *, sync: bool):
        """Every micro-batch but a step's last runs under no_sync: DDP would otherwise reduce the whole accumulated
        .grad each time, and with summed (not averaged) gradients the earlier micro-batches would count again."""
        return contextlib.nullcontext() if sync else self.wrapped.no_sync()
