"""Bounded readers for user YAML and JSON: size, nesting, aliases and numbers are capped, duplicate keys refused.

A config is a few kilobytes of flat keys, so anything far outside that shape is refused with a short message
instead of being expanded, printed or recursed into: a YAML alias bomb, a 5000-digit integer, 10 000 nested
brackets, a binary file. Every message quotes values through ``short_repr``, so no message is ever unbounded.
"""

from __future__ import annotations

import json
import reprlib
from pathlib import Path
from typing import Any

import yaml

from engine.errors import ConfigError, EngineError
from engine.messages import Message

MAX_YAML_BYTES = 1 << 20  # 1 MiB: LLaMA-Factory's largest example YAML is under 2 KB
MAX_JSON_BYTES = 16 << 20  # dataset_info.json and DeepSpeed configs; LLaMA-Factory's registry is ~30 KB
MAX_DEPTH = 32  # configs are flat; dataset_info.json nests four levels
MAX_ALIASES = 100  # aliases of scalars only; aliases of lists/mappings are refused outright

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple, _REPR.maxset = 2, 4, 4, 4, 4
_REPR.maxstring, _REPR.maxother = 60, 60


def short_repr(value: Any, limit: int = 80) -> str:
    """repr() that never grows past ``limit`` characters and never walks a whole structure."""
    try:
        text = _REPR.repr(value)
    except ValueError:  # an int too long for str(): Python refuses to convert it
        text = f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
    except Exception:  # a broken __repr__ must not turn an error message into a traceback
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int = 120) -> str:
    """Text cut to ``limit`` characters (for messages that quote a parser's or a user's text)."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class InputRefused(Exception):
    """Raised inside the readers; the public functions turn it into the caller's error class."""


def comma_names(text: str | None) -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']: the names of a comma-separated key (adapters, modules, targets)."""
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def read_bytes(path: str | Path, max_bytes: int, what: str, error: type[EngineError] = ConfigError) -> str:
    """The file as text: refused when missing, a folder, too big, binary or not UTF-8."""
    path = Path(path)
    if not path.is_file():
        where = ("is a folder" if path.is_dir() else "is not a regular file (a pipe or a device); give a file"
                 if path.exists() else "does not exist")
        raise error(f"{what} {path} {where}.")
    with open(path, "rb") as stream:
        data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise error(f"{path} is larger than {max_bytes // 1024} KB; a {what} is far smaller. Is it the right file?")
    if b"\x00" in data:
        raise error(f"{path} is a binary file, not {what} text.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path} is not UTF-8 text (bad byte at offset {exc.start}). Save it as UTF-8.") from None


# --- YAML ----------------------------------------------------------------------------------------------------------


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader with caps on depth and aliases, no aliases of collections, duplicate keys and huge ints refused."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            line = event.start_mark.line + 1
            if node is not None and not isinstance(node, yaml.ScalarNode):
                raise InputRefused(f"line {line}: the alias *{short_repr(event.anchor, 30)} repeats a list or "
                                   "mapping; aliases of collections are not accepted in configs (write it out)")
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise InputRefused(f"line {line}: more than {MAX_ALIASES} aliases; write the values out")
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise InputRefused(f"line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.setdefault(key, line)
            except TypeError:
                continue  # an unhashable key: SafeConstructor reports it below
            if first != line:
                raise InputRefused(f"duplicate key {short_repr(key, 40)} at lines {first} and {line}; keep one")
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # Python's int-from-str limit (4300 digits)
            digits = len(str(node.value))
            raise InputRefused(f"line {node.start_mark.line + 1}: an integer of {digits} digits is too large") from None


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)


def load_yaml_text(text: str, source: str, error: type[EngineError] = ConfigError) -> Any:
    """Parse one YAML document within the limits; ``error`` carries every problem, with its line."""
    try:
        return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - BoundedLoader is a SafeLoader
    except InputRefused as exc:
        raise error(f"{source}: {exc}.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        problem = f"{context}, {problem}" if context and problem.startswith("but ") else problem
        raise error(f"{source} is not valid YAML{where}: {clip(problem, 120)}. "
                    "Fix the syntax and try again.") from None
    except RecursionError:
        raise error(f"{source}: nested too deeply to read.") from None


def read_yaml(path: str | Path, error: type[EngineError] = ConfigError) -> dict[str, Any]:
    """A YAML mapping from a file, read within the limits; ``error`` for anything else."""
    text = read_bytes(path, MAX_YAML_BYTES, "config file", error)
    data = load_yaml_text(text, str(path), error)
    if data is None:
        text = f"{path} is empty. A config is a mapping of keys to values (see examples/)."
        raise error(text, message=Message("config.yaml_empty", text, {"path": str(path)}))
    if not isinstance(data, dict):
        text = f"{path} must be a mapping of keys to values, not a {type(data).__name__}."
        raise error(text, message=Message("config.yaml_not_mapping", text, {"path": str(path),
                                                                            "kind": type(data).__name__}))
    return data


# --- JSON ----------------------------------------------------------------------------------------------------------


class _Duplicate(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _refuse_constant(name: str):
    raise InputRefused(f"{name} is not standard JSON; write a number or null")


def _depth(value: Any) -> int:
    """Nesting depth without recursion, so a deep structure cannot overflow the stack here."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _key_lines(text: str, key: str) -> str:
    quoted = json.dumps(key)
    lines = [str(number) for number, line in enumerate(text.splitlines(), 1) if quoted in line]
    return f" (lines {', '.join(lines[:4])})" if lines else ""


def load_json_text(text: str, source: str, error: type[EngineError] = ConfigError,
                   max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON within the limits: duplicate keys, NaN/Infinity, huge integers and deep nesting refused."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_refuse_constant)
    except _Duplicate as exc:
        raise error(f"{source}: duplicate key {short_repr(exc.key, 40)}{_key_lines(text, exc.key)}; "
                    "keep one.") from None
    except InputRefused as exc:
        raise error(f"{source}: {exc}.") from None
    except RecursionError:
        raise error(f"{source}: nested too deeply to read (more than {max_depth} levels is refused).") from None
    except json.JSONDecodeError as exc:
        raise error(f"{source} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}. "
                    "Fix the syntax (a trailing comma is the usual culprit).") from None
    except ValueError:  # Python's int-from-str limit (4300 digits)
        raise error(f"{source}: a number is too large to read (more than 4300 digits).") from None
    if _depth(data) > max_depth:
        raise error(f"{source}: nested more than {max_depth} levels deep; is this the right file?")
    return data


def read_json(path: str | Path, error: type[EngineError] = ConfigError, what: str = "JSON file",
              max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON document from a file, read within the limits."""
    return load_json_text(read_bytes(path, max_bytes, what, error), str(path), error)
