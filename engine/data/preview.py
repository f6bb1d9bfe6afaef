"""What training will see: the first samples with their trained spans marked, and counts over the whole data.

Used by `lf-assistant data preview` and the TUI's data stage. Everything is computed with the same template and
encoder the recipes use, so the preview cannot disagree with training.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.data.encode import IGNORE_INDEX, describe_sample, encode_preference, encode_supervised


@dataclass
class DataPreview:
    """Counts over all rows, and the decoded spans of the first samples."""

    template: str
    rows: int
    """Normalized examples loaded."""
    samples: int
    """Samples after encoding (one per row, as in LLaMA-Factory)."""
    trained_tokens: int
    """Tokens with a label (answers and their end-of-turn tokens)."""
    total_tokens: int
    """All tokens of the samples (both sides for preference pairs)."""
    longest: int
    """The longest sample, in tokens."""
    truncated: int
    """Samples cut to cutoff_len."""
    untrained: list[str] = field(default_factory=list)
    """Sources ("dataset:row") of rows with no trained token left: kept, as LLaMA-Factory keeps them, training
    nothing."""
    shown: list[tuple[str, list[tuple[str, bool]]]] = field(default_factory=list)
    """(source, [(text, trained)]) for the first samples."""


def preview_data(examples: list[dict], tokenizer, template, cutoff_len: int, *, n: int = 2,
                 train_on_prompt: bool = False, mask_history: bool = False) -> DataPreview:
    """Encode every example (preference pairs when they carry chosen/rejected) and describe the first `n`."""
    ranking = bool(examples) and "chosen" in examples[0]
    if ranking:
        encoded = encode_preference(examples, tokenizer, template, cutoff_len)
        keys = (("chosen_input_ids", "chosen_labels"), ("rejected_input_ids", "rejected_labels"))
    else:
        encoded = encode_supervised(examples, tokenizer, template, cutoff_len, train_on_prompt=train_on_prompt,
                                    mask_history=mask_history)
        keys = (("input_ids", "labels"),)
    trained = total = longest = 0
    for sample in encoded:
        for ids_key, labels_key in keys:
            total += len(sample[ids_key])
            longest = max(longest, len(sample[ids_key]))
            trained += sum(1 for label in sample[labels_key] if label != IGNORE_INDEX)
    tagged = {example.get("source", "?"): example["kto_tag"] for example in examples if "kto_tag" in example}
    sources = [_with_tag(example.get("source", "?"), tagged.get(example.get("source", "?"))) for example in examples]
    shown = [(source, describe_sample(sample, tokenizer)) for source, sample in zip(sources, encoded[:n])]
    return DataPreview(template=template.name, rows=len(examples), samples=len(encoded), trained_tokens=trained,
                       total_tokens=total, longest=longest, truncated=encoded.truncated,
                       untrained=list(encoded.untrained), shown=shown)


def _with_tag(source: str, desirable: bool | None) -> str:
    """A KTO row's source with what its answer is marked as (the loss pushes it up or down)."""
    return source if desirable is None else f"{source} ({'desirable' if desirable else 'undesirable'} answer)"


def preview_text(texts: list[str], tokenizer, template, cutoff_len: int, *, n: int = 2,
                 packing: bool = True, control_tokens_in_text: bool = False,
                 chunks: list[range] | None = None) -> DataPreview:
    """Pre-training (stage pt): the rows the recipe trains on, every token trained, the first `n` decoded
    (`cutoff_len`: the row length, engine.data.pretrain.pretrain_block)."""
    from engine.data.pretrain import chunked_text_rows, pretrain_eos

    rows = chunked_text_rows(texts, tokenizer, cutoff_len, packing=packing, eos=pretrain_eos(template, tokenizer),
                             control_tokens_in_text=control_tokens_in_text, chunks=chunks)
    total = sum(len(row) for row in rows)
    cut = 0 if packing else sum(1 for row in rows if len(row) == cutoff_len)
    shown = [(f"row {index + 1}", [(tokenizer.decode(row), True)]) for index, row in enumerate(rows[:n])]
    return DataPreview(template=template.name, rows=len(texts), samples=len(rows), trained_tokens=total,
                       total_tokens=total, longest=max((len(row) for row in rows), default=0), truncated=cut,
                       shown=shown)
