"""Token ids equal LLaMA-Factory's on a real tokenizer: its Template encoders, and its SFT / DPO processors.

tests/assets/templates/tokenizer is a small byte-level BPE with the templates' control tokens added; the goldens in
lf_tokens.json come from LLaMA-Factory's own code on it (after its get_template_and_fix_tokenizer), for templates
covering BOS and EOS slots, {"token": ...} slots, efficient_eos, replace_eos, thoughts and tool formats.
"""

from __future__ import annotations

import pytest

from engine.data import encode_preference, encode_supervised
from engine.data import tools as tool_formats
from engine.data.templates import get_template
from tests.data.template_goldens import ASSETS, golden, token_goldens, token_goldens_truncated

GOLDENS = token_goldens()
CASES = [(name, index) for name, cases in GOLDENS["templates"].items() for index in range(len(cases))]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ASSETS / "tokenizer"))


@pytest.fixture(autouse=True)
def llama3_date(monkeypatch):
    monkeypatch.setattr(tool_formats, "today", lambda: GOLDENS["llama3_date"])


def _conversation(name: str, case: dict):
    conv = golden(name)["conversations"][case["id"]]
    return conv["messages"], conv["system"], conv["tools"]


@pytest.mark.parametrize(("name", "index"), CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_ids_equal_llamafactory(tokenizer, name, index):
    case = GOLDENS["templates"][name][index]
    messages, system, tools = _conversation(name, case)
    template = get_template(name, tokenizer, **case["settings"])
    assert "error" not in case
    assert template.eos_token == case["eos_token"]
    pairs = template.encode_multiturn(tokenizer, messages, system, tools)
    assert [list(pair) for pair in pairs] == case["multiturn"]
    if "oneturn" in case:
        assert list(template.encode_oneturn(tokenizer, messages, system, tools)) == case["oneturn"]
    example = {"messages": messages[:-1] + messages[-1:], "system": system, "tools": tools, "source": "g:1"}
    for key, mask in (("supervised", False), ("supervised_mask_history", True)):
        if key in case:
            [sample] = encode_supervised([example], tokenizer, template, 4096, mask_history=mask)
            assert sample == case[key]
    if "pairwise" in case:
        pair = case["pairwise"]
        ranked = {**example, "messages": messages[:-1], "chosen": messages[-1]["content"], "rejected": pair["rejected"]}
        [sample] = encode_preference([ranked], tokenizer, template, 4096)
        asked = sample.pop("prompt")  # ours beside the tokens: the question as written, for the reward scores
        assert sample == {key: value for key, value in pair.items() if key != "rejected"}
        assert asked == next(m["content"] for m in reversed(ranked["messages"]) if m["role"] == "user")


def test_goldens_cover_the_special_slots(tokenizer):
    names = set(GOLDENS["templates"])
    assert {"chatglm3", "yuan"} <= names  # {"token": ...} slots
    assert {"llama2", "llama3", "seed_coder", "olmo"} <= names  # bos / eos slots (olmo: an EOS prefix)
    assert {"glm4", "gemma2", "falcon", "gpt_oss"} <= names  # efficient_eos
    supervised = [case for cases in GOLDENS["templates"].values() for case in cases if "supervised" in case]
    assert len(supervised) >= 30 and all(case["supervised"]["labels"] for case in supervised)


@pytest.mark.parametrize("name", ["glm4", "falcon"])
def test_truncated_preference_and_feedback_rows_equal_llamafactory(tokenizer, name):
    # efficient_eos: LF adds the EOS to the answer before cutting to cutoff_len, so a cut answer ends on an answer
    # token, not on the EOS.
    from engine.data.feedback import encode_feedback

    truncated = token_goldens_truncated()
    expected = truncated["templates"][name]
    template = get_template(name, tokenizer)
    cutoff, asked = truncated["cutoff_len"], [{"role": "user", "content": truncated["prompt"]}]
    ranked = {"messages": asked, "chosen": truncated["chosen"], "rejected": truncated["rejected"], "source": "t:1"}
    [pair] = encode_preference([ranked], tokenizer, template, cutoff)
    assert {key: value for key, value in pair.items() if key != "prompt"} == expected["pairwise"]
    assert pair["chosen_labels"][-1] != template.eos_token_id(tokenizer)
    rows = [{"messages": asked + [{"role": "assistant", "content": truncated[side]}], "kto_tag": side == "chosen",
             "source": f"t:{index}"} for index, side in enumerate(("chosen", "rejected"))]
    samples = encode_feedback(rows, tokenizer, template, cutoff)
    assert [{key: value for key, value in sample.items() if key != "kto_tag"} for sample in samples] \
        == expected["feedback"]
