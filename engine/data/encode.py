"""Normalized examples -> token ids and labels, with the prompt masked out.

SFT: every assistant turn of a multi-turn conversation is trained (its answer tokens and its end-of-turn token);
prompts, system text and tool results are labelled IGNORE_INDEX. mask_history=True trains only the last turn (and a
reasoning template drops the earlier thoughts, as LLaMA-Factory does). DPO pairs use the last-turn view
(template.encode_oneturn, LF's pairwise encoding). Token ids are the template's, slot by slot as in LF.
Truncation to cutoff_len is LLaMA-Factory's, turn by turn: each turn's prompt and answer share what the earlier
turns left (infer_seqlen), so a long prompt cannot squeeze the answer out entirely, and a later turn is cut rather
than left out (with mask_history the last turn gets the budget first). Rows left with no trained token (a prompt
so long that the answer's share rounds to nothing) are kept and counted, as LLaMA-Factory keeps them: they count in
its examples and steps, and train nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from engine.errors import DataError

IGNORE_INDEX = -100


class EncodedSamples(list):
    """A list of encoded samples that also reports what encoding had to do to the rows."""

    def __init__(self, samples=(), *, untrained: list[str] | None = None, truncated: int = 0) -> None:
        super().__init__(samples)
        self.untrained: list[str] = untrained or []
        """Sources ("dataset:row") of the kept rows with no trained token: no answer token survived truncation."""
        self.truncated: int = truncated
        """How many rows were cut to cutoff_len."""
        self.chunks: list[range] | None = None
        """The sample ranges of each preprocessing batch of rows, when encoded by ``encode_in_chunks``."""


def encode_in_chunks(encode: Callable[[list[dict]], EncodedSamples], examples: list[dict],
                     chunks: list[range]) -> EncodedSamples:
    """``encode`` run on each chunk of rows (engine.data.chunks: LLaMA-Factory's preprocessing batches); the result
    carries ``.chunks``, the sample ranges each batch of rows gave."""
    samples, untrained, truncated, ranges = [], [], 0, []
    for chunk in chunks:
        part = encode([examples[i] for i in chunk])
        ranges.append(range(len(samples), len(samples) + len(part)))
        samples += part
        untrained += part.untrained
        truncated += part.truncated
    result = EncodedSamples(samples, untrained=untrained, truncated=truncated)
    result.chunks = ranges
    return result


@dataclass
class _Counts:
    untrained: list[str] = field(default_factory=list)
    truncated: int = 0


def infer_seqlen(source_len: int, target_len: int, cutoff_len: int) -> tuple[int, int]:
    """How many prompt and answer tokens to keep within cutoff_len.

    A short answer (under half the budget) is kept whole; else a short prompt is kept whole; else both are cut in
    proportion to their lengths.
    """
    if target_len * 2 < cutoff_len:
        max_target = cutoff_len
    elif source_len * 2 < cutoff_len:
        max_target = cutoff_len - source_len
    else:
        max_target = int(cutoff_len * (target_len / (source_len + target_len)))
    new_target = min(max_target, target_len)
    new_source = min(max(cutoff_len - new_target, 0), source_len)
    return new_source, new_target


@contextmanager
def row_errors(example: dict) -> Iterator[None]:
    """A DataError the template raises on one row (a function call that is not JSON, say) names that row."""
    try:
        yield
    except DataError as exc:
        name, _, row = str(example.get("source") or "").rpartition(":")
        where = f"{name}: row {row}" if name and row.isdigit() else "a row"
        raise DataError(f"{where}: {exc} Fix or remove that row in the data file.") from None


def encode_supervised(examples: list[dict], tokenizer, template, cutoff_len: int, *, train_on_prompt: bool = False,
                      mask_history: bool = False) -> EncodedSamples:
    """[{"input_ids", "labels"}] for SFT, one per row; `.untrained` / `.truncated` on the result say what
    truncation did to the rows."""
    _check_cutoff(cutoff_len)
    if train_on_prompt and template.efficient_eos:
        raise DataError(f"Template {template.name!r} cannot train on prompts (its answers share one EOS); "
                        "set train_on_prompt: false.")
    counts = _Counts()
    samples = []
    for example in examples:
        with row_errors(example):
            pairs = template.encode_turns(tokenizer, example["messages"], example.get("system"),
                                          example.get("tools"), mask_history=mask_history)
        input_ids, labels, cut = _encode_pairs(pairs, template.eos_token_id(tokenizer), template, cutoff_len,
                                               train_on_prompt, mask_history)
        if all(label == IGNORE_INDEX for label in labels):
            counts.untrained.append(example.get("source", "?"))
        counts.truncated += cut
        samples.append({"input_ids": input_ids, "labels": labels})
    return EncodedSamples(samples, untrained=counts.untrained, truncated=counts.truncated)


def _encode_pairs(pairs, eos_id: int | None, template, cutoff_len: int, train_on_prompt: bool,
                  mask_history: bool) -> tuple[list[int], list[int], bool]:
    total = 1 if template.efficient_eos else 0
    untruncated = sum(len(src) + len(tgt) for src, tgt in pairs) + total
    ordered = list(reversed(pairs)) if mask_history else pairs  # the last turn gets the budget first
    input_ids: list[int] = []
    labels: list[int] = []
    for turn, (source, target) in enumerate(ordered):
        if total >= cutoff_len:
            break
        source_len, target_len = infer_seqlen(len(source), len(target), cutoff_len - total)
        source, target = source[:source_len], target[:target_len]
        total += source_len + target_len
        if train_on_prompt:
            source_labels = list(source)
        elif template.efficient_eos and turn != 0 and source:
            # GLM-4 answers have no end token of their own: the position after an answer learns to emit EOS.
            source_labels = [eos_id] + [IGNORE_INDEX] * (len(source) - 1)
        else:
            source_labels = [IGNORE_INDEX] * len(source)
        target_labels = [IGNORE_INDEX] * len(target) if mask_history and turn != 0 else list(target)
        if mask_history:
            input_ids = source + target + input_ids
            labels = source_labels + target_labels + labels
        else:
            input_ids += source + target
            labels += source_labels + target_labels
    if template.efficient_eos:
        input_ids.append(eos_id)
        labels.append(eos_id)
    return input_ids, labels, len(input_ids) < untruncated


def encode_preference(examples: list[dict], tokenizer, template, cutoff_len: int) -> EncodedSamples:
    """[{"chosen_input_ids", "chosen_labels", "rejected_input_ids", "rejected_labels", "prompt"}] for DPO and RM
    (``prompt``: the last user message as written).

    The prompt (all earlier turns included) is shared and masked; only the final chosen / rejected answer is
    labelled. The answer budget is set by the longer of the two, so both are cut at the same prompt length.
    """
    _check_cutoff(cutoff_len)
    counts = _Counts()
    samples = []
    for example in examples:
        if "chosen" not in example or "rejected" not in example:
            raise DataError(f"{example.get('source', 'an example')} has no chosen/rejected answers; DPO needs a "
                            "preference dataset (\"ranking\": true in dataset_info.json).")
        with row_errors(example):
            prompt_ids, chosen_ids = _last_turn(tokenizer, template, example, example["chosen"])
            _, rejected_ids = _last_turn(tokenizer, template, example, example["rejected"])
        if template.efficient_eos:
            # The EOS is part of the answer before truncation, as in LLaMA-Factory's pairwise processor: a cut
            # answer loses it with its tail rather than keeping it in place of its last answer token.
            eos_id = template.eos_token_id(tokenizer)
            chosen_ids, rejected_ids = chosen_ids + [eos_id], rejected_ids + [eos_id]
        longest = max(len(chosen_ids), len(rejected_ids))
        source_len, target_len = infer_seqlen(len(prompt_ids), longest, cutoff_len)
        if target_len == 0:  # neither answer keeps a token
            counts.untrained.append(example.get("source", "?"))
        counts.truncated += int(source_len < len(prompt_ids) or target_len < longest)
        prompt_ids = prompt_ids[:source_len]
        # the question as written (what a reward model's scores are shown against), beside its tokens
        asked = [m["content"] for m in example.get("messages", []) if m.get("role") == "user"]
        sample = {"prompt": asked[-1] if asked else ""}
        for key, answer in (("chosen", chosen_ids), ("rejected", rejected_ids)):
            answer = answer[:target_len]
            sample[f"{key}_input_ids"] = prompt_ids + answer
            sample[f"{key}_labels"] = [IGNORE_INDEX] * len(prompt_ids) + answer
        samples.append(sample)
    return EncodedSamples(samples, untrained=counts.untrained, truncated=counts.truncated)


def _last_turn(tokenizer, template, example: dict, answer: str) -> tuple[list[int], list[int]]:
    # LF's pairwise encoding: the last-turn view (earlier thoughts dropped unless preserve_thinking).
    messages = example["messages"] + [{"role": "assistant", "content": answer}]
    return template.encode_oneturn(tokenizer, messages, example.get("system"), example.get("tools"))


def untrained_note(encoded: EncodedSamples, cutoff_len: int, what: str = "row") -> str | None:
    """What to tell about the rows that train nothing (None when there are none)."""
    if not encoded.untrained:
        return None
    return (f"{len(encoded.untrained)} of {len(encoded)} {what}(s) train nothing: no answer token fits in "
            f"cutoff_len {cutoff_len} (first: {encoded.untrained[0]}). They are kept, as LLaMA-Factory keeps them "
            "(they count in its steps); raise cutoff_len or shorten those prompts to train on them.")


def _check_cutoff(cutoff_len: int) -> None:
    if cutoff_len < 2:
        raise DataError(f"cutoff_len must be at least 2 tokens, not {cutoff_len}.")


def describe_sample(sample: dict, tokenizer) -> list[tuple[str, bool]]:
    """Decoded spans of a sample with trained=True/False, for previews that highlight what the model learns.

    Takes an SFT sample (input_ids/labels) or a preference sample (shows the chosen side).
    """
    prefix = "" if "input_ids" in sample else "chosen_"
    input_ids, labels = sample[f"{prefix}input_ids"], sample[f"{prefix}labels"]
    spans: list[tuple[str, bool]] = []
    start = 0
    for end in range(1, len(input_ids) + 1):
        trained = labels[start] != IGNORE_INDEX
        if end == len(input_ids) or (labels[end] != IGNORE_INDEX) != trained:
            spans.append((tokenizer.decode(input_ids[start:end], skip_special_tokens=False), trained))
            start = end
    return spans


def trains_anything(samples: list[dict]) -> bool:
    """Whether any sample has a trained token (stops at the first)."""
    return any(label != IGNORE_INDEX for sample in samples for key in ("labels", "chosen_labels", "rejected_labels")
               for label in sample.get(key, ()))


def count_trained_tokens(samples: list[dict]) -> int:
    """Labelled (trained) tokens across SFT samples, or across both sides of preference samples."""
    total = 0
    for sample in samples:
        for key in ("labels", "chosen_labels", "rejected_labels"):
            total += sum(1 for label in sample.get(key, ()) if label != IGNORE_INDEX)
    return total
