"""Row repairs behind `convert_file`: canonical field names, known role names, alternating turns.

Every repair is mechanical and reported as a note; nothing is guessed from the text itself. Alpaca rows keep the
alpaca format with LLaMA-Factory's default field names; conversations (sharegpt or openai) become sharegpt rows
with the default tags, which register with {"formatting": "sharegpt"} alone.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from typing import Any

from engine.data.formats import (ASSISTANT_SIDE, FUNCTION, OBSERVATION, ROLE_ALIASES, TOOL_RESPONSE_JOIN, USER,
                                 USER_SIDE)
from engine.data.text import loads_json
from engine.messages import Message

ALPACA_FIELDS: dict[str, tuple[str, ...]] = {
    "instruction": ("instruction", "prompt", "question"),
    "input": ("input", "context"),
    "output": ("output", "response", "answer", "completion"),
    "system": ("system", "system_prompt"),
    "history": ("history",),
    "chosen": ("chosen",),
    "rejected": ("rejected",),
}
_SHAREGPT_TAGS = {USER: "human", "assistant": "gpt", OBSERVATION: "observation", FUNCTION: "function_call"}


def fill_row(value: Any, values: dict[str, str], pattern: re.Pattern) -> Any:
    """`value` with every {{name}} in its strings replaced by values[name] (unknown names stay)."""
    if isinstance(value, str):
        return pattern.sub(lambda match: values.get(match.group(1), match.group(0)), value)
    if isinstance(value, dict):
        return {key: fill_row(item, values, pattern) for key, item in value.items()}
    if isinstance(value, list):
        return [fill_row(item, values, pattern) for item in value]
    return value


class _Notes(Counter):
    """What a repair changed, counted per note; ``coded`` keeps each note as an engine.messages.Message."""

    def __init__(self) -> None:
        super().__init__()
        self.coded: dict[str, Message] = {}

    def add(self, code: str, text: str, **fields: Any) -> None:
        self[text] += 1
        self.coded.setdefault(text, Message(f"data.repair.{code}", text, fields))


def repair_rows(rows: list[Any], file_format: str, ranking: bool) -> tuple[list[dict], list[Message]]:
    """Repaired rows and notes on what changed (rows that are not objects are left out), each with its row count."""
    notes = _Notes()
    repaired = []
    for row in rows:
        if not isinstance(row, dict):
            notes.add("not_objects", "left out rows that are not objects")
            continue
        if file_format == "alpaca":
            repaired.append(_repair_alpaca(row, notes))
        else:
            fixed = _repair_conversation(row, ranking, notes)
            if fixed is not None:
                repaired.append(fixed)
    return repaired, [Message("data.repair.counted", f"{note} ({count} row{'s' if count > 1 else ''})",
                              {"note": notes.coded[note], "rows": count}) for note, count in notes.items()]


def _repair_alpaca(row: dict, notes: _Notes) -> dict:
    out: dict[str, Any] = {}
    for canonical, aliases in ALPACA_FIELDS.items():
        source = next((alias for alias in aliases if alias in row), None)
        if source is None:
            continue
        value = row[source]
        if source != canonical:
            notes.add("renamed_field", f"renamed field {source!r} to {canonical!r}", source=source,
                      canonical=canonical)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
            notes.add("number_to_text", f"turned a number in {canonical!r} into text", field=canonical)
        out[canonical] = value
    dropped = sorted(set(row) - {alias for aliases in ALPACA_FIELDS.values() for alias in aliases})
    if dropped:
        notes.add("dropped_fields", f"dropped unknown fields {', '.join(dropped)}", fields=", ".join(dropped))
    return out


def _repair_conversation(row: dict, ranking: bool, notes: _Notes) -> dict | None:
    key = "conversations" if isinstance(row.get("conversations"), list) else "messages"
    turns, system = [], [row["system"]] if isinstance(row.get("system"), str) and row["system"] else []
    for message in row.get(key) or []:
        parsed = _parse_message(message, notes)
        if parsed is None:
            notes.add("unknown_role", "left out rows with a message whose role is unknown")
            return None
        if parsed[0] == "system":
            system.append(parsed[1])
        else:
            turns.append(parsed)
    turns = _alternate(turns, ranking, notes)
    if not turns:
        notes.add("no_exchange", "left out rows with no complete user/assistant exchange")
        return None
    out: dict[str, Any] = {"conversations": [{"from": _SHAREGPT_TAGS[role], "value": text} for role, text in turns]}
    if system:
        out["system"] = "\n\n".join(system)
    tools = row.get("tools")
    if tools:
        out["tools"] = tools if isinstance(tools, str) else json.dumps(tools, ensure_ascii=False)
    for answer in ("chosen", "rejected") if ranking else ():
        value = row.get(answer)
        text = _content(value) if isinstance(value, dict) else value
        out[answer] = {"from": "gpt", "value": text}
    return out


def _parse_message(message: Any, notes: _Notes) -> tuple[str, str] | None:
    if not isinstance(message, dict):
        return None
    raw_role = str(message.get("from", message.get("role", ""))).strip()
    role = _known_role(raw_role, notes)
    if role is None:
        return None
    if message.get("tool_calls"):
        calls = [_tool_call(call) for call in message["tool_calls"]]
        notes.add("tool_calls", "turned OpenAI tool_calls into function_call turns")
        return FUNCTION, json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
    text = _content(message)
    return (role, text) if isinstance(text, str) else None


def _known_role(raw_role: str, notes: _Notes) -> str | None:
    lowered = raw_role.lower()
    if lowered in ROLE_ALIASES:
        if raw_role not in _SHAREGPT_TAGS.values() and raw_role != "system":
            tag = _SHAREGPT_TAGS.get(ROLE_ALIASES[lowered], "system")
            notes.add("renamed_role", f"renamed role {raw_role!r} to {tag!r}", role=raw_role, tag=tag)
        return ROLE_ALIASES[lowered]
    close = difflib.get_close_matches(lowered, list(ROLE_ALIASES), n=1, cutoff=0.75)
    if not close:
        return None
    tag = _SHAREGPT_TAGS.get(ROLE_ALIASES[close[0]], "system")
    notes.add("misspelt_role", f"renamed the role {raw_role!r} to {tag!r} (read as {close[0]!r}, the nearest known "
              "role: check that this is what it means)", role=raw_role, tag=tag, like=close[0])
    return ROLE_ALIASES[close[0]]


def _content(message: dict) -> Any:
    content = message.get("value", message.get("content"))
    if isinstance(content, list):
        texts = [part.get("text", part.get("value")) for part in content if isinstance(part, dict)]
        content = "".join(text for text in texts if isinstance(text, str))
    return content


def _tool_call(call: dict) -> dict:
    function = call.get("function", call)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = loads_json(arguments)
        except json.JSONDecodeError:
            pass
    return {"name": function.get("name"), "arguments": arguments}


def _alternate(turns: list[tuple[str, str]], ranking: bool, notes: _Notes) -> list[tuple[str, str]]:
    """Merge consecutive same-side turns, drop a leading answer and a trailing question (or answer, for ranking)."""
    merged: list[tuple[str, str]] = []
    for role, text in turns:
        side = role in USER_SIDE
        if merged and merged[-1][0] == role == OBSERVATION:  # several tool results: LF's openai join
            merged[-1] = (role, merged[-1][1] + TOOL_RESPONSE_JOIN + text)
            notes.add("joined_tool_results", "joined consecutive tool results into one observation")
        elif merged and (merged[-1][0] in USER_SIDE) == side:
            merged[-1] = (merged[-1][0], merged[-1][1] + "\n\n" + text)
            notes.add("merged_turns", "merged consecutive turns of the same side")
        else:
            merged.append((role, text))
    while merged and merged[0][0] in ASSISTANT_SIDE:
        merged.pop(0)
        notes.add("leading_answer", "dropped an answer that came before any question")
    want_last = USER_SIDE if ranking else ASSISTANT_SIDE
    while merged and merged[-1][0] not in want_last:
        merged.pop()
        if ranking:
            notes.add("trailing_answers", "dropped trailing answers (preference rows end with the question)")
        else:
            notes.add("trailing_message", "dropped a trailing message with nothing after it")
    return merged
