"""Validation prompt files: plain text (one prompt per line), or JSON / JSONL rows in the common shapes."""

from __future__ import annotations

import json
from pathlib import Path

from engine.data.formats import ROLE_ALIASES, alpaca_history
from engine.errors import DataError


def read_prompts(path: str | Path) -> list[list[dict]]:
    """Conversations to answer, each ending with a user message.

    ``.txt``: one prompt per non-empty line. ``.json`` (a list) or ``.jsonl``: rows with ``prompt``, or alpaca
    ``instruction`` (+ ``input``, ``history``, ``system``, as training reads them), or OpenAI-style ``messages``,
    or sharegpt ``conversations`` (from/value), or a bare string. A system prompt comes first as a ``system``
    message (ChatModel.encode renders it as the template's system part).
    """
    return [conversation for conversation, _reference in read_prompt_rows(path)]


def read_prompt_rows(path: str | Path) -> list[tuple[list[dict], str | None]]:
    """(conversation, reference answer) per prompt: a JSON row's trailing assistant message (or its ``output`` /
    ``reference``) is the answer it should get, shown beside the model's; None where the row gives none."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"Prompt file {path} does not exist. Give a .txt file with one prompt per line, or .jsonl.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{path} is not UTF-8 text. Save it as UTF-8.") from None
    if path.suffix.lower() in (".jsonl", ".json"):
        rows = _json_rows(path, text)
        found = [(_conversation(row, path, number), _reference(row)) for number, row in enumerate(rows, 1)]
    else:
        found = [([{"role": "user", "content": line.strip()}], None) for line in text.splitlines() if line.strip()]
    if not found:
        raise DataError(f"{path} holds no prompts. Write one prompt per line (.txt) or one JSON object per line.")
    return found


def prompt_text(conversation: list[dict]) -> str:
    """The last user message: what a validation row shows as its prompt."""
    users = [m["content"] for m in conversation if m.get("role") == "user"]
    return users[-1] if users else ""


def _json_rows(path: Path, text: str) -> list:
    from engine.data.files import JsonReader, JsonTooDeep
    from engine.data.text import find_bad_text

    reader = JsonReader()
    if path.suffix.lower() == ".json":
        chunks = [(None, text)]
    else:
        chunks = [(number, line) for number, line in enumerate(text.split("\n"), 1) if line.strip()]
    rows = []
    for number, chunk in chunks:
        where = f"{path}" + (f" line {number}" if number else "")
        try:
            value = reader.decode_all(chunk)
        except JsonTooDeep:
            raise DataError(f"{where} nests lists or objects too deeply to be a prompt.") from None
        except ValueError as exc:
            detail = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) else str(exc)[:80]
            raise DataError(f"{where} is not valid JSON ({detail}).") from None
        bad = find_bad_text(value)
        if bad is not None:
            raise DataError(f"{where} holds text that is not valid Unicode (a lone surrogate \\u"
                            f"{ord(bad[1][bad[2]]):04x}). Fix or remove it.")
        if number is None and not isinstance(value, list):
            raise DataError(f"{path} must hold a JSON list of prompts.")
        rows.extend(value if number is None else [value])
    return rows


def _conversation(row, path: Path, number: int) -> list[dict]:
    if isinstance(row, str) and row.strip():
        return [{"role": "user", "content": row}]
    if isinstance(row, dict):
        system = [{"role": "system", "content": row["system"]}] \
            if isinstance(row.get("system"), str) and row["system"].strip() else []
        if isinstance(row.get("prompt"), str) and row["prompt"].strip():
            return system + [{"role": "user", "content": row["prompt"]}]
        if isinstance(row.get("instruction"), str) and row["instruction"].strip():
            extra = row.get("input")
            content = row["instruction"] + (f"\n{extra}" if isinstance(extra, str) and extra else "")
            history = alpaca_history(row, "history", f"{path} row {number}")  # as training reads it
            return system + history + [{"role": "user", "content": content}]
        messages = _messages(row)
        if messages and all(_is_message(m) for m in messages):
            # A trailing assistant message is the reference answer, not part of the prompt.
            if messages[-1]["role"] == "assistant":
                messages = messages[:-1]
            if messages and messages[0]["role"] == "system":
                system, messages = messages[:1], messages[1:]
            if messages and messages[-1]["role"] == "user":
                return system + [{"role": m["role"], "content": m["content"]} for m in messages]
    raise DataError(f"{path} row {number}: expected a string or an object with prompt, instruction, messages or "
                    "conversations (each message an object with text role and content, or from and value, ending "
                    "with a user message).")


def _messages(row: dict) -> list | None:
    """OpenAI ``messages`` as they are, or sharegpt ``conversations`` (from/value, LF's default tags) as messages."""
    if isinstance(row.get("messages"), list):
        return row["messages"] or None
    turns = row.get("conversations")
    if not isinstance(turns, list) or not turns:
        return None
    return [{"role": ROLE_ALIASES.get(t.get("from"), t.get("from")), "content": t.get("value")}
            if isinstance(t, dict) and "from" in t else t for t in turns]


def _reference(row) -> str | None:
    if not isinstance(row, dict):
        return None
    for key in ("reference", "output"):
        if isinstance(row.get(key), str) and row[key].strip():
            return row[key]
    messages = _messages(row)
    if messages and _is_message(messages[-1]) and messages[-1]["role"] == "assistant":
        return messages[-1]["content"]
    return None


def _is_message(message) -> bool:
    return isinstance(message, dict) and isinstance(message.get("role"), str) and \
        isinstance(message.get("content"), str)
