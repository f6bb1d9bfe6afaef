"""How each model family describes tools in the system prompt and writes a function call in an answer.

Datasets carry tools as a JSON list of function descriptions and each function call as JSON
({"name": ..., "arguments": {...}}, or a list of them for parallel calls), as in glaive_toolcall. The texts below are
the families' documented formats (the official chat templates of Qwen2.5, Llama 3.1, Mistral v0.3 and GLM-4, and
LLaMA-Factory's "default" ReAct-style format), so a model fine-tuned here sees the same tool prompt it will be served
with.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from engine.errors import DataError

ToolFormat = Literal["default", "qwen", "llama3", "mistral", "glm4"]
TOOL_FORMATS: tuple[str, ...] = ("default", "qwen", "llama3", "mistral", "glm4")

# The Llama 3.1 template fills "Today Date" from the clock unless told otherwise; a fixed date (the template's own
# default) keeps tokenization reproducible between runs.
LLAMA3_DATE = "26 Jul 2024"

_DEFAULT_PROMPT = (
    "You have access to the following tools:\n{tool_text}"
    "Use the following format if using a tool:\n```\nAction: tool name (one of [{tool_names}])\n"
    "Action Input: the input to the tool, in a JSON format representing the kwargs "
    '(e.g. ```{{"input": "hello world", "num_beams": 5}}```)\n```\n'
)
_QWEN_PROMPT = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>{tool_text}"
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}'
    "\n</tool_call>"
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


def format_tools(tool_format: ToolFormat, tools_json: str) -> str:
    """The system-prompt text describing `tools_json` (a JSON list of function descriptions)."""
    tools = _load(tools_json, "tool descriptions")
    if isinstance(tools, dict):
        tools = [tools]
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise DataError(f"Tools must be a JSON list of function descriptions, got: {tools_json[:80]!r}.")
    if not tools:
        return ""
    functions = [_unwrap(tool) for tool in tools]
    if tool_format == "qwen":
        text = "".join("\n" + json.dumps(_wrap(tool), ensure_ascii=False) for tool in tools)
        return _QWEN_PROMPT.format(tool_text=text)
    if tool_format == "llama3":
        text = "".join(json.dumps(_wrap(tool), indent=4, ensure_ascii=False) + "\n\n" for tool in tools)
        return _LLAMA3_PROMPT.format(date=LLAMA3_DATE, tool_text=text)
    if tool_format == "mistral":
        return "[AVAILABLE_TOOLS] " + json.dumps([_wrap(tool) for tool in tools], ensure_ascii=False) + \
            "[/AVAILABLE_TOOLS]"
    if tool_format == "glm4":
        text = "".join(f"\n\n## {fn['name']}\n\n{json.dumps(fn, indent=4, ensure_ascii=False)}\n"
                       "在调用上述函数时，请使用 Json 格式表示调用的参数。" for fn in functions)
        return _GLM4_PROMPT.format(tool_text=text)
    return _default_tools(functions)


def _default_tools(functions: list[dict]) -> str:
    tool_text = ""
    for fn in functions:
        params = fn.get("parameters") or {}
        required = params.get("required", [])
        lines = []
        for name, param in (params.get("properties") or {}).items():
            extra = ", required" if name in required else ""
            enum = f", should be one of [{', '.join(map(str, param['enum']))}]" if param.get("enum") else ""
            items = f", where each item should be {param['items'].get('type', '')}" if param.get("items") else ""
            lines.append(f"  - {name} ({param.get('type', '')}{extra}): {param.get('description', '')}{enum}{items}\n")
        tool_text += (f"> Tool Name: {fn['name']}\nTool Description: {fn.get('description', '')}\n"
                      f"Tool Args:\n{''.join(lines)}\n")
    names = ", ".join(fn["name"] for fn in functions)
    return _DEFAULT_PROMPT.format(tool_text=tool_text, tool_names=names)


def format_function_call(tool_format: ToolFormat, content: str) -> str:
    """An assistant's function call (JSON) in the family's answer syntax."""
    data = _load(content, "function call")
    calls = data if isinstance(data, list) else [data]
    if not calls or not all(isinstance(call, dict) and "name" in call for call in calls):
        raise DataError(f"A function call must be JSON like {{\"name\": ..., \"arguments\": {{...}}}}, "
                        f"got: {content[:80]!r}.")
    pairs = [(call["name"], _arguments(call)) for call in calls]
    if tool_format == "qwen":
        return "\n".join("<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
                         + "\n</tool_call>" for name, args in pairs)
    if tool_format == "llama3":
        objects = [{"name": name, "parameters": args} for name, args in pairs]
        return json.dumps(objects[0] if len(objects) == 1 else objects, ensure_ascii=False)
    if tool_format == "mistral":
        return json.dumps([{"name": name, "arguments": args} for name, args in pairs], ensure_ascii=False)
    if tool_format == "glm4":
        if len(pairs) > 1:
            raise DataError("GLM-4 cannot make parallel function calls; split them into separate turns.")
        return f"{pairs[0][0]}\n{json.dumps(pairs[0][1], ensure_ascii=False)}"
    return "\n".join(f"Action: {name}\nAction Input: {json.dumps(args, ensure_ascii=False)}" for name, args in pairs)


def _arguments(call: dict) -> Any:
    args = call.get("arguments", call.get("parameters", {}))
    if isinstance(args, str):  # OpenAI stores arguments as a JSON string
        try:
            return json.loads(args)
        except json.JSONDecodeError:
            return args
    return args


def _wrap(tool: dict) -> dict:
    return tool if tool.get("type") == "function" else {"type": "function", "function": tool}


def _unwrap(tool: dict) -> dict:
    function = tool.get("function") if tool.get("type") == "function" else tool
    if not isinstance(function, dict) or "name" not in function:
        raise DataError(f"A tool description needs a \"name\": {json.dumps(tool)[:80]}.")
    return function


def _load(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise DataError(f"The {what} is not valid JSON ({exc}): {str(text)[:80]!r}.") from None
