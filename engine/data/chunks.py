"""Which rows LLaMA-Factory's preprocessing handles together. No torch here.

LLaMA-Factory tokenizes with ``datasets.map(batched=True, batch_size=preprocessing_batch_size,
num_proc=preprocessing_num_workers)``: the rows are cut into ``num_proc`` contiguous shards, then each shard into
batches. Three things it does per batch follow these boundaries, so they change what trains: SFT ``packing``
(which samples share a row), pre-training ``packing`` (each batch's text is cut into blocks and its leftover
dropped) and KTO (each answer's mismatched partner for the KL term is the previous answer of its batch).
"""

from __future__ import annotations


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
