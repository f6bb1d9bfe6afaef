"""One raw row (alpaca or sharegpt, as dataset_info.json describes it) -> the engine's one internal example format.

Normalized example:
    {"messages": [{"role": "user" | "assistant" | "function_call" | "observation", "content": str}, ...],
     "system": str | None, "tools": str | None, "source": "<dataset>:<row number>"}
Messages alternate: user or observation at even positions, assistant or function_call at odd ones. SFT examples end
with an assistant-side turn; ranking (preference) examples end with a user-side turn and carry "chosen" and
"rejected" answers. Row numbers count from 1, like lines in an editor.

The conversion follows LLaMA-Factory's converters (the same columns, tags and joins), so a file that trains there
reads the same here; where LF silently drops a broken row, this raises a RowError that names the row, the field and
the fix. The validator (engine.data.check) runs this same code, so "check passes" means "the loader accepts it".
"""

from __future__ import annotations

import json
from typing import Any

from engine.data.registry import TAG_DEFAULTS, DatasetSpec
from engine.data.text import loads_json, shorten
from engine.errors import DataError
from engine.messages import Message

TOOL_RESPONSE_JOIN = "\n</tool_response>\n<tool_response>\n"  # LF joins consecutive tool results with it

USER, ASSISTANT, FUNCTION, OBSERVATION = "user", "assistant", "function_call", "observation"
USER_SIDE = (USER, OBSERVATION)
ASSISTANT_SIDE = (ASSISTANT, FUNCTION)
UNSUPPORTED_COLUMNS = ("images", "videos", "audios")

# Role names seen in the wild, mapped to the engine's roles (used by the validator and `convert_file`).
ROLE_ALIASES: dict[str, str] = {
    "human": USER, "user": USER, "prompter": USER, "question": USER,
    "gpt": ASSISTANT, "assistant": ASSISTANT, "bot": ASSISTANT, "model": ASSISTANT, "chatgpt": ASSISTANT,
    "ai": ASSISTANT, "answer": ASSISTANT, "bard": ASSISTANT,
    "observation": OBSERVATION, "tool": OBSERVATION, "ipython": OBSERVATION, "function_response": OBSERVATION,
    "function_call": FUNCTION, "function": FUNCTION, "tool_call": FUNCTION, "tool_calls": FUNCTION,
    "system": "system",
}


class RowError(DataError):
    """A problem with one row: `where` (dataset and row), the `field` at fault and the `detail` with its fix (its
    words, and ``detail_message``: the same as a code with its values)."""

    def __init__(self, where: str, field: str | None, detail: Message) -> None:
        super().__init__(f"{where}: {detail.text}")
        self.where, self.field, self.detail, self.detail_message = where, field, detail.text, detail


def _not_object(record: Any) -> Message:
    kind = type(record).__name__
    return Message("data.row.not_object", f"is a {kind}, not an object with named fields.", {"kind": kind})


def require_supported(spec: DatasetSpec) -> None:
    """Refuse dataset kinds this text-only SFT/DPO engine cannot train on, before any row is read."""
    used = [key for key in UNSUPPORTED_COLUMNS if spec.columns.get(key)]
    if used:
        raise DataError(f"Dataset {spec.name!r} is multimodal ({', '.join(used)} column): it belongs to "
                        "LLaMA-Factory's multimodal (image, video, audio) training, which lf-assistant does not "
                        "support; lf-assistant trains text-only models. Use a text-only dataset.")


def convert_record(record: dict, spec: DatasetSpec, index: int) -> dict:
    """One raw row (its 0-based position is `index`) -> a normalized example; RowError naming the row otherwise."""
    where = f"{spec.name}: row {index + 1}"
    if not isinstance(record, dict):
        raise RowError(where, None, _not_object(record))
    require_supported(spec)
    if spec.formatting == "alpaca":
        example = _convert_alpaca(record, spec, where)
    else:
        example = _convert_sharegpt(record, spec, where)
    if example.get("system") is None:
        example["system"] = _optional_text(record, spec.column("system"), where)
    example["tools"] = _tools_text(record, spec.column("tools"), where)
    _check_function_calls(example["messages"], spec, where)
    if spec.formatting == "openai":
        example["system"] = openai_system(example["system"], example["tools"])
    if spec.column("kto_tag"):
        example["kto_tag"] = _kto_tag(record, spec.column("kto_tag"), where)
    example["source"] = f"{spec.name}:{index + 1}"
    return example


def _check_function_calls(messages: list[dict], spec: DatasetSpec, where: str) -> None:
    """A function call must be JSON with a "name" whatever the template (every template parses it): said at the
    row when it is read, not after the model has loaded."""
    from engine.data.tools import function_calls

    for message in messages:
        if message["role"] == FUNCTION:
            try:
                function_calls(message["content"])
            except DataError as exc:
                raise RowError(where, spec.column("messages"), Message(
                    "data.row.bad_function_call", f"{exc} Fix or remove that row.", {"error": str(exc)})) from None


def convert_text(record: dict, spec: DatasetSpec, index: int) -> str:
    """One row of pre-training text, or RowError naming the row: the first message of the row's prompt, as
    LLaMA-Factory's pt stage reads ``_prompt[0]`` (answers are not pre-training text). That is the ``prompt``
    column (``text`` for a .txt file or c4_demo's shape) with ``query`` (input) after a newline; an alpaca row
    with history, its first history instruction; a sharegpt conversation, its first message after the system."""
    where = f"{spec.name}: row {index + 1}"
    if not isinstance(record, dict):
        raise RowError(where, None, _not_object(record))
    if spec.formatting != "alpaca":
        require_supported(spec)
        return _convert_sharegpt(record, spec, where)["messages"][0]["content"]
    column = spec.column("prompt")
    value = record.get(column)
    if not isinstance(value, str) or not value:
        found = Message("data.row.kind", type(value).__name__, {"kind": type(value).__name__}) if column in record \
            else Message("data.row.missing", "missing")
        names = ", ".join(map(str, record))
        has = Message("data.row.fields", names, {"names": names}) if names else Message("data.row.no_fields",
                                                                                       "no fields")
        raise RowError(where, column, Message("data.row.no_text", f"pre-training text {column!r} must be non-empty "
                                              f"text ({found.text}; the row has: {has.text}).",
                                              {"column": repr(column), "found": found, "fields": has}))
    return _alpaca_prompt(record, spec, where)[0]["content"]


def _kto_tag(record: dict, column: str, where: str) -> bool:
    """KTO's label: is the final answer desirable (true) or undesirable (false)."""
    value = record.get(column)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise RowError(where, column, Message("data.row.kto_label", f"the KTO label {column!r} must be true or false, "
                                          f"not {value!r:.40}.", {"column": repr(column), "value": f"{value!r:.40}"}))


def _convert_alpaca(record: dict, spec: DatasetSpec, where: str) -> dict:
    messages = _alpaca_prompt(record, spec, where)
    if spec.ranking:
        chosen = _answer_text(record, spec.column("chosen"), where, "chosen answer")
        rejected = _answer_text(record, spec.column("rejected"), where, "rejected answer")
        return {"messages": messages, "system": None, "chosen": chosen, "rejected": rejected}
    response_column = spec.column("response")
    if response_column not in record and "prompt" in spec.columns and "response" not in spec.columns:
        fields = _fields(record)
        raise RowError(where, response_column, Message("data.row.pretraining_text", f"only {fields.text}, no "
                       "answer: this looks like pre-training text. lf-assistant trains on instruction/answer pairs "
                       "(sft) and preferences.", {"fields": fields}))
    messages.append({"role": ASSISTANT, "content": _answer_text(record, response_column, where, "answer")})
    return {"messages": messages, "system": None}


def _alpaca_prompt(record: dict, spec: DatasetSpec, where: str) -> list[dict]:
    """The history's turns, then the instruction with its input after a newline (LLaMA-Factory's join)."""
    messages = alpaca_history(record, spec.column("history"), where)
    parts = []
    for key in ("prompt", "query"):
        column = spec.column(key)
        value = record.get(column) if column else None
        if value is not None and not isinstance(value, str):
            raise RowError(where, column, _not_text(column, value))
        if value:
            parts.append(value)
    if not parts:
        column, fields = spec.column("prompt"), _fields(record)
        raise RowError(where, column, Message("data.row.no_instruction", f"no instruction: {column!r} is missing "
                                              f"or empty (the row has: {fields.text}).",
                                              {"column": repr(column), "fields": fields}))
    messages.append({"role": USER, "content": "\n".join(parts)})
    return messages


def alpaca_history(record: dict, column: str | None, where: str) -> list[dict]:
    history = _maybe_json(record.get(column)) if column else None
    if history is None:
        return []
    if not isinstance(history, list):
        raise RowError(where, column, Message("data.row.history_not_list", f"{column!r} must be a list of "
                                              "[instruction, answer] pairs.", {"column": repr(column)}))
    messages = []
    for number, pair in enumerate(history, start=1):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise RowError(where, column, Message("data.row.history_item", f"{column!r} item {number} must be a pair "
                                                  f"of texts [\"instruction\", \"answer\"], not {shorten(pair, 80)}.",
                                                  {"column": repr(column), "number": number,
                                                   "value": shorten(pair, 80)}))
        messages += [{"role": USER, "content": pair[0]}, {"role": ASSISTANT, "content": pair[1]}]
    return messages


_ANSWERS = {"answer": Message("data.row.answer", "answer"),
            "chosen answer": Message("data.row.chosen_answer", "chosen answer"),
            "rejected answer": Message("data.row.rejected_answer", "rejected answer")}


def _answer_text(record: dict, column: str | None, where: str, what: str) -> str:
    """The answer in ``column``; ``what`` names it (a key of _ANSWERS)."""
    if column is None:
        raise RowError(where, None, Message("data.row.no_answer_column", f"no {what}: the entry's \"columns\" names "
                                            "no column for it. A columns object replaces every default (as in "
                                            "LLaMA-Factory): add \"response\": \"output\" (or your column).",
                                            {"what": _ANSWERS[what]}))
    value = record.get(column)
    if isinstance(value, dict):  # sharegpt-style {"from": "gpt", "value": ...} in an alpaca file
        value = value.get("value", value.get("content"))
    if value is None:
        raise RowError(where, column, Message("data.row.answer_missing", f"no {what}: {column!r} is missing. Every "
                                              "row needs the answer to train on.",
                                              {"what": _ANSWERS[what], "column": repr(column)}))
    if not isinstance(value, str):
        raise RowError(where, column, _not_text(column, value))
    if not value.strip():
        raise RowError(where, column, Message("data.row.answer_empty", f"{column!r} is empty: write the {what}, or "
                                              "remove the row.", {"what": _ANSWERS[what], "column": repr(column)}))
    return value


def _not_text(column: str, value: Any) -> Message:
    kind = type(value).__name__
    return Message("data.row.not_text", f"{column!r} must be text, not {kind} ({shorten(value)}).",
                   {"column": repr(column), "kind": kind, "value": shorten(value)})


def _convert_sharegpt(record: dict, spec: DatasetSpec, where: str) -> dict:
    column = spec.column("messages")
    raw = _maybe_json(record.get(column))
    if not isinstance(raw, list) or not raw:
        fields = _fields(record)
        raise RowError(where, column, Message("data.row.no_messages", f"{column!r} must be a non-empty list of "
                                              f"messages (the row has: {fields.text}).",
                                              {"column": repr(column), "fields": fields}))
    role_tag, system_tag = spec.tag("role_tag"), spec.tag("system_tag")
    if spec.formatting == "openai":
        raw = _openai_turns(raw, spec, where, column)
    system = None
    if isinstance(raw[0], dict) and system_tag and raw[0].get(role_tag) == system_tag:
        system = _message_text(raw[0], spec, where, 1, column)
        raw = raw[1:]
    # a tag an entry's "tags" leaves out is absent (LLaMA-Factory does not accept its messages either)
    tag_roles = {tag: role for tag, role in ((spec.tag("user_tag"), USER), (spec.tag("assistant_tag"), ASSISTANT),
                                             (spec.tag("observation_tag"), OBSERVATION),
                                             (_function_tag(spec), FUNCTION)) if tag is not None}
    messages = []
    for position, message in enumerate(raw):
        number = position + 1 + (system is not None)
        role = _message_role(message, tag_roles, spec, position, where, number, column)
        messages.append({"role": role, "content": _message_text(message, spec, where, number, column)})
    example: dict[str, Any] = {"messages": messages, "system": system}
    if spec.ranking:
        if len(messages) % 2 != 1:
            raise RowError(where, column, Message("data.row.pair_ends_with_answer", f"a preference row's {column!r} "
                                                  f"must end with the user's turn ({_count(messages)} found); the "
                                                  "answers go in chosen/rejected.",
                                                  {"column": repr(column), "messages": len(messages)}))
        example["chosen"] = _ranked_answer(record, spec, "chosen", tag_roles, where)
        example["rejected"] = _ranked_answer(record, spec, "rejected", tag_roles, where)
    elif len(messages) % 2 != 0:
        raise RowError(where, column, Message("data.row.ends_without_answer", "the conversation ends with a "
                                              f"user-side turn, so there is no answer to train on "
                                              f"({_count(messages)}). Add the assistant's reply or drop the last "
                                              "message.", {"messages": len(messages)}))
    return example


def _fields(record: dict) -> Message:
    """The row's field names for a message: a few, shortened, control characters escaped."""
    names = ", ".join(shorten(name, 30) for name in list(record)[:8])
    if not names:
        return Message("data.row.no_fields", "no fields")
    if len(record) > 8:
        return Message("data.row.fields_more", f"{names} and {len(record) - 8} more",
                       {"names": names, "more": len(record) - 8})
    return Message("data.row.fields", names, {"names": names})


def _count(messages: list) -> str:
    return f"{len(messages)} message{'' if len(messages) == 1 else 's'}"


def openai_system(system: str | None, tools: str | None) -> str | None:
    """The system text LLaMA-Factory's openai formatting trains with (OpenAIDatasetConverter): it appends
    "detailed thinking off" (the reasoning switch of the models that format was written for) unless the system
    text already sets thinking on or off, and a bare newline when the row has tools. Kept as it is there, so the
    same dataset_info.json trains the same text here."""
    switch = "detailed thinking off"
    if not system:
        return None if tools else switch  # None: the template's default system, as LF's empty one is
    if tools:
        return system + "\n"
    if "detailed thinking on" in system or switch in system:
        return system
    return system + "\n" + switch


def tool_calls_text(calls: list[dict]) -> str:
    """An OpenAI message's tool_calls as a function-call turn's text: the JSON list of the calls' ``function``
    objects, as LLaMA-Factory writes it (arguments kept as the strings OpenAI gives)."""
    return json.dumps([call["function"] for call in calls], ensure_ascii=False)


def _function_tag(spec: DatasetSpec) -> str | None:
    """The function-call tag. With formatting: openai, assistant tool_calls are function calls even when the tags
    name none: LLaMA-Factory's openai converter maps its missing function tag (None) to the function role, the
    tags its entries use (role, content, user, assistant, tool, system) leaving it out."""
    tag = spec.tag("function_tag")
    return TAG_DEFAULTS["function_tag"] if tag is None and spec.formatting == "openai" else tag


def _openai_turns(raw: list, spec: DatasetSpec, where: str, column: str) -> list:
    """OpenAI messages as sharegpt turns, as LLaMA-Factory's openai formatting reads them: an assistant message
    with ``tool_calls`` becomes a function call whose text is the JSON list of the calls' ``function`` objects,
    and consecutive tool results become one observation, joined by LF's tool_response separator."""
    role_tag, content_tag = spec.tag("role_tag"), spec.tag("content_tag")
    observation, function = spec.tag("observation_tag"), _function_tag(spec)
    turns: list = []
    results: list[str] = []
    for number, message in enumerate(raw, 1):
        role = message.get(role_tag) if isinstance(message, dict) else None
        if role is not None and role == observation:
            results.append(_message_text(message, spec, where, number, column))
            continue
        if results:
            turns.append({role_tag: observation, content_tag: TOOL_RESPONSE_JOIN.join(results)})
            results = []
        calls = message.get("tool_calls") if role is not None and role in (spec.tag("assistant_tag"), function) \
            else None
        if calls:
            if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("function"), dict)
                                                      for c in calls):
                raise RowError(where, column, Message("data.row.tool_calls", f"message {number}'s tool_calls must be "
                                                      "a list of objects with a \"function\" object each, not "
                                                      f"{shorten(calls)}.", {"number": number,
                                                                             "value": shorten(calls)}))
            message = {role_tag: function, content_tag: tool_calls_text(calls)}
        turns.append(message)
    if results:
        turns.append({role_tag: observation, content_tag: TOOL_RESPONSE_JOIN.join(results)})
    return turns


def _message_role(message: Any, tag_roles: dict, spec: DatasetSpec, position: int, where: str, number: int,
                  column: str) -> str:
    role_tag = spec.tag("role_tag")
    if not isinstance(message, dict):
        kind = type(message).__name__
        raise RowError(where, column, Message("data.row.message_not_object", f"message {number} is a {kind}, not an "
                                              "object.", {"number": number, "kind": kind}))
    tag = message.get(role_tag)
    if not isinstance(tag, str) or tag not in tag_roles:
        found = Message("data.row.no_role_key", f"no {role_tag!r} key (keys: {shorten(list(message), 80)})",
                        {"key": repr(role_tag), "keys": shorten(list(message), 80)}) if tag is None else \
            Message("data.row.the_role", f"the role {shorten(tag)}", {"role": shorten(tag)})
        tags = ", ".join(tag_roles)
        raise RowError(where, column, Message("data.row.unknown_role", f"message {number} has {found.text}; "
                                              f"expected one of {tags} (set \"tags\" in dataset_info.json, or write "
                                              "a fixed copy with --fix).",
                                              {"number": number, "found": found, "tags": tags}))
    expected = USER_SIDE if position % 2 == 0 else ASSISTANT_SIDE
    if tag_roles[tag] not in expected:
        wanted = [repr(t) for t, role in tag_roles.items() if role in expected]
        raise RowError(where, column, Message("data.row.out_of_turn", f"message {number} is {tag!r} where "
                                              f"{' or '.join(wanted)} was expected: user-side and assistant-side "
                                              "turns must alternate.",
                                              {"number": number, "tag": repr(tag), "wanted": " / ".join(wanted)}))
    return tag_roles[tag]


def _message_text(message: dict, spec: DatasetSpec, where: str, number: int, column: str) -> str:
    content_tag = spec.tag("content_tag")
    content = message.get(content_tag)
    if isinstance(content, list):  # OpenAI content parts: [{"type": "text", "text": "..."}]
        texts = [part.get("text", part.get("value")) for part in content if isinstance(part, dict)]
        if len(texts) == len(content) and all(isinstance(text, str) for text in texts):
            content = "".join(texts)
    if not isinstance(content, str):
        got = Message("data.row.no_key", f"no {content_tag!r} key", {"key": repr(content_tag)}) if content is None \
            else Message("data.row.kind_as", f"a {type(content).__name__} as {content_tag!r}",
                         {"kind": type(content).__name__, "key": repr(content_tag)})
        raise RowError(where, column, Message("data.row.message_text", f"message {number} has {got.text}; its text "
                                              "must be a string.", {"number": number, "got": got}))
    return content


def _ranked_answer(record: dict, spec: DatasetSpec, key: str, tag_roles: dict, where: str) -> str:
    column = spec.column(key)
    value = record.get(column) if column else None
    if isinstance(value, str) and value.strip():
        return value
    if not isinstance(value, dict):
        raise RowError(where, column, Message("data.row.ranked_not_message", f"the {key} answer ({column!r}) must be "
                                              f"a message like {{\"from\": \"gpt\", \"value\": \"...\"}}, not "
                                              f"{shorten(value)}.", {"key": key, "column": repr(column),
                                                                     "value": shorten(value)}))
    role = value.get(spec.tag("role_tag"))
    if not isinstance(role, str) or tag_roles.get(role) not in ASSISTANT_SIDE:
        tag = repr(spec.tag("assistant_tag"))
        raise RowError(where, column, Message("data.row.ranked_role", f"the {key} answer must come from {tag}, not "
                                              f"{shorten(role)}.", {"key": key, "tag": tag, "role": shorten(role)}))
    text = _message_text(value, spec, where, 0, column)
    if not text.strip():
        raise RowError(where, column, Message("data.row.ranked_empty", f"the {key} answer is empty.", {"key": key}))
    return text


def _optional_text(record: dict, column: str | None, where: str) -> str | None:
    value = record.get(column) if column else None
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        kind = type(value).__name__
        raise RowError(where, column, Message("data.row.not_text_kind", f"{column!r} must be text, not {kind}.",
                                              {"column": repr(column), "kind": kind}))
    return value


def _tools_text(record: dict, column: str | None, where: str) -> str | None:
    """Tool descriptions as a JSON string (LF stores them as text; parquet files often hold real lists)."""
    value = record.get(column) if column else None
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    if not isinstance(value, str):
        raise RowError(where, column, Message("data.row.tools_not_list", f"{column!r} must be a JSON list of tool "
                                              "descriptions.", {"column": repr(column)}))
    try:
        loads_json(value)
    except json.JSONDecodeError as exc:
        raise RowError(where, column, Message("data.row.tools_not_json", f"{column!r} is not valid JSON ({exc.msg}); "
                                              "tools are a JSON list of function descriptions.",
                                              {"column": repr(column), "error": exc.msg})) from None
    return value


def _maybe_json(value: Any) -> Any:
    """CSV cells hold nested lists as JSON text; decode them when they look like a list."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            return loads_json(value)
        except json.JSONDecodeError:
            return value
    return value
