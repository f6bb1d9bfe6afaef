"""Template formats: parsed into slot elements, filled with message text, rendered to text or token ids.

A format is a string, or a tuple of strings where LLaMA-Factory keeps several string slots side by side (each slot
is tokenized on its own, which can give other ids than the joined text). Markers:

    {{content}}          the message text (replaced once per slot)
    {{bos_token}}        the tokenizer's BOS token (nothing when it has none)
    {{eos_token}}        the tokenizer's EOS token (after the template's EOS replacement)
    {{token:<|user|>}}   that token's id, whatever the text would tokenize to

Markers are resolved in the format before any message text goes in, so text that spells "{{eos_token}}" stays text.
Token ids come slot by slot, exactly as LLaMA-Factory's Template._convert_elements_to_ids builds them.
"""

from __future__ import annotations

import re
from functools import lru_cache

from engine.data.special_tokens import encode_marked, is_marked

CONTENT = "{{content}}"
BOS, EOS = "{{bos_token}}", "{{eos_token}}"
_MARKER = re.compile(r"(\{\{bos_token\}\}|\{\{eos_token\}\}|\{\{token:.+?\}\})")

Format = str | tuple[str, ...]
Element = str | tuple[str, str]
"""A text slot, or a special slot: ("bos", ""), ("eos", "") or ("token", "<|user|>")."""


def token(text: str) -> str:
    """The marker for one token inserted by id (LLaMA-Factory's {"token": text} slot)."""
    return "{{token:" + text + "}}"


@lru_cache(maxsize=1024)
def parse(fmt: Format) -> tuple[Element, ...]:
    """The format's slots in order; special markers become ("bos"|"eos"|"token", value) elements."""
    elements: list[Element] = []
    for slot in (fmt,) if isinstance(fmt, str) else fmt:
        for part in _MARKER.split(slot):
            if part == BOS:
                elements.append(("bos", ""))
            elif part == EOS:
                elements.append(("eos", ""))
            elif part.startswith("{{token:"):
                elements.append(("token", part[len("{{token:"):-2]))
            elif part:
                elements.append(part)
    return tuple(elements)


def fill(fmt: Format, content: str = "") -> list[Element]:
    """The format's elements with `content` in place of the first {{content}} of each text slot."""
    return [element.replace(CONTENT, content, 1) if isinstance(element, str) else element for element in parse(fmt)]


def literal_texts(fmt: Format | None) -> list[str]:
    """The fixed text of a format (its text slots without the content marker, and its token slots)."""
    if fmt is None:
        return []
    out = []
    for element in parse(fmt):
        if isinstance(element, str):
            out.extend(part for part in element.split(CONTENT) if part)
        elif element[0] == "token":
            out.append(element[1])
    return out


def element_text(element: Element, bos: str | None, eos: str | None) -> str:
    """An element as text: text slots as they are, special slots as their token strings."""
    if isinstance(element, str):
        return element
    kind, value = element
    if kind == "token":
        return value
    return (bos if kind == "bos" else eos) or ""


class SlotEncoder:
    """Token ids of elements for one tokenizer: text slots tokenized one by one, special slots mapped to ids."""

    def __init__(self, tokenizer, bos_token: str | None, eos_token: str | None) -> None:
        self.tokenizer = tokenizer
        self.bos_id = tokenizer.bos_token_id if bos_token else None
        if eos_token is None:
            self.eos_id = None
        elif eos_token == tokenizer.eos_token:
            self.eos_id = tokenizer.eos_token_id
        else:  # the template replaced EOS (LF's replace_eos): the replacement's id
            self.eos_id = tokenizer.convert_tokens_to_ids(eos_token)

    def encode(self, groups: list[list[Element]]) -> list[list[int]]:
        """One id list per group (per message), every text slot encoded on its own in a single batched call."""
        texts = [element for group in groups for element in group if isinstance(element, str) and element]
        encoded = self._batch([text for text in texts if not is_marked(text)])
        out = []
        for group in groups:
            ids: list[int] = []
            for element in group:
                if isinstance(element, str):
                    if element:
                        ids += encoded[element] if element in encoded else encode_marked(self.tokenizer, element)
                elif element[0] == "token":
                    ids.append(self.tokenizer.convert_tokens_to_ids(element[1]))
                elif element[0] == "bos" and self.bos_id is not None:
                    ids.append(self.bos_id)
                elif element[0] == "eos" and self.eos_id is not None:
                    ids.append(self.eos_id)
            out.append(ids)
        return out

    def _batch(self, texts: list[str]) -> dict[str, list[int]]:
        # One call for all slots (the Rust tokenizer runs a batch in parallel); each text is still encoded alone.
        unique = list(dict.fromkeys(texts))
        if not unique:
            return {}
        return dict(zip(unique, self.tokenizer(unique, add_special_tokens=False)["input_ids"]))
