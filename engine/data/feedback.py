"""KTO data: single answers labelled desirable or undesirable, each with a mismatched answer for the KL estimate.

As in LLaMA-Factory, example i's KL partner is its own prompt with the answer of example i-1 (the first takes the
last one's): a completion the policy was never trained towards for that prompt, so policy and reference disagree
on it only through drift.
"""

from __future__ import annotations

from engine.data.encode import IGNORE_INDEX, EncodedSamples, _check_cutoff, _last_turn, infer_seqlen, row_errors
from engine.errors import DataError


def encode_feedback(examples: list[dict], tokenizer, template, cutoff_len: int,
                    chunks: list[range] | None = None) -> EncodedSamples:
    """[{"input_ids", "labels", "kl_input_ids", "kl_labels", "kto_tag"}], one per row: the prompt masked, the answer
    labelled (`.untrained`: rows whose answer truncation left no token, kept as LLaMA-Factory keeps them)."""
    _check_cutoff(cutoff_len)
    answers = []
    for example in examples:
        messages = example["messages"]
        if "kto_tag" not in example:
            raise DataError(f"{example.get('source', 'an example')} has no kto_tag: KTO needs every row labelled "
                            "desirable (true) or undesirable (false) (columns: {\"kto_tag\": ...} in "
                            "dataset_info.json).")
        if not messages or messages[-1]["role"] != "assistant":
            raise DataError(f"{example.get('source', 'an example')} does not end with an answer to label.")
        answers.append(messages[-1]["content"])
    extra = 1 if template.efficient_eos else 0
    eos_id = template.eos_token_id(tokenizer)  # the EOS joins the answer before truncation, as in LLaMA-Factory
    # The KL partner is the previous answer within the example's preprocessing batch (the first takes the batch's
    # last), as LLaMA-Factory's feedback processor shifts each batch (engine.data.chunks).
    partner = {i: (i - 1 if i > chunk.start else chunk.stop - 1)
               for chunk in (chunks if chunks is not None else [range(len(examples))]) for i in chunk}
    samples, untrained, truncated = [], [], 0
    for index, example in enumerate(examples):
        prompt_only = {**example, "messages": example["messages"][:-1]}
        encoded = {}
        for prefix, answer in (("", answers[index]), ("kl_", answers[partner[index]])):
            with row_errors(example):
                prompt_ids, answer_ids = _last_turn(tokenizer, template, prompt_only, answer)
            answer_ids = answer_ids + ([eos_id] if extra else [])
            source_len, target_len = infer_seqlen(len(prompt_ids), len(answer_ids), cutoff_len)
            truncated += int(prefix == "" and (source_len < len(prompt_ids) or target_len < len(answer_ids)))
            encoded[f"{prefix}input_ids"] = prompt_ids[:source_len] + answer_ids[:target_len]
            encoded[f"{prefix}labels"] = [IGNORE_INDEX] * source_len + answer_ids[:target_len]
        if not any(t != IGNORE_INDEX for t in encoded["labels"]):
            untrained.append(example.get("source", "?"))
        encoded["kto_tag"] = bool(example["kto_tag"])
        samples.append(encoded)
    return EncodedSamples(samples, untrained=untrained, truncated=truncated)


class FeedbackCollator:
    """Feedback samples -> one batch of 2N rows (the N answers, then their N KL partners) and ``kto_tags`` [N].

    One padded batch keeps every row the same length, so a sequence-parallel strategy slices both halves alike;
    the loss splits them with ``[:n]`` / ``[n:]``."""

    def __init__(self, pad_token_id: int) -> None:
        from engine.data.collator import SFTCollator

        self.sft = SFTCollator(pad_token_id)

    def __call__(self, features: list[dict]) -> dict:
        import torch

        rows = [{"input_ids": f[f"{prefix}input_ids"], "labels": f[f"{prefix}labels"]}
                for prefix in ("", "kl_") for f in features]
        batch = self.sft(rows)
        batch["kto_tags"] = torch.tensor([f["kto_tag"] for f in features], dtype=torch.bool)
        return batch
