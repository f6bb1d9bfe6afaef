"""Gemma 4's tool syntax (LLaMA-Factory's `gemma4` tool_format): declarations and calls in Gemma's own notation.

Strings are quoted with the `<|"|>` marker instead of JSON quotes, types are upper-case, and keys are sorted:

    declaration:get_weather{description:<|"|>Weather<|"|>,parameters:{properties:{city:{type:<|"|>STRING<|"|>}},...}}
    <|tool_call>call:get_weather{city:<|"|>Oslo<|"|>}<tool_call|>
"""

from __future__ import annotations

import json
from typing import Any

QUOTE = '<|"|>'


def _quoted(text: Any) -> str:
    return f"{QUOTE}{text}{QUOTE}"


def _properties(properties: dict[str, Any]) -> str:
    parts = []
    for name, schema in properties.items():
        items = []
        if schema.get("description"):
            items.append(f"description:{_quoted(schema['description'])}")
        if schema.get("type"):
            items.append(f"type:{_quoted(str(schema['type']).upper())}")
        parts.append(f"{name}:{{{','.join(items)}}}")
    return ",".join(parts)


def _declaration(tool: dict) -> str:
    function = tool.get("function", tool) if tool.get("type") == "function" else tool
    text = f"declaration:{function['name']}{{description:{_quoted(function.get('description', ''))}"
    params = function.get("parameters")
    if params:
        parts = []
        if params.get("properties"):
            parts.append(f"properties:{{{_properties(params['properties'])}}}")
        if params.get("required"):
            parts.append(f"required:[{','.join(_quoted(item) for item in params['required'])}]")
        if params.get("type"):
            parts.append(f"type:{_quoted(str(params['type']).upper())}")
        text += f",parameters:{{{','.join(parts)}}}"
    response = function.get("response")
    if response:
        parts = [f"description:{_quoted(response['description'])}"] if response.get("description") else []
        kind = str(response.get("type", "")).upper()
        if kind == "OBJECT":
            parts.append(f"type:{_quoted(kind)}")
        text += f",response:{{{','.join(parts)}}}"
    return text + "}"


def gemma4_tools(tools: list[dict]) -> str:
    """The tool declarations, one per line."""
    return "\n".join(_declaration(tool) for tool in tools)


def _value(value: Any, quote_keys: bool) -> str:
    if isinstance(value, str):
        return _quoted(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        items = [f"{_quoted(key) if quote_keys else key}:{_value(value[key], quote_keys)}" for key in sorted(value)]
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(item, quote_keys) for item in value) + "]"
    if value is None:
        return "null"
    return str(value)


def gemma4_calls(calls: list[tuple[str, Any]]) -> str:
    """Each call as <|tool_call>call:NAME{key:value,...}<tool_call|>, back to back."""
    texts = []
    for name, args in calls:
        # LF round-trips the arguments through JSON first, so a tuple or other JSON-able value reads as JSON does.
        args = json.loads(json.dumps(args, ensure_ascii=False))
        if isinstance(args, dict):
            body = ",".join(f"{key}:{_value(args[key], False)}" for key in sorted(args))
        elif isinstance(args, str):
            body = args
        else:
            body = _value(args, False)
        texts.append(f"<|tool_call>call:{name}{{{body}}}<tool_call|>")
    return "".join(texts)
