"""Which rows LLaMA-Factory's preprocessing handles together. No torch here.

LLaMA-Factory tokenizes with ``datasets.map(batched=True, batch_size=preprocessing_batch_size,
num_proc=preprocessing_num_workers)``: the rows are cut into ``num_proc`` contiguous shards, then each shard into
batches. Three things it does per batch follow these boundaries, so they change what trains: SFT ``packing``
(which samples share a row), pre-training ``packing`` (each batch's text is cut into blocks and its leftover
dropped) and KTO (each answer's mismatched partner for the KL term is the previous answer of its batch).

Before that, val_size holds rows out with datasets' ``train_test_split`` (``holdout_indices``): the train rows it
leaves, in its order, are what the batches are cut from.
"""

from __future__ import annotations

import math


def preprocessing_chunks(count: int, batch_size: int | None, num_workers: int | None) -> list[range]:
    """The row ranges ``datasets.map`` gives one call of the preprocessing function: ``num_workers`` contiguous
    shards (at most one per row; sizes differing by one, the first ones larger, as ``Dataset.shard(contiguous=
    True)``), each cut into batches of ``batch_size`` rows (None or less than 1: the whole shard)."""
    if count <= 0:
        return []
    workers = max(1, min(num_workers or 1, count))
    div, mod = divmod(count, workers)
    chunks: list[range] = []
    start = 0
    for shard in range(workers):
        length = div + (1 if shard < mod else 0)
        size = batch_size if batch_size is not None and batch_size > 0 else length
        chunks += [range(start + offset, start + min(offset + size, length)) for offset in range(0, length, size)]
        start += length
    return chunks


def holdout_count(count: int, val_size: float) -> int:
    """How many of ``count`` rows val_size holds out, as datasets' train_test_split counts: a share (below 1) is
    rounded up, a larger value is a row count."""
    if not val_size:
        return 0
    return int(val_size) if val_size > 1 else math.ceil(val_size * count)


def holdout_indices(count: int, val_size: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, held-out) row indices as LLaMA-Factory's val_size picks them, by datasets'
    ``train_test_split(test_size, seed)``: a share (below 1) holds out ceil(share x count) rows, a count that many;
    which ones comes from numpy's ``default_rng(seed).permutation``, and the train rows keep the permutation's order
    (what LLaMA-Factory then preprocesses in batches). DataError when no row would be left to train."""
    if not val_size:
        return list(range(count)), []
    held = holdout_count(count, val_size)
    if held >= count:
        from engine.errors import DataError

        raise DataError(f"val_size {val_size:g} holds out {held} of the {count} rows, leaving none to train on: "
                        "give a share below 1 (e.g. 0.1) or a smaller count.")
    import numpy as np

    order = np.random.default_rng(seed).permutation(count).tolist()
    return order[held:], order[:held]
