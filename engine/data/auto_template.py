"""template: auto -- the model's own Jinja chat template, rendered through `tokenizer.apply_chat_template`.

Training needs to know where each answer starts and ends. A Jinja template only renders whole conversations, so
the spans are found by prefix differences: render the conversation up to a user turn with the generation prompt,
then up to the answer after it; the extra text is that answer. This needs a prefix-stable template (rendering more
messages only appends text). Templates that rewrite history (e.g. Qwen3's official one drops the thoughts of earlier
turns) are refused with a message naming the fix: pick the family's named template.

Control-token strings inside message text are marked before rendering and encoded as plain text afterwards, as for
named templates (engine.data.special_tokens), unless allowed.
"""

from __future__ import annotations

from engine.data.special_tokens import control_pattern, control_tokens, encode_marked, is_marked, mark_control_strings
from engine.errors import DataError
from engine.jsonio import loads_json

_HF_ROLES = {"user": "user", "assistant": "assistant", "function_call": "assistant", "function": "assistant",
             "observation": "tool", "tool": "tool"}


def encode_texts(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of rendered pieces (no BOS added): one batched call, marked pieces encoded with their marks."""
    plain = [text for text in texts if text and not is_marked(text)]
    ids = dict(zip(plain, tokenizer(plain, add_special_tokens=False)["input_ids"])) if plain else {}
    return [ids[text] if text in ids else (encode_marked(tokenizer, text) if text else []) for text in texts]


class TokenizerTemplate:
    """A template backed by the tokenizer's chat template (the methods of a named Template that training uses)."""

    name = "auto"
    efficient_eos = False
    reasoning = False
    preserve_thinking = False

    def __init__(self, tokenizer, *, default_system: str | None = None, enable_thinking: bool | None = True,
                 special_tokens_in_text: bool = False) -> None:
        self.tokenizer = tokenizer
        self.special_tokens_in_text = special_tokens_in_text
        self.stop_words: tuple[str, ...] = (tokenizer.eos_token,) if tokenizer.eos_token else ()
        self.default_system = default_system or ""
        """Replaces the chat template's own default when set (LF's default_system)."""
        self.enable_thinking = enable_thinking
        """Passed to chat templates that read it (Qwen3's) when not true."""

    @property
    def jinja(self) -> str:
        """The tokenizer's own chat template."""
        return self.tokenizer.chat_template

    jinja_problem = None

    def _hf_messages(self, messages: list[dict], system: str | None) -> list[dict]:
        out = [{"role": "system", "content": system}] if system else []
        for message in messages:
            role = _HF_ROLES.get(message["role"], message["role"])
            out.append({"role": role, "content": message["content"]})
        return out

    def _marked(self, messages: list[dict], system: str | None, tools: str | None):
        if self.special_tokens_in_text:
            return messages, system, tools
        pattern = control_pattern(control_tokens(self.tokenizer))
        messages = [dict(m, content=mark_control_strings(m["content"], pattern)) for m in messages]
        return messages, mark_control_strings(system, pattern), mark_control_strings(tools, pattern)

    def _render(self, messages: list[dict], system: str | None, tools: str | None,
                add_generation_prompt: bool = False) -> str:
        kwargs = {"tools": loads_json(tools)} if tools else {}
        if self.enable_thinking is not True:
            kwargs["enable_thinking"] = False
        system = system or self.default_system or None
        try:
            return self.tokenizer.apply_chat_template(
                self._hf_messages(messages, system), tokenize=False, add_generation_prompt=add_generation_prompt,
                **kwargs)
        except Exception as exc:  # jinja raises its own errors (TemplateError, raise_exception(...))
            raise DataError(f"The model's chat template failed on this conversation: {exc}. Set template to a "
                            "named template instead of auto.") from None

    def render(self, messages: list[dict], system: str | None = None, tools: str | None = None,
               add_generation_prompt: bool = False) -> str:
        """The conversation as the model's chat template renders it."""
        return self._render(messages, system, tools, add_generation_prompt)

    def _turn_texts(self, messages: list[dict], system: str | None,
                    tools: str | None) -> tuple[list[tuple[str, str]], str]:
        pairs: list[tuple[str, str]] = []
        done = ""
        for index, message in enumerate(messages):
            if _HF_ROLES.get(message["role"]) != "assistant":
                continue
            with_prompt = self._render(messages[:index], system, tools, add_generation_prompt=True)
            with_answer = self._render(messages[: index + 1], system, tools)
            if not with_prompt.startswith(done) or not with_answer.startswith(with_prompt):
                raise DataError("The model's chat template is not prefix-stable (it rewrites earlier turns), so "
                                "answer spans cannot be found. Set template to the family's named template "
                                "(e.g. qwen3, llama3).")
            pairs.append((with_prompt[len(done):], with_answer[len(with_prompt):]))
            done = with_answer
        full = self._render(messages, system, tools)
        return pairs, full[len(done):] if full.startswith(done) else full

    def render_turns(self, messages: list[dict], system: str | None = None,
                     tools: str | None = None) -> list[tuple[str, str]]:
        """[(prompt text, answer text)] per assistant-side turn, found by prefix differences."""
        return self._turn_texts(messages, system, tools)[0]

    def encode_multiturn(self, tokenizer, messages: list[dict], system: str | None = None,
                         tools: str | None = None) -> list[tuple[list[int], list[int]]]:
        """(prompt_ids, response_ids) for each assistant turn."""
        pairs, _ = self._turn_texts(*self._marked(messages, system, tools))
        ids = encode_texts(tokenizer, [text for pair in pairs for text in pair])
        return [(ids[i], ids[i + 1]) for i in range(0, len(ids), 2)]

    def encode_turns(self, tokenizer, messages: list[dict], system: str | None = None, tools: str | None = None,
                     *, mask_history: bool = False) -> list[tuple[list[int], list[int]]]:
        """Training pairs for SFT (the chat template decides what earlier turns show)."""
        return self.encode_multiturn(tokenizer, messages, system, tools)

    def encode_oneturn(self, tokenizer, messages: list[dict], system: str | None = None,
                       tools: str | None = None) -> tuple[list[int], list[int]]:
        """(prompt_ids, answer_ids) of the last answer."""
        pairs = self.encode_multiturn(tokenizer, messages, system, tools)
        prompt = [token for source, target in pairs[:-1] for token in source + target] + pairs[-1][0]
        return prompt, pairs[-1][1]

    def encode_prompt(self, tokenizer, messages: list[dict], system: str | None = None,
                      tools: str | None = None) -> list[int]:
        """Token ids to generate from, ending with the generation prompt."""
        messages, system, tools = self._marked(messages, system, tools)
        return encode_texts(tokenizer, [self._render(messages, system, tools, add_generation_prompt=True)])[0]

    def eos_token_id(self, tokenizer) -> int | None:
        return tokenizer.eos_token_id

    def stop_token_ids(self, tokenizer) -> list[int]:
        """The tokenizer's EOS id(s)."""
        return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []

    def fix_tokenizer(self, tokenizer) -> list[str]:
        """Only a pad token may be missing; the chat template is already the tokenizer's own."""
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
            return [f"pad_token -> {tokenizer.eos_token}"]
        return []
