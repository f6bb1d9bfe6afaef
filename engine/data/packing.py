"""Padding-free packing: the samples of a micro-batch concatenated into ONE row, with no padding at all.

Position ids restart at 0 at each sample. transformers (5.x) reads that as packed sequences when the model gets
``position_ids`` and no 2-D ``attention_mask``: SDPA and eager attention build a block-diagonal causal mask from
them, and FlashAttention-2 switches to its varlen kernel (``cu_seqlens`` from the restarts; it needs batch size 1,
which is why a packed micro-batch is always a single row). So no token attends across a sample boundary, and each
sample's rotary positions are the ones it would have alone.

The first label of every sample is IGNORE_INDEX: after the usual shift (token t predicts t+1), the last token of
one sample would otherwise be trained to predict the first token of the next. In a padded batch that label is
never a target either (nothing precedes position 0), so packed and padded batches train the same tokens.

The collated batch keeps a 2-D ``attention_mask`` of ones only for counting input tokens; the loss drops it for
packed batches (a batch that carries ``position_ids``), because passing it would switch packing detection off.

torch is imported inside the calls, so that `import engine.data` stays fast for the TUI and the validator.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

from engine.data.encode import IGNORE_INDEX


@dataclass(frozen=True)
class PackedRow:
    """One packed row as plain lists (the collator turns it into tensors)."""

    input_ids: list[int]
    labels: list[int]
    position_ids: list[int]
    lengths: list[int]
    """Token count of each sample in the row, in order."""


def pack_features(features: list[dict]) -> PackedRow:
    """Concatenate encoded samples ({"input_ids", "labels"}) into one row; positions restart at each sample."""
    if not features:
        raise ValueError("pack_features needs at least one sample.")
    input_ids: list[int] = []
    labels: list[int] = []
    position_ids: list[int] = []
    lengths: list[int] = []
    for feature in features:
        ids, sample_labels = list(feature["input_ids"]), list(feature["labels"])
        if len(ids) != len(sample_labels) or not ids:
            raise ValueError("Each sample needs as many labels as input ids, and at least one token.")
        sample_labels[0] = IGNORE_INDEX  # never predicted from the previous sample's last token
        input_ids += ids
        labels += sample_labels
        position_ids += range(len(ids))
        lengths.append(len(ids))
    return PackedRow(input_ids, labels, position_ids, lengths)


class PackedCollator:
    """[{"input_ids", "labels"}] -> one padding-free row: input_ids, labels, position_ids, attention_mask (1, T).

    ``attention_mask`` is all ones (there is no padding); it is there so that code counting input tokens with
    ``attention_mask.sum()`` keeps working. The model must not receive it (see the module docstring).
    """

    def __call__(self, features: list[dict]) -> dict:
        import torch

        row = pack_features(features)
        return {
            "input_ids": torch.tensor([row.input_ids], dtype=torch.long),
            "labels": torch.tensor([row.labels], dtype=torch.long),
            "position_ids": torch.tensor([row.position_ids], dtype=torch.long),
            "attention_mask": torch.ones(1, len(row.input_ids), dtype=torch.long),
        }


def segment_lengths(position_ids: list[int]) -> list[int]:
    """Lengths of the samples in a packed row, read back from its position ids (a new sample starts at 0)."""
    starts = [i for i, pos in enumerate(position_ids) if pos == 0]
    if not starts or starts[0] != 0:
        raise ValueError("A packed row must start with position 0.")
    return [end - start for start, end in zip(starts, starts[1:] + [len(position_ids)])]


def best_fit_decreasing(lengths: list[int], capacity: int, order: list[int] | None = None) -> list[list[int]]:
    """Indices grouped into bins of at most ``capacity`` tokens, longest sample first, each into the fullest bin
    that still has room (best fit decreasing: within 11/9 of the fewest bins possible).

    ``order`` breaks ties between equal lengths (pass a seeded permutation so equal-length samples move between
    epochs); the NUMBER of bins depends only on the lengths, so steps per epoch is the same every epoch.
    Runs in O(n log n) on the bins' remaining room, so 100k samples take well under a second.
    """
    too_long = [i for i, n in enumerate(lengths) if n > capacity]
    if too_long:
        raise ValueError(f"{len(too_long)} sample(s) are longer than the token budget {capacity}; "
                         "raise the budget or lower cutoff_len.")
    rank = {index: position for position, index in enumerate(order or range(len(lengths)))}
    by_length = sorted(range(len(lengths)), key=lambda i: (-lengths[i], rank[i]))
    bins: list[list[int]] = []
    room: list[tuple[int, int]] = []  # (remaining tokens, bin index), kept sorted
    for index in by_length:
        size = lengths[index]
        slot = bisect_left(room, (size, -1))
        if slot < len(room):
            remaining, bin_index = room.pop(slot)
        else:
            remaining, bin_index = capacity, len(bins)
            bins.append([])
        bins[bin_index].append(index)
        insort(room, (remaining - size, bin_index))
    return bins


def padding_efficiency(lengths: list[int], micro_batches: list[list[int]], *, packed: bool) -> float:
    """Real tokens / tokens computed: 1.0 for packed rows, sum / (rows x longest) for padded micro-batches."""
    real = sum(lengths[i] for batch in micro_batches for i in batch)
    if packed:
        return 1.0 if real else 0.0
    computed = sum(len(batch) * max(lengths[i] for i in batch) for batch in micro_batches if batch)
    return real / computed if computed else 0.0
