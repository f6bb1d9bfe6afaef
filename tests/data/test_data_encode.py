"""Tokenization with labels: every answer trained, every prompt masked, truncation, preference pairs, batching."""

from __future__ import annotations

import pytest
import torch

from engine.data import (
    IGNORE_INDEX,
    PreferenceCollator,
    SFTCollator,
    count_trained_tokens,
    describe_sample,
    encode_preference,
    encode_supervised,
    get_template,
)
from engine.data.encode import infer_seqlen
from engine.errors import DataError

MULTI = {"messages": [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5."},
                      {"role": "user", "content": "And times 4?"}, {"role": "assistant", "content": "5 x 4 = 20."},
                      {"role": "user", "content": "Thanks!"}, {"role": "assistant", "content": "You are welcome."}],
         "system": "Be exact.", "tools": None, "source": "t:1"}


def _ids(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def test_every_assistant_turn_is_trained_and_every_prompt_masked(qwen_tokenizer):
    tok = qwen_tokenizer
    [sample] = encode_supervised([MULTI], tok, get_template("qwen", tok), cutoff_len=1024)
    # Build the expected labels independently, piece by piece, from the documented ChatML format.
    expected_ids, expected_labels = [], []
    prompt = "<|im_start|>system\nBe exact.<|im_end|>\n"
    for user, answer in (("What is 2 + 3?", "2 + 3 = 5."), ("And times 4?", "5 x 4 = 20."),
                         ("Thanks!", "You are welcome.")):
        prompt += f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
        prompt_ids, answer_ids = _ids(tok, prompt), _ids(tok, f"{answer}<|im_end|>\n")
        expected_ids += prompt_ids + answer_ids
        expected_labels += [IGNORE_INDEX] * len(prompt_ids) + answer_ids
        prompt = ""
    assert sample["input_ids"] == expected_ids
    assert sample["labels"] == expected_labels
    trained_text = tok.decode([t for t in sample["labels"] if t != IGNORE_INDEX])
    assert trained_text == "2 + 3 = 5.<|im_end|>\n5 x 4 = 20.<|im_end|>\nYou are welcome.<|im_end|>\n"
    assert sample["labels"].count(tok.convert_tokens_to_ids("<|im_end|>")) == 3  # each end of turn is learned


def test_mask_history_trains_only_the_last_turn_and_train_on_prompt_trains_all(qwen_tokenizer):
    tok, template = qwen_tokenizer, get_template("qwen", qwen_tokenizer)
    [last_only] = encode_supervised([MULTI], tok, template, 1024, mask_history=True)
    assert tok.decode([t for t in last_only["labels"] if t != IGNORE_INDEX]) == "You are welcome.<|im_end|>\n"
    [everything] = encode_supervised([MULTI], tok, template, 1024, train_on_prompt=True)
    assert everything["labels"] == everything["input_ids"]
    assert everything["input_ids"] == last_only["input_ids"]


def test_llama3_labels_include_eot_after_each_answer(llama_tokenizer):
    tok = llama_tokenizer
    [sample] = encode_supervised([MULTI], tok, get_template("llama3", tok), 1024)
    assert sample["input_ids"][0] == tok.bos_token_id and sample["labels"][0] == IGNORE_INDEX
    spans = [text for text, trained in describe_sample(sample, tok) if trained]
    assert spans == ["2 + 3 = 5.<|eot_id|>", "5 x 4 = 20.<|eot_id|>", "You are welcome.<|eot_id|>"]


def test_infer_seqlen_shares_the_budget():
    assert infer_seqlen(100, 10, 64) == (54, 10)  # short answer kept whole
    assert infer_seqlen(10, 100, 64) == (10, 54)  # short prompt kept whole
    assert infer_seqlen(300, 100, 64) == (48, 16)  # both cut in proportion
    assert infer_seqlen(5, 5, 64) == (5, 5)


def test_truncation_keeps_part_of_the_answer(qwen_tokenizer):
    tok, template = qwen_tokenizer, get_template("qwen", qwen_tokenizer)
    long_prompt = {"messages": [{"role": "user", "content": "word " * 300},
                                {"role": "assistant", "content": "The answer is a fairly long sentence " * 8}],
                   "system": None, "tools": None, "source": "long:1"}
    samples = encode_supervised([long_prompt, MULTI], tok, template, cutoff_len=48)
    assert samples.truncated == 2 and samples.untrained == []
    for sample in samples:
        assert len(sample["input_ids"]) <= 48
        assert sum(label != IGNORE_INDEX for label in sample["labels"]) > 0
    assert len(samples[1]["input_ids"]) == 48  # a later turn is cut to the budget it has left, as in LF


@pytest.mark.parametrize("cutoff_len", [24, 40, 60, 70, 100, 140])
@pytest.mark.parametrize("mask_history", [False, True])
def test_multi_turn_truncation_is_llamafactorys(qwen_tokenizer, cutoff_len, mask_history):
    """SupervisedDatasetProcessor._encode_data_example (LF processor/supervised.py), written out here: turn by turn,
    each prompt and answer share what is left (infer_seqlen); with mask_history the last turn first, the rest
    untrained. A conversation a few tokens over the limit keeps its later turns, cut."""
    tok, template = qwen_tokenizer, get_template("qwen", qwen_tokenizer)
    row = {"messages": [{"role": "user", "content": "tell me about the sea " * 6},
                        {"role": "assistant", "content": "The sea is large and deep. " * 2},
                        {"role": "user", "content": "and the sky? " * 5},
                        {"role": "assistant", "content": "The sky is blue above the sea. " * 3}],
           "system": None, "tools": None, "source": "sea:1"}
    pairs = template.encode_turns(tok, row["messages"], None, None, mask_history=mask_history)
    input_ids, labels, total = [], [], 0
    for turn, (source, target) in enumerate(pairs[::-1] if mask_history else pairs):
        if total >= cutoff_len:
            break
        source_len, target_len = infer_seqlen(len(source), len(target), cutoff_len - total)
        source, target = source[:source_len], target[:target_len]
        total += source_len + target_len
        target_labels = [IGNORE_INDEX] * target_len if mask_history and turn != 0 else list(target)
        if mask_history:
            input_ids, labels = source + target + input_ids, [IGNORE_INDEX] * source_len + target_labels + labels
        else:
            input_ids, labels = input_ids + source + target, labels + [IGNORE_INDEX] * source_len + target_labels
    [sample] = encode_supervised([row], tok, template, cutoff_len, mask_history=mask_history)
    assert (sample["input_ids"], sample["labels"]) == (input_ids, labels)


def test_rows_without_trained_tokens_are_kept_and_counted(qwen_tokenizer):
    # LLaMA-Factory keeps them (they count in its examples and steps, and train nothing): SFT, DPO/RM and KTO alike.
    from engine.data.feedback import encode_feedback

    tok, template = qwen_tokenizer, get_template("qwen", qwen_tokenizer)
    asked = [{"role": "user", "content": "word " * 300}]
    squeezed = {"messages": asked + [{"role": "assistant", "content": "ok"}], "system": None, "tools": None,
                "source": "long:7"}
    answer_len = len(_ids(tok, "ok<|im_end|>\n"))
    # At a cutoff of twice the answer, the proportional share of a 300-word prompt leaves the answer 0 tokens.
    samples = encode_supervised([squeezed, MULTI], tok, template, cutoff_len=2 * answer_len)
    assert samples.untrained == ["long:7"] and len(samples) == 2
    assert samples[0]["labels"] == [IGNORE_INDEX] * 2 * answer_len and count_trained_tokens(samples[1:]) > 0
    pair = {"messages": asked, "chosen": "ok", "rejected": "no", "system": None, "tools": None, "source": "long:8"}
    pairs = encode_preference([pair], tok, template, cutoff_len=2 * answer_len)
    assert pairs.untrained == ["long:8"] and len(pairs) == 1 and count_trained_tokens(pairs) == 0
    rows = [{**squeezed, "kto_tag": True}, {**MULTI, "kto_tag": False, "messages": MULTI["messages"][-2:]}]
    feedback = encode_feedback(rows, tok, template, cutoff_len=2 * answer_len)
    assert feedback.untrained == ["long:7"] and len(feedback) == 2
    with pytest.raises(DataError, match="cutoff_len"):
        encode_supervised([MULTI], tok, template, cutoff_len=1)


def test_preference_pairs_share_the_prompt_and_label_only_the_answers(qwen_tokenizer):
    tok, template = qwen_tokenizer, get_template("qwen", qwen_tokenizer)
    example = {"messages": [{"role": "user", "content": "Capital of Peru?"}], "system": None, "tools": None,
               "chosen": "Lima.", "rejected": "Quito, which is actually in Ecuador.", "source": "p:1"}
    [pair] = encode_preference([example], tok, template, cutoff_len=256)
    prompt = _ids(tok, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                       "<|im_end|>\n<|im_start|>user\nCapital of Peru?<|im_end|>\n<|im_start|>assistant\n")
    for side, answer in (("chosen", "Lima."), ("rejected", "Quito, which is actually in Ecuador.")):
        answer_ids = _ids(tok, f"{answer}<|im_end|>\n")
        assert pair[f"{side}_input_ids"] == prompt + answer_ids
        assert pair[f"{side}_labels"] == [IGNORE_INDEX] * len(prompt) + answer_ids
    with pytest.raises(DataError, match="preference dataset"):
        encode_preference([{"messages": example["messages"], "source": "p:2"}], tok, template, 64)


def test_sft_collator_pads_right_and_masks_padding(qwen_tokenizer):
    samples = [{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [8], "labels": [8]}]
    batch = SFTCollator(pad_token_id=0, pad_to_multiple_of=4)(samples)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 0], [8, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7, -100], [8, -100, -100, -100]]
    assert batch["input_ids"].dtype == torch.long
    with pytest.raises(DataError, match="pad token"):
        SFTCollator(pad_token_id=None)


def test_preference_collator_puts_chosen_rows_first():
    pairs = [{"chosen_input_ids": [1, 2], "chosen_labels": [-100, 2], "rejected_input_ids": [1, 3, 4],
              "rejected_labels": [-100, 3, 4]}]
    batch = PreferenceCollator(pad_token_id=0)(pairs)
    assert batch["input_ids"].tolist() == [[1, 2, 0], [1, 3, 4]]
    assert batch["labels"].tolist() == [[-100, 2, -100], [-100, 3, 4]]


def test_describe_sample_marks_trained_spans(qwen_tokenizer):
    tok = qwen_tokenizer
    [sample] = encode_supervised([MULTI], tok, get_template("qwen", tok), 1024)
    spans = describe_sample(sample, tok)
    assert [trained for _, trained in spans] == [False, True, False, True, False, True]
    assert "".join(text for text, _ in spans) == tok.decode(sample["input_ids"])
