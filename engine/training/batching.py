"""How an epoch's samples become optimizer steps of micro-batches (padded by default).

``build_batcher(config, samples, collate)`` returns an object whose ``groups(epoch)`` lists, for one epoch, the
optimizer steps as lists of micro-batches of sample indices, and whose ``collate(indices)`` makes the tensors.
The order depends only on the seed and the epoch, so a resumed run sees exactly the same batches.
"""

from __future__ import annotations

from engine.training.loop import batches_for_epoch, steps_per_epoch


class PaddedBatcher:
    """Shuffled micro-batches of ``batch_size`` samples, each padded to its longest sample."""

    def __init__(self, samples: list[dict], collate, batch_size: int, grad_accum: int, seed: int) -> None:
        self.samples, self.collate_fn = samples, collate
        self.batch_size, self.grad_accum, self.seed = batch_size, grad_accum, seed

    def steps_per_epoch(self) -> int:
        return steps_per_epoch(len(self.samples), self.batch_size, self.grad_accum)

    def groups(self, epoch: int) -> list[list[list[int]]]:
        return batches_for_epoch(len(self.samples), self.batch_size, self.grad_accum, seed=self.seed + epoch)

    def collate(self, indices: list[int]) -> dict:
        return self.collate_fn([self.samples[i] for i in indices])


BATCHERS = {"padded": PaddedBatcher}


def build_batcher(config, samples: list[dict], collate):
    strategy = "packed" if config.packing or config.neat_packing else config.batching_strategy
    if strategy not in BATCHERS:
        from engine.errors import ConfigError

        raise ConfigError(f"batching_strategy {strategy!r} is not available in this build; "
                          f"available: {', '.join(BATCHERS)}.")
    return BATCHERS[strategy](samples, collate, config.per_device_train_batch_size,
                              config.gradient_accumulation_steps, config.seed)
