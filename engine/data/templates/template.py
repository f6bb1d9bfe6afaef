"""The Template dataclass: a chat format as slot formats, rendered exactly as LLaMA-Factory's Template renders it.

Each message becomes a list of slot elements (engine.data.templates.slots): the first message also carries the
prefix and the system slot (system prompt + tool text), then the slot of its role. Pairs of messages make turns:
(user-side elements, assistant-side elements). Three classes of LLaMA-Factory templates are fields here:
`system_in_user` (its Llama2Template: the system text starts the first user message), `reasoning` (its
ReasoningTemplate: empty thoughts and thought stripping, see engine.data.templates.thinking) and plain ones.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from engine.data.formats import ASSISTANT, FUNCTION, OBSERVATION, ROLE_ALIASES, USER, tool_calls_text
from engine.data.special_tokens import control_pattern, control_tokens, mark_control_strings, strip_marks
from engine.data.templates import slots, thinking
from engine.data.templates.slots import CONTENT, EOS, Element, Format, SlotEncoder
from engine.data.tools import format_function_call, format_tools
import engine.messages
from engine.errors import DataError

Pair = tuple[list[Element], list[Element]]
Message = tuple[str, str]


@dataclass(frozen=True)
class Template:
    """A chat format; see the package docstring for the API. Field names follow LLaMA-Factory's register_template."""

    name: str
    user: Format = CONTENT
    """A user turn, including what opens the assistant's answer (the generation prompt)."""
    assistant: Format | None = None
    """An answer: the trained span. None: "{{content}}{{eos_token}}" ("{{content}}" with efficient_eos)."""
    system: Format = CONTENT
    function: Format | None = None
    """An assistant's function call, after tool_format wrote it. None: like an answer."""
    observation: Format | None = None
    """A tool result. None: like a user turn."""
    prefix: Format = ""
    """What starts every conversation (e.g. "{{bos_token}}")."""
    tools: Format | None = None
    """A slot for the raw tool JSON (Phi-4-mini) instead of tool_format's tool text."""
    tool_format: str = "default"
    default_system: str = ""
    stop_words: tuple[str, ...] = ()
    """Tokens that end generation; with replace_eos the first becomes the tokenizer's EOS."""
    thought_words: tuple[str, str] = ("<think>\n", "\n</think>\n\n")
    tool_call_words: tuple[str, str] = ("<tool_call>", "</tool_call>")
    efficient_eos: bool = False
    """Answers carry no end token; one EOS closes the whole sequence (and labels the turn after each answer)."""
    replace_eos: bool = False
    system_in_user: bool = False
    reasoning: bool = False
    empty_thought: str | None = None
    """The empty thought added to answers without one. None: thought_words joined (GLM-4.7 uses only the closer)."""
    enable_thinking: bool | None = True
    """Reasoning templates: True trains the empty thought with the answer; False drops every thought and puts the
    empty one in the prompt; None keeps thoughts and puts the empty one in the prompt (LLaMA-Factory's semantics)."""
    preserve_thinking: bool = False
    """Reasoning templates: keep the thoughts of earlier turns in DPO and chat prompts (stripped by default)."""
    special_tokens_in_text: bool = False
    """True: control-token strings inside message text become control tokens (allow_special_tokens_in_text)."""
    bos_token: str | None = None
    """The BOS token {{bos_token}} renders; set by get_template(name, tokenizer) (None: the tokenizer has none)."""
    eos_token: str | None = None

    # --------------------------------------------------------------------------------------------- configuration
    @property
    def assistant_format(self) -> Format:
        return self.assistant if self.assistant is not None else (CONTENT if self.efficient_eos else CONTENT + EOS)

    @property
    def function_format(self) -> Format:
        return self.function if self.function is not None else self.assistant_format

    @property
    def observation_format(self) -> Format:
        return self.observation if self.observation is not None else self.user

    def with_settings(self, *, default_system: str | None = None, enable_thinking: bool | None = True,
                      preserve_thinking: bool = False, tool_format: str | None = None,
                      allow_special_tokens_in_text: bool = False) -> Template:
        """This template with LLaMA-Factory's data settings applied, as its get_template_and_fix_tokenizer does."""
        changes: dict = {"special_tokens_in_text": allow_special_tokens_in_text}
        if tool_format is not None:
            # LF swaps in a plain function slot along with the tool format.
            plain = CONTENT if self.efficient_eos else CONTENT + EOS
            changes.update(tool_format=tool_format, tools=None, function=plain)
        if default_system is not None:
            changes["default_system"] = default_system
        if self.reasoning:
            changes.update(enable_thinking=enable_thinking, preserve_thinking=preserve_thinking)
        return dataclasses.replace(self, **changes)

    def with_tokens(self, bos_token: str | None, eos_token: str | None) -> Template:
        """This template rendering a tokenizer's BOS / EOS (no checks; get_template(name, tokenizer) checks).

        EOS is what LLaMA-Factory's fix_special_tokens leaves: the first stop word with replace_eos, else the
        tokenizer's, else <|endoftext|>.
        """
        bos_token, eos_token = self._effective_tokens(bos_token, eos_token)
        return dataclasses.replace(self, bos_token=bos_token, eos_token=eos_token)

    def _effective_tokens(self, bos_token: str | None, eos_token: str | None) -> tuple[str | None, str]:
        if self.replace_eos and self.stop_words:
            eos_token = self.stop_words[0]
        return bos_token, eos_token or "<|endoftext|>"

    def literal_texts(self) -> list[str]:
        """Every fixed text the template writes (for finding its control tokens)."""
        return [text for fmt in self._formats() for text in slots.literal_texts(fmt)]

    # --------------------------------------------------------------------------------------------- rendering
    def render_turns(self, messages: list[dict], system: str | None = None, tools: str | None = None, *,
                     discard_history_thoughts: bool = False) -> list[tuple[str, str]]:
        """(prompt text, answer text) per assistant turn, as LLaMA-Factory's encode_multiturn pairs them.

        `discard_history_thoughts`: drop the thoughts of all but the last answer (LF does this for mask_history).
        """
        turns, system, tools = self._prepare(messages, system, tools, escape_for=None)
        pairs = thinking.multiturn(self, turns, lambda t: self._elements(t, system, tools), discard_history_thoughts)
        return [(self._text(prompt), self._text(answer)) for prompt, answer in pairs]

    def render_oneturn(self, messages: list[dict], system: str | None = None,
                       tools: str | None = None) -> tuple[str, str]:
        """(prompt text, answer text) of the last answer, as LF's encode_oneturn (DPO pairs, chat prompts)."""
        turns, system, tools = self._prepare(messages, system, tools, escape_for=None)
        prompt, answer = thinking.oneturn(self, turns, lambda t: self._elements(t, system, tools))
        return self._text(prompt), self._text(answer)

    def render(self, messages: list[dict], system: str | None = None, tools: str | None = None,
               add_generation_prompt: bool = False) -> str:
        """The conversation as text: as trained (every turn), or, with add_generation_prompt, the chat prompt."""
        if add_generation_prompt:
            return self.render_oneturn(_with_empty_answer(messages), system, tools)[0]
        if len(normalize_messages(messages, system)[0]) % 2:  # ends with a user turn, no generation prompt
            return self.render_history(messages, system, tools)
        return "".join(prompt + answer for prompt, answer in self.render_turns(messages, system, tools))

    def render_history(self, messages: list[dict], system: str | None = None, tools: str | None = None) -> str:
        """The messages as a chat prompt shows earlier turns: each answer as history (a reasoning template drops its
        thought unless preserve_thinking, and adds no empty one), no generation prompt."""
        turns, system, tools = self._prepare(messages, system, tools, escape_for=None)
        turns = thinking.history_view(self, turns)
        return "".join(self._text(group) for group in self._elements(turns, system, tools))

    # --------------------------------------------------------------------------------------------- token ids
    def encode_multiturn(self, tokenizer, messages: list[dict], system: str | None = None, tools: str | None = None,
                         *, discard_history_thoughts: bool = False) -> list[tuple[list[int], list[int]]]:
        """(prompt_ids, answer_ids) per assistant turn: the ids LLaMA-Factory's encode_multiturn gives."""
        bound = self._bound(tokenizer)
        turns, system, tools = bound._prepare(messages, system, tools, escape_for=tokenizer)
        pairs = thinking.multiturn(bound, turns, lambda t: bound._elements(t, system, tools),
                                   discard_history_thoughts)
        ids = bound._encoder(tokenizer).encode([group for pair in pairs for group in pair])
        return [(ids[i], ids[i + 1]) for i in range(0, len(ids), 2)]

    def encode_oneturn(self, tokenizer, messages: list[dict], system: str | None = None,
                       tools: str | None = None) -> tuple[list[int], list[int]]:
        """(prompt_ids, answer_ids) of the last answer: the ids LLaMA-Factory's encode_oneturn gives."""
        bound = self._bound(tokenizer)
        turns, system, tools = bound._prepare(messages, system, tools, escape_for=tokenizer)
        prompt, answer = thinking.oneturn(bound, turns, lambda t: bound._elements(t, system, tools))
        prompt_ids, answer_ids = bound._encoder(tokenizer).encode([prompt, answer])
        return prompt_ids, answer_ids

    def encode_turns(self, tokenizer, messages: list[dict], system: str | None = None, tools: str | None = None,
                     *, mask_history: bool = False) -> list[tuple[list[int], list[int]]]:
        """Training pairs for SFT: encode_multiturn, dropping earlier thoughts with mask_history as LF does."""
        discard = mask_history and not self.preserve_thinking
        return self.encode_multiturn(tokenizer, messages, system, tools, discard_history_thoughts=discard)

    def encode_prompt(self, tokenizer, messages: list[dict], system: str | None = None,
                      tools: str | None = None) -> list[int]:
        """Token ids to generate from (LF's chat: encode_oneturn with an empty answer appended)."""
        return self.encode_oneturn(tokenizer, _with_empty_answer(messages), system, tools)[0]

    def eos_token_id(self, tokenizer) -> int | None:
        """The id of the EOS this template ends sequences with (the replaced one with replace_eos)."""
        return self._bound(tokenizer)._encoder(tokenizer).eos_id

    def stop_token_ids(self, tokenizer) -> list[int]:
        """Token ids that end generation: the EOS and every stop word the tokenizer knows as one token."""
        eos = self.eos_token_id(tokenizer)
        ids = [eos] if eos is not None else []
        for word in self.stop_words:
            if is_single_token(tokenizer, word) and tokenizer.convert_tokens_to_ids(word) not in ids:
                ids.append(tokenizer.convert_tokens_to_ids(word))
        return ids

    # --------------------------------------------------------------------------------------------- internals
    def _prepare(self, messages: list[dict], system: str | None, tools: str | None,
                 escape_for) -> tuple[list[Message], str, str | None]:
        """Messages as (role, content), the system prompt, tools; data text marked for escaping when encoding for
        a tokenizer (`escape_for`) unless the template allows control tokens in text."""
        turns, system = normalize_messages(messages, system)
        if escape_for is not None and not self.special_tokens_in_text:
            pattern = control_pattern(control_tokens(escape_for), _allowed_words(self))
            if pattern is not None:
                turns = [(role, mark_control_strings(content, pattern)) for role, content in turns]
                system = mark_control_strings(system, pattern) if system else system
                tools = mark_control_strings(tools, pattern) if tools else tools
        return turns, system or self.default_system, tools

    def _elements(self, turns: list[Message], system: str, tools: str | None) -> list[list[Element]]:
        """Slot elements per message, as LF's Template._encode (and Llama2Template._encode) lays them out."""
        groups = []
        for index, (role, content) in enumerate(turns):
            elements: list[Element] = []
            system_text = ""
            if index == 0:
                elements += slots.fill(self.prefix)
                if system or tools:
                    filled = slots.fill(self.system, system + (self._tool_text(tools) if tools else ""))
                    if self.system_in_user:
                        system_text = filled[0] if filled and isinstance(filled[0], str) else ""
                    else:
                        elements += filled
            if role == USER:
                elements += slots.fill(self.user, system_text + content)
            elif role == ASSISTANT:
                elements += slots.fill(self.assistant_format, content)
            elif role == OBSERVATION:
                elements += slots.fill(self.observation_format, content)
            else:
                elements += slots.fill(self.function_format, self._function_text(content))
            groups.append(elements)
        return groups

    def _tool_text(self, tools: str) -> str:
        if self.tools is not None:
            return slots.fill(self.tools, tools)[0]
        return format_tools(self.tool_format, tools)

    def _function_text(self, content: str) -> str:
        """A function call as LF's FunctionFormatter writes it: any thought or text around a tool-call block is kept
        in front of the formatted call (Llama2-style templates pass neither word pair, so the content is pure JSON)."""
        if self.system_in_user:
            return format_function_call(self.tool_format, content)
        call = _between(self.tool_call_words, content)
        if call:
            return content.replace(call.group(0), "") + format_function_call(self.tool_format, call.group(1))
        thought = _between(self.thought_words, content)
        if thought:
            json_part = content.replace(thought.group(0), "")
            return thought.group(0) + format_function_call(self.tool_format, json_part)
        return format_function_call(self.tool_format, content)

    def _text(self, elements: list[Element]) -> str:
        if any(not isinstance(e, str) and e[0] in ("bos", "eos") for e in elements) and self.eos_token is None:
            raise DataError(f"Template {self.name!r} writes the tokenizer's BOS/EOS token: get it with the "
                            "tokenizer (get_template(name, tokenizer)) or call with_tokens(bos, eos) first.")
        return strip_marks("".join(slots.element_text(e, self.bos_token, self.eos_token) for e in elements))

    def _encoder(self, tokenizer) -> SlotEncoder:
        return SlotEncoder(tokenizer, self.bos_token, self.eos_token)

    def _bound(self, tokenizer) -> Template:
        if self._effective_tokens(tokenizer.bos_token, tokenizer.eos_token) == (self.bos_token, self.eos_token):
            return self  # get_template(name, tokenizer) already bound and checked it
        return self.bind(tokenizer)

    # --------------------------------------------------------------------------------------------- tokenizer
    def bind(self, tokenizer) -> Template:
        """This template rendering the tokenizer's BOS/EOS; DataError when the tokenizer does not fit the template."""
        if self.stop_words and not is_single_token(tokenizer, self.stop_words[0]):
            raise DataError(
                f"Template {self.name!r} ends answers with {self.stop_words[0]}, which this tokenizer does not know as "
                "a token, so the model could never learn to stop. The template does not match the model: use "
                "template: auto (the model's own chat template) or the template of the model's family.")
        bound = self.with_tokens(tokenizer.bos_token, tokenizer.eos_token)
        uses_eos = self.efficient_eos or any(e == ("eos", "") for fmt in self._formats() for e in slots.parse(fmt))
        if uses_eos and tokenizer.eos_token is None and not is_single_token(tokenizer, bound.eos_token):
            raise DataError(f"Template {self.name!r} needs an EOS token, but the tokenizer has none.")
        return bound

    def _formats(self) -> list[Format]:
        return [fmt for fmt in (self.prefix, self.user, self.assistant_format, self.system, self.function_format,
                                self.observation_format, self.tools) if fmt is not None]

    def fix_tokenizer(self, tokenizer) -> list[engine.messages.Message]:
        """Make the tokenizer serve this template (LF's fix_special_tokens + fix_jinja_template); says what changed.

        replace_eos makes the first stop word the EOS; a missing EOS becomes <|endoftext|> and a missing pad token
        the EOS; the chat template becomes `jinja`, or stays the tokenizer's own when the template cannot be
        written as Jinja (the change list says why).
        """
        from engine.data.templates.jinja import jinja_problem_message

        bound = self.bind(tokenizer)
        changes = []
        if tokenizer.eos_token != bound.eos_token:
            tokenizer.eos_token = bound.eos_token
            changes.append(engine.messages.Message("template.eos_token", f"eos_token -> {bound.eos_token}",
                                                   {"token": bound.eos_token}))
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
            changes.append(engine.messages.Message("template.pad_token", f"pad_token -> {tokenizer.eos_token}",
                                                   {"token": tokenizer.eos_token}))
        jinja = bound.jinja
        if jinja is None:
            problem = jinja_problem_message(bound)
            changes.append(engine.messages.Message("template.chat_template_kept",
                                                   f"chat_template kept: {problem.text}", {"problem": problem}))
        elif tokenizer.chat_template != jinja:
            tokenizer.chat_template = jinja
            changes.append(engine.messages.Message("template.chat_template",
                                                   f"chat_template -> template {self.name!r}", {"template": self.name}))
        return changes

    @property
    def jinja_problem(self) -> str | None:
        """Why this template cannot be written as a Jinja chat template, or None when it can."""
        from engine.data.templates.jinja import jinja_problem

        return jinja_problem(self)

    @property
    def jinja(self) -> str | None:
        """A Jinja chat template rendering messages as LF's chat does (None: see jinja_problem)."""
        from engine.data.templates.jinja import to_jinja

        return None if self.jinja_problem else to_jinja(self)


def _between(words: tuple[str, str], content: str):
    return re.search(f"{re.escape(words[0])}(.*?){re.escape(words[1])}", content, re.DOTALL)


def _allowed_words(template: Template) -> tuple[str, ...]:
    """Sequences data may spell even when they hold control tokens: the template's own thought and tool-call words
    (gpt-oss reasoning is written "<|channel|>analysis<|message|>..." in the data itself)."""
    return tuple(word.strip() for word in (*template.thought_words, *template.tool_call_words) if word.strip())


def normalize_messages(messages: list[dict], system: str | None = None) -> tuple[list[Message], str | None]:
    """(role, content) pairs in LF's roles, and the system prompt (a leading system message when none is given).

    Accepts LF's roles (user, assistant, observation, function), the engine's (function_call), OpenAI's (system,
    tool, assistant with tool_calls) and sharegpt's tags (human, gpt, ...).
    """
    if messages and messages[0].get("role") == "system":
        system = system or messages[0].get("content") or ""
        messages = messages[1:]
    turns = []
    for message in messages:
        role = ROLE_ALIASES.get(message.get("role"))
        content = message.get("content")
        if role == ASSISTANT and message.get("tool_calls"):
            role, content = FUNCTION, tool_calls_text(message["tool_calls"])
        if role in (None, "system"):
            raise DataError(f"Unknown message role {message.get('role')!r} (a system message only goes first): use "
                            "user, assistant, observation (tool) or function (function_call).")
        if content is not None and not isinstance(content, str):
            raise DataError(f"A {role} message's content must be text, not {type(content).__name__}.")
        turns.append((role, content or ""))
    return turns, system


def _with_empty_answer(messages: list[dict]) -> list[dict]:
    return list(messages) + [{"role": "assistant", "content": ""}]


def is_single_token(tokenizer, text: str) -> bool:
    token_id = tokenizer.convert_tokens_to_ids(text)
    return (token_id is not None and token_id != tokenizer.unk_token_id
            and len(tokenizer.encode(text, add_special_tokens=False)) == 1)
