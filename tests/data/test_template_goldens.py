"""Every text template renders exactly as LLaMA-Factory's own template code rendered it (tests/assets/templates/).

Slot by slot, so equal here means equal token ids for any tokenizer: without and with a system prompt, multi-turn,
tools (each template's tool format, parallel calls, thought and tool-call words around calls), thoughts, every
enable_thinking / preserve_thinking setting of reasoning templates, mask_history's dropped thoughts, DPO's last-turn
view, chat prompts, default_system and tool_format overrides, and a tokenizer without BOS.
"""

from __future__ import annotations

import pytest

from engine.data import tools as tool_formats
from engine.data.templates import MULTIMODAL_TEMPLATES, TEMPLATES, get_template
from engine.errors import DataError
from tests.data.template_goldens import (GOLDEN_NAMES, INDEX, case_settings, case_tokenizer, golden, piece_text,
                                        same_ids)


@pytest.fixture(autouse=True)
def llama3_date(monkeypatch):
    """LF states today's date in the Llama 3 tool prompt; the goldens were made on a fixed one."""
    monkeypatch.setattr(tool_formats, "today", lambda: INDEX["llama3_date"])


def _pairs_text(pairs) -> list[tuple[str, str]]:
    return [(piece_text(prompt), piece_text(answer)) for prompt, answer in pairs]


def _check_case(name: str, data: dict, case: dict) -> list[str]:
    """What differs from LF in one case (empty: nothing)."""
    conv = data["conversations"][case["id"]]
    messages, system, tools = conv["messages"], conv["system"], conv["tools"]
    tokenizer = case_tokenizer(case, data)
    template = get_template(name, tokenizer, **case_settings(case))
    label = f"{name}/{case['id']}/{case['settings']}"
    if "error" in case:
        with pytest.raises(DataError):
            template.encode_multiturn(tokenizer, messages, system, tools)
        return []
    problems = [] if template.eos_token == case["eos"] else [f"{label}: EOS {template.eos_token} != {case['eos']}"]
    pairs = same_ids(template.encode_multiturn(tokenizer, messages, system, tools))
    if pairs != same_ids(case["multiturn"]):
        problems.append(f"{label}: multiturn pieces {pairs} != {case['multiturn']}")
    if template.render_turns(messages, system, tools) != _pairs_text(case["multiturn"]):
        problems.append(f"{label}: render_turns differs")
    if data["reasoning"]:
        expected_oneturn, expected_chat = case["oneturn"], case["chat_prompt"]
        discard = not template.preserve_thinking
        masked = template.encode_multiturn(tokenizer, messages, system, tools, discard_history_thoughts=discard)
        if same_ids(masked) != same_ids(case["multiturn_mask_history"]):
            problems.append(f"{label}: mask_history pieces differ")
    else:  # LF's Template.encode_oneturn is the same slots concatenated
        flat = [piece for prompt, answer in case["multiturn"] for piece in prompt + answer]
        last = case["multiturn"][-1][1]
        expected_oneturn, expected_chat = [flat[:len(flat) - len(last)], last], flat[:len(flat) - len(last)]
    if same_ids(template.encode_oneturn(tokenizer, messages, system, tools)) != same_ids(expected_oneturn):
        problems.append(f"{label}: oneturn pieces differ")
    if same_ids(template.encode_prompt(tokenizer, messages[:-1], system, tools)) != same_ids(expected_chat):
        problems.append(f"{label}: chat prompt pieces differ")
    if template.render(messages[:-1], system, tools, add_generation_prompt=True) != piece_text(expected_chat):
        problems.append(f"{label}: chat prompt text differs")
    return problems


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_template_renders_as_llamafactory(name):
    data = golden(name)
    problems = [problem for case in data["cases"] for problem in _check_case(name, data, case)]
    assert not problems, "\n".join(problems[:5])


def test_every_llamafactory_template_is_served_or_refused_by_name():
    lf_names = INDEX["templates"]
    text = {name for name, info in lf_names.items() if info["kind"] != "multimodal"}
    assert len(lf_names) == 124 and len(text) == 85
    assert text <= set(TEMPLATES) and set(GOLDEN_NAMES) == text
    assert set(MULTIMODAL_TEMPLATES) == set(lf_names) - text
    for name in MULTIMODAL_TEMPLATES:
        with pytest.raises(DataError, match=f"{name} is a multimodal template; lf-assistant trains text models only"):
            get_template(name)


def test_unknown_template_names_the_nearest():
    with pytest.raises(DataError, match="Did you mean .*llama3"):
        get_template("llama-3")
    with pytest.raises(DataError, match="Did you mean .*qwen3_nothink"):
        get_template("qwen3_no_think")


def test_cases_cover_what_the_goldens_promise():
    ids = {case["id"] for name in GOLDEN_NAMES for case in golden(name)["cases"]}
    assert {"single", "single_system", "multi", "tools", "tools_system", "tools_parallel", "thought"} <= ids
    reasoning = [name for name in GOLDEN_NAMES if golden(name)["reasoning"]]
    assert {"qwen3", "deepseekr1", "glm4_7", "gpt_oss"} <= set(reasoning)
    settings = [case["settings"] for case in golden("qwen3")["cases"]]
    assert {"enable_thinking": False} in settings and {"enable_thinking": None} in settings
