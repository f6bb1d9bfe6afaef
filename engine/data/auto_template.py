"""template: auto -- the model's own Jinja chat template, rendered through `tokenizer.apply_chat_template`.

Training needs to know where each answer starts and ends. A Jinja template only renders whole conversations, so
the spans are found by prefix differences: render the conversation up to a user turn with the generation prompt,
then up to the answer after it; the extra text is that answer. This needs a prefix-stable template (rendering more
messages only appends text). Templates that rewrite history (e.g. Qwen3's official one drops the thoughts of earlier
turns) are refused with a message naming the fix: pick the family's named template.
"""

from __future__ import annotations

import json

from engine.errors import DataError

_HF_ROLES = {"user": "user", "assistant": "assistant", "function_call": "assistant",
             "observation": "tool", "tool": "tool"}


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of a rendered piece; special-token strings inside it become their single ids, no BOS is added."""
    return tokenizer.encode(text, add_special_tokens=False) if text else []


def encode_pairs(tokenizer, pairs: list[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """encode_text over (prompt, answer) texts in one batched call (the Rust tokenizer runs a batch in parallel)."""
    texts = [text for pair in pairs for text in pair]
    if not texts:
        return []
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    ids = [token_ids if text else [] for text, token_ids in zip(texts, ids)]
    return [(ids[i], ids[i + 1]) for i in range(0, len(ids), 2)]


class TokenizerTemplate:
    """A template backed by the tokenizer's chat template (same methods as `Template`)."""

    name = "auto"
    efficient_eos = False
    reasoning = False

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.stop_words: tuple[str, ...] = (tokenizer.eos_token,) if tokenizer.eos_token else ()
        self.default_system = ""

    @property
    def jinja(self) -> str:
        """The tokenizer's own chat template."""
        return self.tokenizer.chat_template

    def _hf_messages(self, messages: list[dict], system: str | None) -> list[dict]:
        out = [{"role": "system", "content": system}] if system else []
        for message in messages:
            role = _HF_ROLES.get(message["role"], message["role"])
            out.append({"role": role, "content": message["content"]})
        return out

    def render(self, messages: list[dict], system: str | None = None, tools: str | None = None,
               add_generation_prompt: bool = False) -> str:
        """The conversation as the model's chat template renders it."""
        kwargs = {"tools": json.loads(tools)} if tools else {}
        try:
            return self.tokenizer.apply_chat_template(
                self._hf_messages(messages, system), tokenize=False, add_generation_prompt=add_generation_prompt,
                **kwargs)
        except Exception as exc:  # jinja raises its own errors (TemplateError, raise_exception(...))
            raise DataError(f"The model's chat template failed on this conversation: {exc}. Set template to a "
                            "named template instead of auto.") from None

    def turn_texts(self, messages: list[dict], system: str | None = None,
                   tools: str | None = None) -> tuple[list[tuple[str, str]], str]:
        """[(prompt text, answer text)] per assistant-side turn, found by prefix differences."""
        pairs: list[tuple[str, str]] = []
        done = ""
        for index, message in enumerate(messages):
            if message["role"] not in ("assistant", "function_call"):
                continue
            with_prompt = self.render(messages[:index], system, tools, add_generation_prompt=True)
            with_answer = self.render(messages[: index + 1], system, tools)
            if not with_prompt.startswith(done) or not with_answer.startswith(with_prompt):
                raise DataError("The model's chat template is not prefix-stable (it rewrites earlier turns), so "
                                "answer spans cannot be found. Set template to the family's named template "
                                "(e.g. qwen3, llama3).")
            pairs.append((with_prompt[len(done):], with_answer[len(with_prompt):]))
            done = with_answer
        full = self.render(messages, system, tools)
        return pairs, full[len(done):] if full.startswith(done) else full

    def encode_turns(self, tokenizer, messages: list[dict], system: str | None = None,
                     tools: str | None = None) -> list[tuple[list[int], list[int]]]:
        """(prompt_ids, response_ids) for each assistant turn."""
        pairs, _ = self.turn_texts(messages, system, tools)
        return encode_pairs(tokenizer, pairs)

    def encode_prompt(self, tokenizer, messages: list[dict], system: str | None = None,
                      tools: str | None = None) -> list[int]:
        """Token ids to generate from, ending with the generation prompt."""
        return encode_text(tokenizer, self.render(messages, system, tools, add_generation_prompt=True))

    def stop_token_ids(self, tokenizer) -> list[int]:
        """The tokenizer's EOS id(s)."""
        return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []

    def fix_tokenizer(self, tokenizer) -> list[str]:
        """Only a pad token may be missing; the chat template is already the tokenizer's own."""
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
            return [f"pad_token -> {tokenizer.eos_token}"]
        return []
