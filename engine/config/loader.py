"""Reading configs: YAML (safe_load only) or dicts, ``key=value`` overrides, unknown-key errors with suggestions."""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from engine.errors import ConfigError
from engine.jsonio import write_text_atomic

C = TypeVar("C")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a clear ConfigError for a missing file, bad syntax or a non-mapping document."""
    path = Path(path)
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise ConfigError(f"Config file {path} {where}. Give the path of a .yaml file (see examples/).")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}). Save it as UTF-8.") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path} is not valid YAML{where}: {problem}. Fix the syntax and try again.") from None
    if data is None:
        raise ConfigError(f"{path} is empty. A config is a mapping of keys to values (see examples/).")
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must be a mapping of keys to values, not a {type(data).__name__}.")
    return data


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["max_steps=20", "dataset=a,b"]`` -> dict; values parsed as YAML scalars (numbers, booleans, null)."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"Override {item!r} is not of the form key=value (for example max_steps=20).")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if isinstance(value, str) and _NUMBER.match(value.strip()):
            value = float(value)  # YAML 1.1 reads "1e-4" (no dot) as a string
        # "a,b" stays a string; YAML would keep it a string anyway, but lists are not config values.
        overrides[key] = raw if isinstance(value, (list, dict)) else value
    return overrides


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if not f.metadata.get("internal")}


def _coerce(name: str, value: Any, hint: Any) -> Any:
    """Convert a YAML value to the field's type, or raise a ConfigError that names the key and the expected type."""
    if value is None:
        return None
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
    else:
        kinds = [hint]
    if Any in kinds:
        return value
    for kind in kinds:
        try:
            if kind is bool:
                if isinstance(value, bool):
                    return value
                if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
                    return value.lower() in ("true", "yes")
                continue
            if kind is int:
                if isinstance(value, bool):
                    continue
                if isinstance(value, float) and value.is_integer():
                    return int(value)
                return int(value) if isinstance(value, (int, str)) else _fail()
            if kind is float:
                if isinstance(value, bool):
                    continue
                return float(value)
            if kind is str:
                if isinstance(value, (dict, list)):
                    continue
                return value if isinstance(value, str) else str(value)
        except (TypeError, ValueError):
            continue
    expected = " or ".join(getattr(k, "__name__", str(k)) for k in kinds)
    raise ConfigError(f"{name}: expected {expected}, got {value!r}.")


def _fail():
    raise ValueError


def build_dataclass(cls: type[C], data: dict[str, Any], *, accepted_foreign: set[str] = frozenset(),
                    source: str = "config") -> tuple[C, list[str]]:
    """Make ``cls`` from a dict. Unknown keys raise with the nearest valid key; foreign-but-known keys are noted."""
    types_by_name = _field_types(cls)
    kwargs: dict[str, Any] = {}
    ignored: list[str] = []
    errors: list[str] = []
    for key, value in data.items():
        if key in types_by_name:
            try:
                kwargs[key] = _coerce(key, value, types_by_name[key])
            except ConfigError as exc:
                errors.append(str(exc))
        elif key in accepted_foreign:
            ignored.append(key)
        else:
            near = difflib.get_close_matches(key, list(types_by_name), n=1, cutoff=0.6)
            hint = f" Did you mean {near[0]!r}?" if near else " See `lf-assistant train --help` for the valid keys."
            errors.append(f"Unknown key {key!r} in {source}.{hint}")
    if errors:
        raise ConfigError("\n".join(errors))
    return cls(**kwargs), ignored


def config_to_dict(config: Any, *, drop_defaults: bool = False) -> dict[str, Any]:
    """The YAML-serializable form (internal fields left out)."""
    out = {}
    for f in dataclasses.fields(config):
        if f.metadata.get("internal"):
            continue
        value = getattr(config, f.name)
        if drop_defaults and value == f.default:
            continue
        out[f.name] = value
    return out


def dump_yaml(data: dict[str, Any], path: Path) -> None:
    """Write YAML atomically (temp file, then rename), so a crash never leaves half a config."""
    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
