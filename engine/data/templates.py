"""Chat templates by name, compatible with LLaMA-Factory's names and formats.

A template turns normalized messages into text and token ids. Training needs more than a string: it needs, for each
assistant turn, which tokens are prompt (not trained) and which are the answer (trained, up to and including the
end-of-turn token). So a template is kept as format strings, rendered turn by turn:

    prefix + system + [user + assistant_header | assistant] * n

Markers: "{content}" is the message text, "{bos}" / "{eos}" the tokenizer's BOS / EOS token (bound by
`get_template(name, tokenizer)`; without a tokenizer the family's usual token is used). Tests check `render` against
`tokenizer.apply_chat_template` of the demo models and against the families' documented strings, and check that
`jinja` (written into tokenizer_config.json on export) renders the same text.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass

from engine.data.auto_template import TokenizerTemplate, encode_pairs, encode_text
from engine.data.formats import ASSISTANT, FUNCTION, USER
from engine.data.tools import ToolFormat, format_function_call, format_tools
from engine.errors import DataError

EMPTY_THOUGHT = "<think>\n\n</think>\n\n"


@dataclass(frozen=True)
class Template:
    """A chat format, as format strings with "{content}", "{bos}" and "{eos}" markers."""

    name: str
    user: str
    """A user turn, without the assistant header that follows it."""
    assistant_header: str
    """What opens every assistant turn; it ends the prompt and is the generation prompt."""
    assistant: str
    """An assistant answer: the trained span, ending with the end-of-turn token."""
    system: str = "{content}"
    observation: str | None = None
    """A tool result (None: formatted like a user turn)."""
    function: str | None = None
    """An assistant's function call (None: formatted like an answer)."""
    prefix: str = ""
    """Text that starts every conversation (e.g. "{bos}")."""
    default_system: str = ""
    """System prompt used when a conversation has none (empty: no system turn)."""
    stop_words: tuple[str, ...] = ()
    """End-of-turn tokens; the first is what an answer ends with and generation stops on."""
    tool_format: ToolFormat = "default"
    system_in_user: bool = False
    """Families without a system turn (Mistral, Gemma) put the system text before the first user message."""
    reasoning: bool = False
    """Add an empty thought to answers that have none, trained with the answer (Qwen3 thinking, DeepSeek-R1)."""
    efficient_eos: bool = False
    """Answers carry no end-of-turn token; one EOS closes the whole sequence (GLM-4)."""
    bos_token: str = ""
    eos_token: str = ""

    def bind(self, tokenizer) -> Template:
        """This template with the tokenizer's own BOS/EOS tokens; DataError when the tokenizer lacks a stop word."""
        if self.stop_words and not _is_single_token(tokenizer, self.stop_words[0]):
            raise DataError(
                f"Template {self.name!r} ends answers with {self.stop_words[0]}, which this tokenizer does not know as "
                "a token, so the model could never learn to stop. The template does not match the model: use "
                "template: auto (the model's own chat template) or the template of the model's family.")
        if "{eos}" in self._all_formats() and tokenizer.eos_token is None:
            raise DataError(f"Template {self.name!r} needs an EOS token, but the tokenizer has none.")
        return dataclasses.replace(self, bos_token=tokenizer.bos_token or "", eos_token=tokenizer.eos_token or "")

    def _all_formats(self) -> str:
        return "".join([self.prefix, self.user, self.assistant_header, self.assistant, self.system,
                        self.observation or "", self.function or ""])

    def _fill(self, fmt: str, content: str = "") -> str:
        # Markers are resolved in the format first, so message text is never scanned for them.
        return fmt.replace("{bos}", self.bos_token).replace("{eos}", self.eos_token).replace("{content}", content, 1)

    def _system_text(self, system: str | None, tools: str | None) -> str:
        system = system or self.default_system
        tool_text = format_tools(self.tool_format, tools) if tools else ""
        if not system and not tool_text:
            return ""
        return self._fill(self.system, system + (tool_text if system else tool_text.lstrip("\n")))

    def turn_texts(self, messages: list[dict], system: str | None = None,
                   tools: str | None = None) -> tuple[list[tuple[str, str]], str]:
        """[(prompt text, answer text)] per assistant-side turn, plus the prompt text left after the last answer."""
        messages, system = _split_system(messages, system)
        system_text = self._system_text(system, tools)
        prompt = self._fill(self.prefix) + ("" if self.system_in_user else system_text)
        pairs: list[tuple[str, str]] = []
        for index, message in enumerate(messages):
            role, content = _role(message), message["content"]
            if role in (ASSISTANT, FUNCTION):
                if role == FUNCTION:
                    content = format_function_call(self.tool_format, content)
                if self.reasoning and "<think>" not in content and "</think>" not in content:
                    content = EMPTY_THOUGHT + content
                fmt = self.assistant if role == ASSISTANT else (self.function or self.assistant)
                pairs.append((prompt + self._fill(self.assistant_header), self._fill(fmt, content)))
                prompt = ""
                continue
            if index == 0 and self.system_in_user:
                content = system_text + content
            fmt = self.user if role == USER else (self.observation or self.user)
            prompt += self._fill(fmt, content)
        return pairs, prompt

    def render(self, messages: list[dict], system: str | None = None, tools: str | None = None,
               add_generation_prompt: bool = False) -> str:
        """The conversation as text, exactly as it is tokenized for training (and for generation)."""
        pairs, tail = self.turn_texts(messages, system, tools)
        text = "".join(prompt + answer for prompt, answer in pairs) + tail
        if add_generation_prompt:
            text += self._fill(self.assistant_header)
        return text

    def encode_turns(self, tokenizer, messages: list[dict], system: str | None = None,
                     tools: str | None = None) -> list[tuple[list[int], list[int]]]:
        """(prompt_ids, response_ids) for each assistant turn; the response ends with its end-of-turn token."""
        pairs, _ = self._bound(tokenizer).turn_texts(messages, system, tools)
        return encode_pairs(tokenizer, pairs)

    def encode_prompt(self, tokenizer, messages: list[dict], system: str | None = None,
                      tools: str | None = None) -> list[int]:
        """Token ids to generate from: the conversation so far, ending with the assistant header."""
        bound = self._bound(tokenizer)
        pairs, tail = bound.turn_texts(messages, system, tools)
        ids = [token for prompt, answer in encode_pairs(tokenizer, pairs) for token in prompt + answer]
        return ids + encode_text(tokenizer, tail + bound._fill(bound.assistant_header))

    def _bound(self, tokenizer) -> Template:
        # get_template(name, tokenizer) already bound and checked it; re-binding per example costs ~15% of encoding.
        if self.bos_token == (tokenizer.bos_token or "") and self.eos_token == (tokenizer.eos_token or ""):
            return self
        return self.bind(tokenizer)

    def stop_token_ids(self, tokenizer) -> list[int]:
        """Token ids that end generation: the tokenizer's EOS and every stop word the tokenizer knows."""
        ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        for word in self.stop_words:
            if _is_single_token(tokenizer, word):
                token_id = tokenizer.convert_tokens_to_ids(word)
                if token_id not in ids:
                    ids.append(token_id)
        return ids

    def fix_tokenizer(self, tokenizer) -> list[str]:
        """Make a tokenizer stop where this template ends answers, have a pad token and carry `jinja`.

        Called before training and export, so the saved tokenizer_config.json serves the trained format
        (pain point: the template is lost between training and deployment). Returns what was changed.
        """
        changes = []
        if self.stop_words and tokenizer.eos_token != self.stop_words[0] and not self.efficient_eos:
            tokenizer.eos_token = self.stop_words[0]
            changes.append(f"eos_token -> {self.stop_words[0]}")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
            changes.append(f"pad_token -> {tokenizer.eos_token}")
        jinja = self.bind(tokenizer).jinja
        if tokenizer.chat_template != jinja:
            tokenizer.chat_template = jinja
            changes.append(f"chat_template -> template {self.name!r}")
        return changes

    @property
    def jinja(self) -> str:
        """A Jinja chat template that renders system/user/assistant/tool messages exactly like `render`."""
        return _jinja(self)


def _jinja(t: Template) -> str:
    def piece(fmt: str, expr: str) -> str:
        before, found, after = t._fill(fmt, "\x00").partition("\x00")
        return " + ".join(part for part in (_lit(before), expr if found else "", _lit(after)) if part) or "''"

    system_pieces = piece(t.system, "system_message")
    parts = [
        f"{{%- set system_message = {_lit(t.default_system) or repr('')} -%}}",
        "{%- if messages and messages[0]['role'] == 'system' -%}"
        "{%- if messages[0]['content'] -%}{%- set system_message = messages[0]['content'] -%}{%- endif -%}"
        "{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set loop_messages = messages -%}{%- endif -%}",
        f"{{{{ {_lit(t._fill(t.prefix))} }}}}" if t.prefix else "",
        "" if t.system_in_user else f"{{%- if system_message -%}}{{{{ {system_pieces} }}}}{{%- endif -%}}",
        "{%- for message in loop_messages -%}{%- set content = message['content'] -%}",
        "{%- if message['role'] == 'user' -%}",
        (f"{{%- if loop.first and system_message -%}}{{%- set content = {system_pieces} + content -%}}{{%- endif -%}}"
         if t.system_in_user else ""),
        f"{{{{ {piece(t.user, 'content')} }}}}",
        "{%- elif message['role'] == 'assistant' -%}",
        (f"{{%- if '<think>' not in content and '</think>' not in content -%}}"
         f"{{%- set content = {_lit(EMPTY_THOUGHT)} + content -%}}{{%- endif -%}}" if t.reasoning else ""),
        f"{{{{ {_lit(t._fill(t.assistant_header)) or repr('')} + {piece(t.assistant, 'content')} }}}}",
        "{%- elif message['role'] in ('tool', 'observation') -%}",
        f"{{{{ {piece(t.observation or t.user, 'content')} }}}}",
        "{%- endif -%}{%- endfor -%}",
        f"{{%- if add_generation_prompt -%}}{{{{ {_lit(t._fill(t.assistant_header)) or repr('')} }}}}{{%- endif -%}}",
    ]
    return "".join(parts)


def _lit(text: str) -> str:
    """A Jinja string literal ('' -> empty string, so callers can drop it)."""
    return json.dumps(text, ensure_ascii=False) if text else ""


def _split_system(messages: list[dict], system: str | None) -> tuple[list[dict], str | None]:
    """Accept a leading {"role": "system"} message (chat front ends send one) as the system prompt."""
    if messages and messages[0].get("role") == "system":
        return messages[1:], system or messages[0]["content"]
    return messages, system


def _role(message: dict) -> str:
    role = message.get("role")
    if role == "tool":
        return "observation"
    if role not in ("user", "assistant", "function_call", "observation"):
        raise DataError(f"Unknown message role {role!r}: use user, assistant, function_call or observation.")
    return role


def _is_single_token(tokenizer, token: str) -> bool:
    token_id = tokenizer.convert_tokens_to_ids(token)
    return token_id is not None and token_id != tokenizer.unk_token_id and len(encode_text(tokenizer, token)) == 1


_CHATML = dict(user="<|im_start|>user\n{content}<|im_end|>\n", assistant_header="<|im_start|>assistant\n",
               assistant="{content}<|im_end|>\n", system="<|im_start|>system\n{content}<|im_end|>\n",
               stop_words=("<|im_end|>",))
_QWEN = dict(_CHATML, function="{content}<|im_end|>\n", tool_format="qwen",
             observation="<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n")
_GEMMA = dict(user="<start_of_turn>user\n{content}<end_of_turn>\n", assistant_header="<start_of_turn>model\n",
              assistant="{content}<end_of_turn>\n", system="{content}\n\n", system_in_user=True, prefix="{bos}",
              observation="<start_of_turn>tool\n{content}<end_of_turn>\n", stop_words=("<end_of_turn>",),
              bos_token="<bos>", eos_token="<eos>")

TEMPLATES: dict[str, Template] = {
    "default": Template(
        "default", user="Human: {content}{eos}", assistant_header="\nAssistant:", assistant="{content}{eos}\n",
        system="System: {content}{eos}\n", eos_token="</s>"),
    "chatml": Template(
        "chatml", **dict(_CHATML, stop_words=("<|im_end|>", "<|im_start|>")),
        observation="<|im_start|>tool\n{content}<|im_end|>\n"),
    # Qwen1.5 / Qwen2 default system prompt (also the demo model's). LLaMA-Factory's `qwen` uses Qwen2.5's,
    # which is `qwen2_5` here.
    "qwen": Template("qwen", **_QWEN, default_system="You are a helpful assistant."),
    "qwen2_5": Template(
        "qwen2_5", **_QWEN, default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant."),
    "qwen3": Template("qwen3", **_QWEN, reasoning=True),
    "qwen3_nothink": Template("qwen3_nothink", **_QWEN),
    # SmolLM2's own chat template (the one in its tokenizer and GGUF): ChatML with a default system prompt naming
    # it. LLaMA-Factory's smollm2 ends that prompt with a period; the model was tuned without one.
    "smollm2": Template(
        "smollm2", **_CHATML, default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
    "llama3": Template(
        "llama3", prefix="{bos}", user="<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>",
        assistant_header="<|start_header_id|>assistant<|end_header_id|>\n\n", assistant="{content}<|eot_id|>",
        system="<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>",
        observation="<|start_header_id|>ipython<|end_header_id|>\n\n{content}<|eot_id|>",
        stop_words=("<|eot_id|>", "<|eom_id|>"), tool_format="llama3",
        bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>"),
    # Mistral tokenizer v3 (Mistral-7B-Instruct-v0.3, Mixtral): the system text joins the first user message.
    "mistral": Template(
        "mistral", prefix="{bos}", user="[INST] {content}[/INST]", assistant_header="", assistant=" {content}{eos}",
        system="{content}\n\n", system_in_user=True, function="[TOOL_CALLS] {content}{eos}",
        observation='[TOOL_RESULTS] {"content": {content}}[/TOOL_RESULTS]', tool_format="mistral",
        bos_token="<s>", eos_token="</s>"),
    "gemma": Template("gemma", **_GEMMA),
    "gemma3": Template("gemma3", **_GEMMA),
    "glm4": Template(
        "glm4", prefix="[gMASK]<sop>", user="<|user|>\n{content}", assistant_header="<|assistant|>",
        assistant="\n{content}", system="<|system|>\n{content}", function="{content}",
        observation="<|observation|>\n{content}", stop_words=("<|user|>", "<|observation|>"),
        tool_format="glm4", efficient_eos=True, eos_token="<|endoftext|>"),
    "deepseekr1": Template(
        "deepseekr1", prefix="{bos}", user="<｜User｜>{content}", assistant_header="<｜Assistant｜>",
        assistant="{content}{eos}", reasoning=True,
        bos_token="<｜begin▁of▁sentence｜>", eos_token="<｜end▁of▁sentence｜>"),
    "phi4": Template(
        "phi4", user="<|im_start|>user<|im_sep|>{content}<|im_end|>",
        assistant_header="<|im_start|>assistant<|im_sep|>", assistant="{content}<|im_end|>",
        system="<|im_start|>system<|im_sep|>{content}<|im_end|>", stop_words=("<|im_end|>",)),
}


def get_template(name: str | None, tokenizer=None) -> Template | TokenizerTemplate:
    """A template by name, bound to `tokenizer` when given. None or "auto": the tokenizer's own chat template."""
    if name in (None, "", "auto"):
        if tokenizer is None:
            raise DataError("template: auto uses the model's chat template, so it needs the model's tokenizer.")
        if not isinstance(getattr(tokenizer, "chat_template", None), str):
            raise DataError("The model has no chat template (a base model?). Set template to one of: "
                            f"{', '.join(TEMPLATES)} (e.g. default for a base model).")
        return TokenizerTemplate(tokenizer)
    if name not in TEMPLATES:
        close = difflib.get_close_matches(name, list(TEMPLATES), n=2, cutoff=0.5)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        raise DataError(f"Unknown template {name!r}.{hint} Valid templates: auto, {', '.join(TEMPLATES)}.")
    template = TEMPLATES[name]
    return template.bind(tokenizer) if tokenizer is not None else template
