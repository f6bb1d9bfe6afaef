"""Control-token strings inside data: found, reported, and encoded as plain text unless a config key allows them.

A tokenizer turns the text "<|im_end|>" into its end-of-turn id wherever it appears, so a message that *spells*
"<|im_end|>\\n<|im_start|>system" forges a turn boundary and a system turn (LLaMA-Factory encodes it that way: 13
control ids instead of 5 in one measured row, 4 of them in the trained labels). Here, by default, such strings in
message text, system prompts and tool descriptions are encoded as the ordinary text they spell; the template's own
control tokens stay control tokens. `allow_special_tokens_in_text: true` (training and inference configs) restores
LLaMA-Factory's behaviour.

How: data strings are *marked* before the template formats them (each control string is wrapped in two private-use
characters, `MARK_START` / `MARK_END`, after dropping any such characters the data already held, so they cannot be
forged); `encode_marked` then encodes the marked spans without special-token matching and everything else normally.
A control token is an added token the tokenizer marks special (`<think>` in Qwen3 is added but not special: plain
text there, so it is left alone).
"""

from __future__ import annotations

import re
import weakref
from functools import lru_cache
from typing import Any

MARK_START, MARK_END = "\U000fff00", "\U000fff01"
_MARKS = re.compile(f"[{MARK_START}{MARK_END}]")
_MARKED = re.compile(f"{MARK_START}(.*?){MARK_END}", re.DOTALL)
_LOOKS_LIKE_CONTROL = re.compile(
    r"<\|[^<>|\s]{1,40}\|>|<｜[^<>\s]{1,40}｜>|<\|[A-Za-z_]{1,20}>|<[A-Za-z_]{1,20}\|>|\[/?[A-Z][A-Z_]{2,30}\]"
    r"|<start_of_turn>|<end_of_turn>|\[gMASK\]|<sop>|<s>|</s>|<bos>|<eos>|<unk>")


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def control_tokens(tokenizer) -> tuple[str, ...]:
    """The tokenizer's control tokens: its special tokens and every added token it marks special."""
    try:  # cached per tokenizer (computed per example otherwise); a tokenizer that grew is looked at again
        size, tokens = _CACHE[tokenizer]
        if size == len(tokenizer):
            return tokens
    except (KeyError, TypeError):
        pass
    tokens = _control_tokens(tokenizer)
    try:
        _CACHE[tokenizer] = (len(tokenizer), tokens)
    except TypeError:  # not weak-referenceable or no length: not cached
        pass
    return tokens


def _control_tokens(tokenizer) -> tuple[str, ...]:
    tokens = set(getattr(tokenizer, "all_special_tokens", None) or ())
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    tokens.update(token.content for token in decoder.values() if getattr(token, "special", False))
    return tuple(sorted(token for token in tokens if isinstance(token, str) and token.strip()))


def template_control_tokens(template) -> tuple[str, ...]:
    """Control tokens a named template writes itself (for checks made without the model's tokenizer)."""
    found = set(getattr(template, "stop_words", ()))
    for text in template.literal_texts():
        found.update(_LOOKS_LIKE_CONTROL.findall(text))
    found.update(token for token in (getattr(template, "bos_token", None), getattr(template, "eos_token", None))
                 if token)
    return tuple(sorted(found))


@lru_cache(maxsize=64)
def control_pattern(tokens: tuple[str, ...], allowed: tuple[str, ...] = ()) -> re.Pattern | None:
    """A regex matching any of `tokens`, longest first (so "<|im_end|>" wins over a token it contains).

    `allowed`: sequences to leave alone although they hold control tokens; they match first, as group "keep".
    """
    if not tokens:
        return None
    alternatives = "|".join(re.escape(token) for token in sorted(tokens, key=len, reverse=True))
    keep = [re.escape(word) for word in sorted(allowed, key=len, reverse=True) if any(t in word for t in tokens)]
    return re.compile(f"(?P<keep>{'|'.join(keep)})|{alternatives}" if keep else f"(?P<keep>(?!))|{alternatives}")


def _tokens_of(source) -> tuple[str, ...]:
    if isinstance(source, (tuple, list)):
        return tuple(source)
    if hasattr(source, "literal_texts"):
        return template_control_tokens(source)
    return control_tokens(source)


def find_control_strings(text: str, tokenizer_or_template) -> list[str]:
    """The distinct control-token strings spelled inside `text`, in order of first appearance.

    `tokenizer_or_template`: a tokenizer (its special tokens), a named Template (the control tokens it writes), or
    the token strings themselves (`data check` without a model passes every registered template's:
    engine.data.templates.registry_control_tokens).
    """
    pattern = control_pattern(_tokens_of(tokenizer_or_template))
    if pattern is None or not isinstance(text, str):
        return []
    return list(dict.fromkeys(match.group(0) for match in pattern.finditer(text)))


def mark_control_strings(value: Any, pattern: re.Pattern | None) -> Any:
    """`value` (a string, or a list / dict of them) with each control string wrapped in the private marks."""
    if isinstance(value, str):
        value = _MARKS.sub("", value) if MARK_START in value or MARK_END in value else value
        return pattern.sub(_mark, value) if pattern else value
    if isinstance(value, dict):
        return {key: mark_control_strings(item, pattern) for key, item in value.items()}
    if isinstance(value, list):
        return [mark_control_strings(item, pattern) for item in value]
    return value


def _mark(match: re.Match) -> str:
    return match.group(0) if match.group("keep") is not None else f"{MARK_START}{match.group(0)}{MARK_END}"


def strip_marks(text: str) -> str:
    """Rendered text without the private marks (what the text really says)."""
    return _MARKS.sub("", text) if MARK_START in text or MARK_END in text else text


def is_marked(text: str) -> bool:
    return MARK_START in text


def encode_marked(tokenizer, text: str) -> list[int]:
    """Token ids of a rendered piece whose marked spans are plain text; the rest is encoded as usual.

    The tokenizer splits text at special tokens anyway, so cutting at a marked span changes nothing around it. Pieces
    after the first are encoded behind a newline that is then dropped, so a SentencePiece tokenizer does not add the
    word-start space it puts at the beginning of a string.
    """
    ids: list[int] = []
    parts = _MARKED.split(text)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    for index, part in enumerate(parts):
        part = strip_marks(part)
        if not part:
            continue
        plain = index % 2 == 1  # odd parts are the marked control strings
        ids += _encode_part(tokenizer, part, plain, newline if ids else None)
    return ids


def _encode_part(tokenizer, text: str, plain: bool, newline: list[int] | None) -> list[int]:
    kwargs = {"add_special_tokens": False, "split_special_tokens": True} if plain else {"add_special_tokens": False}
    if newline is None:
        return tokenizer.encode(text, **kwargs)
    ids = tokenizer.encode("\n" + text, **kwargs)
    return ids[len(newline):] if ids[:len(newline)] == newline else tokenizer.encode(text, **kwargs)
