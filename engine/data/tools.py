"""How each model family describes tools in the system prompt and writes a function call in an answer.

Datasets carry tools as a JSON list of function descriptions and each function call as JSON
({"name": ..., "arguments": {...}}, or a list of them for parallel calls), as in glaive_toolcall. The thirteen
formats are LLaMA-Factory's `tool_format` values, with the same text to the character (its tool_utils.py is the
reference), so a model fine-tuned here sees the tool prompt LLaMA-Factory would have shown it:

    default   ReAct-style "Action: / Action Input:"      qwen      Qwen2.5 <tools> / <tool_call> JSON
    llama3    Llama 3.1 JSON calls (dated today)         mistral   [AVAILABLE_TOOLS] / JSON list
    glm4      GLM-4 (one call per turn)                  glm4_moe  GLM-4.5 <arg_key>/<arg_value>
    qwen3_5   Qwen3.5 <function=...><parameter=...>      seed_oss  Seed-OSS <seed:tool_call>
    ling      Ling v2 (qwen calls)                       lfm2      LFM2 pythonic calls
    minimax1  MiniMax-M1 <tool_calls>                    minimax2  MiniMax-M2 <invoke>
    gemma4    Gemma 4 declarations (engine.data.tool_formats_gemma4)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from engine.data.tool_formats_gemma4 import gemma4_calls, gemma4_tools
from engine.errors import DataError
from engine.jsonio import loads_json

TOOL_FORMATS: tuple[str, ...] = ("default", "gemma4", "glm4", "glm4_moe", "lfm2", "ling", "llama3", "minimax1",
                                 "minimax2", "mistral", "qwen", "qwen3_5", "seed_oss")
ToolFormat = str

_DEFAULT_PROMPT = (
    "You have access to the following tools:\n{tool_text}"
    "Use the following format if using a tool:\n```\nAction: tool name (one of [{tool_names}])\n"
    "Action Input: the input to the tool, in a JSON format representing the kwargs "
    '(e.g. ```{{"input": "hello world", "num_beams": 5}}```)\n```\n'
)
_QWEN_CALL_HELP = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}'
    "\n</tool_call>"
)
_QWEN_INTRO = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>{tool_text}")
_QWEN_PROMPT = "\n\n" + _QWEN_INTRO + _QWEN_CALL_HELP
_LING_PROMPT = _QWEN_INTRO + _QWEN_CALL_HELP
_GLM4_MOE_PROMPT = (
    "\n\n" + _QWEN_INTRO + "\n</tools>\n\nFor each function call, output the function name and arguments within "
    "the following XML format:\n<tool_call>{{function-name}}\n<arg_key>{{arg-key-1}}</arg_key>"
    "\n<arg_value>{{arg-value-1}}</arg_value>\n<arg_key>{{arg-key-2}}</arg_key>\n<arg_value>{{arg-value-2}}"
    "</arg_value>\n...\n</tool_call>\n"
)
_QWEN35_PROMPT = (
    "\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>{tool_text}"
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in "
    "natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer "
    "the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>"
)
_LLAMA3_PROMPT = (
    "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
    "You have access to the following functions. To call a function, please respond with JSON for a function call. "
    'Respond in the format {{"name": function name, "parameters": dictionary of argument name and its value}}. '
    "Do not use variables.\n\n{tool_text}"
)
_GLM4_PROMPT = (
    "你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
    "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具{tool_text}"
)
_MINIMAX1_PROMPT = (
    "You are provided with these tools:\n<tools>\n{tool_text}</tools>\n\nIf you need to call tools, please respond "
    "with <tool_calls></tool_calls> XML tags, and provide tool-name and json-object of arguments, following the "
    'format below:\n<tool_calls>\n{{"name": <tool-name-1>, "arguments": <args-json-object-1>}}\n...\n</tool_calls>'
)
_MINIMAX2_PROMPT = (
    "\n\n# Tools\n\nYou may call one or more tools to assist with the user query.\nHere are the tools available in "
    "JSONSchema format:\n\n<tools>\n{tool_text}</tools>\n\nWhen making tool calls, use XML format to invoke tools "
    'and pass parameters:\n\n<minimax:tool_call>\n<invoke name="tool-name-1">\n<parameter name="param-key-1">'
    'param-value-1</parameter>\n<parameter name="param-key-2">param-value-2</parameter>\n...\n</invoke>\n'
    "</minimax:tool_call>"
)
_SEED_PROMPT = (
    "system\nYou are Doubao, a helpful AI assistant. You may call one or more functions to assist with the user "
    "query.Tool List:\nYou are authorized to use the following tools (described in JSON Schema format). Before "
    "performing any task, you must decide how to call them based on the descriptions and parameters of these "
    "tools.{tool_text}\n工具调用请遵循如下格式:\n<seed:tool_call>\n<function=example_function_name>\n"
    "<parameter=example_parameter_1>value_1</parameter>\n<parameter=example_parameter_2>This is the value for the "
    "second parameter\nthat can span\nmultiple lines</parameter>\n</function>\n</seed:tool_call>\n"
)


def today() -> str:
    """The date the Llama 3 tool prompt states, as LLaMA-Factory writes it ("05 Mar 2026"); tests replace this."""
    return datetime.now().strftime("%d %b %Y")


def _dumps(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _wrap(tool: dict) -> dict:
    return tool if tool.get("type") == "function" else {"type": "function", "function": tool}


def _unwrap(tool: dict, missing: Any = "") -> Any:
    """The function description; `missing` is what a {"type": "function"} without one gives (LF differs by format)."""
    return tool.get("function", missing) if tool.get("type") == "function" else tool


def _text_value(value: Any) -> str:
    return value if isinstance(value, str) else _dumps(value)


def _default_tools(tools: list[dict]) -> str:
    tool_text, names = "", []
    for tool in tools:
        fn = _unwrap(tool)
        params = fn.get("parameters") or {}
        lines = ""
        for name, param in (params.get("properties") or {}).items():
            required = ", required" if name in params.get("required", []) else ""
            enum = f", should be one of [{', '.join(map(str, param['enum']))}]" if param.get("enum") else ""
            items = f", where each item should be {param['items'].get('type', '')}" if param.get("items") else ""
            lines += f"  - {name} ({param.get('type', '')}{required}): {param.get('description', '')}{enum}{items}\n"
        tool_text += f"> Tool Name: {fn['name']}\nTool Description: {fn.get('description', '')}\nTool Args:\n{lines}\n"
        names.append(fn["name"])
    return _DEFAULT_PROMPT.format(tool_text=tool_text, tool_names=", ".join(names))


def _glm4_tools(tools: list[dict]) -> str:
    text = "".join(f"\n\n## {fn['name']}\n\n{_dumps(fn, 4)}\n在调用上述函数时，请使用 Json 格式表示调用的参数。"
                   for fn in map(_unwrap, tools))
    return _GLM4_PROMPT.format(tool_text=text)


def _qwen_style_tools(prompt: str, unwrap: bool = False) -> Callable[[list[dict]], str]:
    def render(tools: list[dict]) -> str:
        entries = [_unwrap(tool, tool) if unwrap else _wrap(tool) for tool in tools]
        return prompt.format(tool_text="".join("\n" + _dumps(entry) for entry in entries))
    return render


_TOOL_TEXT: dict[str, Callable[[list[dict]], str]] = {
    "default": _default_tools,
    "gemma4": gemma4_tools,
    "glm4": _glm4_tools,
    "glm4_moe": _qwen_style_tools(_GLM4_MOE_PROMPT),
    "lfm2": lambda tools: f"List of tools: <|tool_list_start|>{_dumps([_unwrap(t, t) for t in tools])}"
                          "<|tool_list_end|>",
    "ling": lambda tools: _qwen_style_tools(_LING_PROMPT)(tools) + "\ndetailed thinking off",
    "llama3": lambda tools: _LLAMA3_PROMPT.format(
        date=today(), tool_text="".join(_dumps(_wrap(tool), 4) + "\n\n" for tool in tools)),
    "minimax1": lambda tools: _MINIMAX1_PROMPT.format(tool_text="".join(_dumps(_unwrap(t)) + "\n" for t in tools)),
    "minimax2": lambda tools: _MINIMAX2_PROMPT.format(
        tool_text="".join("<tool>" + _dumps(_unwrap(t)) + "</tool>\n" for t in tools)),
    "mistral": lambda tools: "[AVAILABLE_TOOLS] " + _dumps([_wrap(t) for t in tools]) + "[/AVAILABLE_TOOLS]",
    "qwen": _qwen_style_tools(_QWEN_PROMPT),
    "qwen3_5": _qwen_style_tools(_QWEN35_PROMPT, unwrap=True),
    "seed_oss": lambda tools: _SEED_PROMPT.format(tool_text="\n" + _dumps(tools)),
}


def _xml_calls(calls: list[tuple[str, Any]], opening: str, parameter: str, closing: str) -> str:
    """Calls as <function=name> / <invoke name=...> blocks: one parameter element per argument."""
    texts = []
    for name, args in calls:
        text = opening.format(name=name)
        for key, value in _argument_dict(args, name).items():
            text += parameter.format(key=key, value=_text_value(value))
        texts.append(text + closing)
    return "\n".join(texts)


def _glm4_call(calls: list[tuple[str, Any]]) -> str:
    if len(calls) > 1:
        raise DataError("GLM-4 cannot make parallel function calls; split them into separate turns.")
    return f"{calls[0][0]}\n{_dumps(calls[0][1])}"


def _lfm2_calls(calls: list[tuple[str, Any]]) -> str:
    texts = []
    for name, args in calls:
        parts = [f'{key}="{value}"' if isinstance(value, str) else f"{key}={_dumps(value)}"
                 for key, value in _argument_dict(args, name).items()]
        texts.append(f"{name}({', '.join(parts)})")
    return f"<|tool_call_start|>[{', '.join(texts)}]<|tool_call_end|>"


_CALL_TEXT: dict[str, Callable[[list[tuple[str, Any]]], str]] = {
    "default": lambda calls: "\n".join(f"Action: {name}\nAction Input: {_dumps(args)}" for name, args in calls),
    "gemma4": gemma4_calls,
    "glm4": _glm4_call,
    "glm4_moe": lambda calls: _xml_calls(calls, "\n<tool_call>{name}", "\n<arg_key>{key}</arg_key>\n<arg_value>"
                                                "{value}</arg_value>", ""),
    "lfm2": _lfm2_calls,
    "ling": lambda calls: _CALL_TEXT["qwen"](calls),
    "llama3": lambda calls: _dumps([{"name": n, "parameters": a} for n, a in calls] if len(calls) > 1
                                   else {"name": calls[0][0], "parameters": calls[0][1]}),
    "minimax1": lambda calls: "<tool_calls>\n" + "\n".join(_dumps({"name": n, "arguments": a}) for n, a in calls)
                              + "\n</tool_calls>",
    "minimax2": lambda calls: _xml_calls(calls, '<invoke name="{name}">', '\n<parameter name="{key}">{value}'
                                         "</parameter>", "\n</invoke>"),
    "mistral": lambda calls: _dumps([{"name": n, "arguments": a} for n, a in calls]),
    "qwen": lambda calls: "\n".join("<tool_call>\n" + _dumps({"name": n, "arguments": a}) + "\n</tool_call>"
                                    for n, a in calls),
    "qwen3_5": lambda calls: _xml_calls(calls, "<tool_call>\n<function={name}>", "\n<parameter={key}>\n{value}\n"
                                        "</parameter>", "\n</function>\n</tool_call>"),
    "seed_oss": lambda calls: _xml_calls(calls, "\n<seed:tool_call>\n<function={name}", "\n<parameter={key}>"
                                         "{value}</parameter>", "\n</function>\n</seed:tool_call>"),
}


def check_tool_format(tool_format: str) -> str:
    """`tool_format` itself, or DataError listing the valid ones."""
    if tool_format not in TOOL_FORMATS:
        raise DataError(f"Unknown tool_format {tool_format!r}; use one of {', '.join(TOOL_FORMATS)}.")
    return tool_format


def format_tools(tool_format: ToolFormat, tools_json: str) -> str:
    """The system-prompt text describing `tools_json` (a JSON list of function descriptions); "" for an empty list."""
    tools = _load(tools_json, "tool descriptions")
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise DataError(f"Tools must be a JSON list of function descriptions, got: {str(tools_json)[:80]!r}.")
    if not tools:
        return ""
    for tool in tools:
        if not isinstance(_unwrap(tool, tool), dict) or "name" not in _unwrap(tool, tool):
            raise DataError(f"A tool description needs a \"name\": {_dumps(tool)[:80]}.")
    return _TOOL_TEXT[check_tool_format(tool_format)](tools)


def function_calls(content: str) -> list[dict]:
    """The calls a function-call message holds: JSON, one call or a list, each with a "name" (DataError else; the
    same for every template, so a data check can say it before a template is chosen)."""
    data = _load(content, "function call")
    calls = data if isinstance(data, list) else [data]
    if not calls or not all(isinstance(call, dict) and "name" in call for call in calls):
        raise DataError(f"A function call must be JSON like {{\"name\": ..., \"arguments\": {{...}}}}, "
                        f"got: {content[:80]!r}.")
    return calls


def format_function_call(tool_format: ToolFormat, content: str) -> str:
    """A function call (JSON: one call or a list) in the family's answer syntax."""
    calls = function_calls(content)
    # LF re-serializes the arguments as they are: a JSON string stays a string.
    pairs = [(call["name"], call["arguments"] if "arguments" in call else call.get("parameters", {}))
             for call in calls]
    return _CALL_TEXT[check_tool_format(tool_format)](pairs)


def _argument_dict(args: Any, name: str) -> dict:
    if not isinstance(args, dict):
        raise DataError(f"The arguments of the call to {name!r} must be a JSON object for this tool format, "
                        f"got: {_dumps(args)[:80]}.")
    return args


def _load(text: str, what: str) -> Any:
    try:
        return loads_json(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise DataError(f"The {what} is not valid JSON ({getattr(exc, 'msg', exc)}): {str(text)[:80]!r}.") from None
