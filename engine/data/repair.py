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


def repair_rows(rows: list[Any], file_format: str, ranking: bool) -> tuple[list[dict], list[str]]:
    """Repaired rows and notes on what changed (rows that are not objects are left out)."""
    notes: Counter[str] = Counter()
    repaired = []
    for row in rows:
        if not isinstance(row, dict):
            notes["left out rows that are not objects"] += 1
            continue
        if file_format == "alpaca":
            repaired.append(_repair_alpaca(row, notes))
        else:
            fixed = _repair_conversation(row, ranking, notes)
            if fixed is not None:
                repaired.append(fixed)
    return repaired, [f"{note} ({count} row{'s' if count > 1 else ''})" for note, count in notes.items()]


def _repair_alpaca(row: dict, notes: Counter) -> dict:
    out: dict[str, Any] = {}
    for canonical, aliases in ALPACA_FIELDS.items():
        source = next((alias for alias in aliases if alias in row), None)
        if source is None:
            continue
        value = row[source]
        if source != canonical:
            notes[f"renamed field {source!r} to {canonical!r}"] += 1
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
            notes[f"turned a number in {canonical!r} into text"] += 1
        out[canonical] = value
    dropped = sorted(set(row) - {alias for aliases in ALPACA_FIELDS.values() for alias in aliases})
    if dropped:
        notes[f"dropped unknown fields {', '.join(dropped)}"] += 1
    return out


def _repair_conversation(row: dict, ranking: bool, notes: Counter) -> dict | None:
    key = "conversations" if isinstance(row.get("conversations"), list) else "messages"
    turns, system = [], [row["system"]] if isinstance(row.get("system"), str) and row["system"] else []
    for message in row.get(key) or []:
        parsed = _parse_message(message, notes)
        if parsed is None:
            notes["left out rows with a message whose role is unknown"] += 1
            return None
        if parsed[0] == "system":
            system.append(parsed[1])
        else:
            turns.append(parsed)
    turns = _alternate(turns, ranking, notes)
    if not turns:
        notes["left out rows with no complete user/assistant exchange"] += 1
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


def _parse_message(message: Any, notes: Counter) -> tuple[str, str] | None:
    if not isinstance(message, dict):
        return None
    raw_role = str(message.get("from", message.get("role", ""))).strip()
    role = _known_role(raw_role, notes)
    if role is None:
        return None
    if message.get("tool_calls"):
        calls = [_tool_call(call) for call in message["tool_calls"]]
        notes["turned OpenAI tool_calls into function_call turns"] += 1
        return FUNCTION, json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)
    text = _content(message)
    return (role, text) if isinstance(text, str) else None


def _known_role(raw_role: str, notes: Counter) -> str | None:
    lowered = raw_role.lower()
    if lowered in ROLE_ALIASES:
        if raw_role not in _SHAREGPT_TAGS.values() and raw_role != "system":
            notes[f"renamed role {raw_role!r} to {_SHAREGPT_TAGS.get(ROLE_ALIASES[lowered], 'system')!r}"] += 1
        return ROLE_ALIASES[lowered]
    close = difflib.get_close_matches(lowered, list(ROLE_ALIASES), n=1, cutoff=0.75)
    if not close:
        return None
    notes[f"renamed the misspelt role {raw_role!r} to {_SHAREGPT_TAGS.get(ROLE_ALIASES[close[0]], 'system')!r}"] += 1
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


def _alternate(turns: list[tuple[str, str]], ranking: bool, notes: Counter) -> list[tuple[str, str]]:
    """Merge consecutive same-side turns, drop a leading answer and a trailing question (or answer, for ranking)."""
    merged: list[tuple[str, str]] = []
    for role, text in turns:
        side = role in USER_SIDE
        if merged and merged[-1][0] == role == OBSERVATION:  # several tool results: LF's openai join
            merged[-1] = (role, merged[-1][1] + TOOL_RESPONSE_JOIN + text)
            notes["joined consecutive tool results into one observation"] += 1
        elif merged and (merged[-1][0] in USER_SIDE) == side:
            merged[-1] = (merged[-1][0], merged[-1][1] + "\n\n" + text)
            notes["merged consecutive turns of the same side"] += 1
        else:
            merged.append((role, text))
    while merged and merged[0][0] in ASSISTANT_SIDE:
        merged.pop(0)
        notes["dropped an answer that came before any question"] += 1
    want_last = USER_SIDE if ranking else ASSISTANT_SIDE
    while merged and merged[-1][0] not in want_last:
        merged.pop()
        notes["dropped a trailing message with nothing after it" if not ranking
              else "dropped trailing answers (preference rows end with the question)"] += 1
    return merged
