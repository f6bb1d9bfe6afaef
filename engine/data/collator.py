"""Batching encoded samples into padded tensors (right padding; padded labels are IGNORE_INDEX).

torch is imported inside the calls, so that `import engine.data` stays fast for the TUI and the validator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.data.encode import IGNORE_INDEX
from engine.errors import DataError

if TYPE_CHECKING:
    import torch


def _padded_length(lengths: list[int], multiple: int | None) -> int:
    longest = max(lengths)
    if multiple:
        longest = -(-longest // multiple) * multiple
    return longest


class SFTCollator:
    """[{"input_ids", "labels"}] -> {"input_ids", "attention_mask", "labels"} LongTensors of one padded length."""

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int | None = None) -> None:
        if pad_token_id is None:
            raise DataError("Batches need a pad token, and the tokenizer has none: set pad_token (its EOS token "
                            "works, padded labels are masked) in tokenizer_config.json.")
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of

    def __call__(self, features: list[dict]) -> dict:
        import torch

        length = _padded_length([len(f["input_ids"]) for f in features], self.pad_to_multiple_of)
        input_ids, attention_mask, labels = [], [], []
        for feature in features:
            pad = length - len(feature["input_ids"])
            input_ids.append(list(feature["input_ids"]) + [self.pad_token_id] * pad)
            attention_mask.append([1] * len(feature["input_ids"]) + [0] * pad)
            labels.append(list(feature["labels"]) + [IGNORE_INDEX] * pad)
        return {
            "input_ids": torch.tensor(input_ids, dtype=torch.long),
            "attention_mask": torch.tensor(attention_mask, dtype=torch.long),
            "labels": torch.tensor(labels, dtype=torch.long),
        }


class PreferenceCollator:
    """Preference samples -> one batch of 2N rows: the N chosen sequences first, then the N rejected ones.

    Concatenating both sides lets a DPO step run a single forward pass; split the logits with `[:n]` / `[n:]`.
    """

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int | None = None) -> None:
        self.sft = SFTCollator(pad_token_id, pad_to_multiple_of)

    def __call__(self, features: list[dict]) -> dict:
        rows = [{"input_ids": f[f"{side}_input_ids"], "labels": f[f"{side}_labels"]}
                for side in ("chosen", "rejected") for f in features]
        return self.sft(rows)


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """Labels moved one to the left (token t predicts t+1), padded with -100 at the end."""
    import torch.nn.functional as F

    return F.pad(labels[:, 1:], (0, 1), value=-100)
