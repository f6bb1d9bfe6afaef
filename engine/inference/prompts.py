"""Validation prompt files: plain text (one prompt per line), or JSON / JSONL rows in the common shapes."""

from __future__ import annotations

import json
from pathlib import Path

from engine.errors import DataError


def read_prompts(path: str | Path) -> list[list[dict]]:
    """Conversations to answer, each ending with a user message.

    ``.txt``: one prompt per non-empty line. ``.json`` (a list) or ``.jsonl``: rows with ``prompt``, or alpaca
    ``instruction`` (+ ``input``), or OpenAI-style ``messages``, or a bare string.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"Prompt file {path} does not exist. Give a .txt file with one prompt per line, or .jsonl.")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{path} is not UTF-8 text. Save it as UTF-8.") from None
    if path.suffix.lower() in (".jsonl", ".json"):
        rows = _json_rows(path, text)
        conversations = [_conversation(row, path, number) for number, row in enumerate(rows, 1)]
    else:
        conversations = [[{"role": "user", "content": line.strip()}] for line in text.splitlines() if line.strip()]
    if not conversations:
        raise DataError(f"{path} holds no prompts. Write one prompt per line (.txt) or one JSON object per line.")
    return conversations


def prompt_text(conversation: list[dict]) -> str:
    """The last user message: what a validation row shows as its prompt."""
    users = [m["content"] for m in conversation if m.get("role") == "user"]
    return users[-1] if users else ""


def _json_rows(path: Path, text: str) -> list:
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}).") from None
        if not isinstance(data, list):
            raise DataError(f"{path} must hold a JSON list of prompts.")
        return data
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path} line {number} is not valid JSON ({exc.msg}).") from None
    return rows


def _conversation(row, path: Path, number: int) -> list[dict]:
    if isinstance(row, str) and row.strip():
        return [{"role": "user", "content": row}]
    if isinstance(row, dict):
        if isinstance(row.get("prompt"), str) and row["prompt"].strip():
            return [{"role": "user", "content": row["prompt"]}]
        if isinstance(row.get("instruction"), str) and row["instruction"].strip():
            content = row["instruction"] + (f"\n{row['input']}" if row.get("input") else "")
            return [{"role": "user", "content": content}]
        messages = row.get("messages")
        if isinstance(messages, list) and messages:
            # A trailing assistant message is the reference answer, not part of the prompt.
            if messages[-1].get("role") == "assistant":
                messages = messages[:-1]
            if messages and messages[-1].get("role") == "user":
                return [{"role": m["role"], "content": m["content"]} for m in messages]
    raise DataError(f"{path} row {number}: expected a string or an object with prompt, instruction or messages "
                    "(ending with a user message).")
