"""How an epoch's samples become optimizer steps of micro-batches.

``build_batcher(config, samples, collate)`` returns an object whose ``groups(epoch)`` lists, for one epoch, the
optimizer steps as lists of micro-batches of sample indices, and whose ``collate(indices)`` makes the tensors.
The order depends only on the seed and the epoch, so a resumed run sees exactly the same batches.

The strategies, and what an optimizer step holds in each:

- ``padded``: shuffled micro-batches of ``batch_size`` samples, each padded to its longest sample.
- ``bucketed``: the same number of samples per micro-batch, but micro-batches are cut from length-sorted windows,
  so samples of similar length share one and little padding is left. Steps mix fewer lengths (a known trade-off).
- ``packed``: exactly the padded strategy's micro-batches (same samples, same steps), each concatenated into one
  padding-free row with position ids restarting at each sample. Same work, same loss, no padding computed.
- ``dynamic``: micro-batches filled by a token budget (``batch_size x cutoff_len`` tokens: the most a padded
  micro-batch can hold), packed into one padding-free row. Steps hold a varying number of samples, so an epoch
  has fewer steps; the loss is still normalised by each step's trained tokens.

LLaMA-Factory's ``packing: true`` (SFT) is none of these: ``LFPackedBatcher`` packs the samples into rows of up to
``cutoff_len`` tokens first (its greedy knapsack, per preprocessing batch: engine.data.chunks), then the ROWS
are the data: shuffled, ``batch_size`` rows per micro-batch, so an epoch has fewer steps. Attention spans the
samples of a row (only positions restart), unless ``neat_packing``, which keeps each sample to itself.
"""

from __future__ import annotations

import random

import torch

from engine.data.packing import PackedCollator, best_fit_decreasing
from engine.errors import ConfigError
from engine.training.loop import batches_for_epoch, steps_per_epoch

# Micro-batches per length-sorted window in bucketing. HF's group_by_length sorts megabatches of 50 batches;
# a window this wide leaves little padding yet still lets each epoch mix different samples into a window.
BUCKET_WINDOW = 64


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


class BucketedBatcher(PaddedBatcher):
    """Padded micro-batches of similar-length samples: each window of ``BUCKET_WINDOW`` micro-batches is sorted by
    length, cut into micro-batches, and the micro-batches are shuffled again before they form steps."""

    def groups(self, epoch: int) -> list[list[list[int]]]:
        generator = torch.Generator().manual_seed(self.seed + epoch)
        order = torch.randperm(len(self.samples), generator=generator).tolist()
        shuffle = random.Random(self.seed + epoch)
        window_size = self.batch_size * BUCKET_WINDOW
        micro: list[list[int]] = []
        for start in range(0, len(order), window_size):
            window = sorted(order[start:start + window_size], key=lambda i: -len(self.samples[i]["input_ids"]))
            chunks = [window[i:i + self.batch_size] for i in range(0, len(window), self.batch_size)]
            shuffle.shuffle(chunks)
            micro += chunks
        return [micro[i:i + self.grad_accum] for i in range(0, len(micro), self.grad_accum)]


class PackedBatcher(PaddedBatcher):
    """The padded strategy's micro-batches, each collated as one padding-free packed row."""

    def __init__(self, samples: list[dict], collate, batch_size: int, grad_accum: int, seed: int) -> None:
        super().__init__(samples, PackedCollator(), batch_size, grad_accum, seed)


class DynamicBatcher:
    """Micro-batches filled up to ``token_budget`` tokens (best fit, longest first), each one packed row."""

    def __init__(self, samples: list[dict], collate, batch_size: int, grad_accum: int, seed: int, *,
                 token_budget: int) -> None:
        self.samples, self.collate_fn = samples, PackedCollator()
        self.grad_accum, self.seed, self.token_budget = grad_accum, seed, token_budget
        self.lengths = [len(sample["input_ids"]) for sample in samples]
        longest = max(self.lengths, default=0)
        if longest > token_budget:
            raise ConfigError(f"dynamic batching: a sample has {longest} tokens, more than the token budget "
                              f"{token_budget} (per_device_train_batch_size x cutoff_len); raise "
                              "per_device_train_batch_size or lower cutoff_len.")
        # The bin count depends only on the lengths (ties change which sample goes where, not how many bins).
        self._micro_batches = len(best_fit_decreasing(self.lengths, token_budget))

    def steps_per_epoch(self) -> int:
        return max(1, -(-self._micro_batches // self.grad_accum))

    def groups(self, epoch: int) -> list[list[list[int]]]:
        generator = torch.Generator().manual_seed(self.seed + epoch)
        tie_order = torch.randperm(len(self.samples), generator=generator).tolist()
        bins = best_fit_decreasing(self.lengths, self.token_budget, order=tie_order)
        bin_order = torch.randperm(len(bins), generator=generator).tolist()
        micro = [bins[i] for i in bin_order]
        return [micro[i:i + self.grad_accum] for i in range(0, len(micro), self.grad_accum)]

    def collate(self, indices: list[int]) -> dict:
        return self.collate_fn([self.samples[i] for i in indices])


def lf_knapsack(lengths: list[int], capacity: int) -> list[list[int]]:
    """LLaMA-Factory's greedy knapsack on sample lengths: each row takes the longest remaining sample that still
    fits, until none does. Returns sample indices per row (among equal lengths, the last index first, as there)."""
    from bisect import bisect

    by_length: dict[int, list[int]] = {}
    for index, length in enumerate(lengths):
        by_length.setdefault(length, []).append(index)
    remaining = sorted(lengths)
    rows = []
    while remaining:
        room, row = capacity, []
        while True:
            fit = bisect(remaining, room)
            if fit == 0:
                break
            length = remaining.pop(fit - 1)
            room -= length
            row.append(by_length[length].pop())
        if not row:  # a sample longer than the row: LLaMA-Factory drops it before packing
            remaining.pop()
            continue
        rows.append(row)
    return rows


class LFPackedBatcher:
    """LLaMA-Factory's ``packing`` for SFT: samples packed into rows of up to ``capacity`` tokens, then the rows
    shuffled into micro-batches of ``batch_size`` rows (see the module docstring)."""

    def __init__(self, samples: list[dict], pad_token_id: int, batch_size: int, grad_accum: int, seed: int, *,
                 capacity: int, neat: bool, chunks: list[range] | None = None) -> None:
        from engine.data.packing import PackedRowsCollator

        self.samples, self.batch_size, self.grad_accum, self.seed = samples, batch_size, grad_accum, seed
        self.collate_fn = PackedRowsCollator(pad_token_id, cross_attention=not neat)
        self.rows: list[list[int]] = []
        # each preprocessing batch is packed on its own, as there (engine.data.chunks)
        for chunk in chunks if chunks is not None else [range(len(samples))]:
            self.rows += [[chunk[i] for i in row]
                          for row in lf_knapsack([len(samples[i]["input_ids"]) for i in chunk], capacity)]

    def steps_per_epoch(self) -> int:
        return steps_per_epoch(len(self.rows), self.batch_size, self.grad_accum)

    def groups(self, epoch: int) -> list[list[list[int]]]:
        """Micro-batches of ROW indices."""
        return batches_for_epoch(len(self.rows), self.batch_size, self.grad_accum, seed=self.seed + epoch)

    def collate(self, row_indices: list[int]) -> dict:
        return self.collate_fn([[self.samples[i] for i in self.rows[row]] for row in row_indices])


BATCHERS = {"padded": PaddedBatcher, "bucketed": BucketedBatcher, "packed": PackedBatcher,
            "dynamic": DynamicBatcher}


def build_batcher(config, samples: list[dict], collate, pad_token_id: int | None = None):
    """The batcher the config asks for: LLaMA-Factory's packing for SFT with packing / neat_packing, else the
    batching_strategy (lf-assistant's own step-preserving ``packed`` among them)."""
    strategy = config.batching_strategy
    if config.stage == "sft" and config.packing_enabled:
        if pad_token_id is None:
            raise ConfigError("packing needs the tokenizer's pad token id.")
        from engine.data.chunks import preprocessing_chunks

        # LLaMA-Factory encodes packed samples to cutoff_len - 1 and fills rows up to that, per preprocessing batch
        # of rows (the recipe's encode_in_chunks; samples read back from tokenized_path are cut by count).
        chunks = getattr(samples, "chunks", None) or preprocessing_chunks(
            len(samples), config.preprocessing_batch_size, config.preprocessing_num_workers)
        return LFPackedBatcher(samples, pad_token_id, config.per_device_train_batch_size,
                               config.gradient_accumulation_steps, config.seed, capacity=config.cutoff_len - 1,
                               neat=config.neat_packing, chunks=chunks)
    if strategy not in BATCHERS:
        raise ConfigError(f"batching_strategy {strategy!r} is not known; choose one of: {', '.join(BATCHERS)}.")
    args = (samples, collate, config.per_device_train_batch_size, config.gradient_accumulation_steps, config.seed)
    if strategy == "dynamic":
        return DynamicBatcher(*args, token_budget=config.per_device_train_batch_size * config.cutoff_len)
    return BATCHERS[strategy](*args)
