"""How a config field is declared: help, section, choices and numeric range, once, in the field's metadata.

The loader (types, YAML booleans read as string choices), the validator (ranges, choices), the CLI and the TUI
(help, choices) all read these declarations; nothing restates them.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from engine.messages import Message
from engine.readers import short_repr


def _bound_text(bound: float) -> str:
    """A bound as a user types it: whole numbers in full (cutoff_len's 1048576, not :g's 1.04858e+06)."""
    if float(bound).is_integer() and abs(bound) < 1e16:
        return str(int(bound))
    return f"{bound:g}"


@dataclass(frozen=True)
class Bounds:
    """A numeric range: ge/gt lower bound (inclusive/exclusive), le/lt upper bound. Values must also be finite."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def describe(self) -> str:
        parts = []
        if self.ge is not None:
            parts.append(f">= {_bound_text(self.ge)}")
        if self.gt is not None:
            parts.append(f"> {_bound_text(self.gt)}")
        if self.le is not None:
            parts.append(f"<= {_bound_text(self.le)}")
        if self.lt is not None:
            parts.append(f"< {_bound_text(self.lt)}")
        return " and ".join(parts) or "finite"

    def message(self) -> Message:
        """``describe()`` as an engine.messages.Message (no bound, one, or two joined by "and")."""
        parts = self.describe().split(" and ")
        if self.describe() == "finite":
            return Message("config.bounds_finite", "finite")
        if len(parts) == 1:
            return Message("config.bounds_one", parts[0], {"bound": parts[0]})
        return Message("config.bounds_two", self.describe(), {"first": parts[0], "second": " and ".join(parts[1:])})

    def contains(self, value: float) -> bool:
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))


def opt(default: Any, help: str, *, choices: tuple | None = None, section: str = "train",
        ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None,
        refused: dict[Any, str] | None = None, pending: dict[Any, str] | None = None,
        choices_note: str | None = None, multi: str | None = None, alone: tuple[str, ...] | None = None) -> Any:
    """A config field with everything about it declared here.

    ``choices``: the accepted values (a YAML ``no``/``yes``/``off``/``on`` is read back as that string when the
    choices are strings). ``refused``: values of the peers we name and refuse, with the sentence that says why.
    ``pending``: values declared and accepted by the loader whose behaviour is not in this build yet (validate
    refuses them, saying so). ``ge/gt/le/lt``: the numeric range (numbers must also be finite). ``multi``: a
    comma-separated list, of ``"names"`` (datasets, modules, adapter folders, choices) or ``"numbers"``; a YAML list
    is read as the same comma-separated text, as LLaMA-Factory takes either form for these keys. ``alone``: the
    names of a list that mean the whole or nothing (``all``, ``none``) and so are given without other names.
    """
    meta: dict[str, Any] = {"help": help, "section": section}
    if choices:
        meta["choices"] = tuple(choices)
    if any(bound is not None for bound in (ge, gt, le, lt)):
        meta["bounds"] = Bounds(ge, gt, le, lt)
    for key, value in (("refused", refused), ("pending", pending), ("choices_note", choices_note)):
        if value:
            meta[key] = value
    if multi:
        if multi not in ("names", "numbers"):
            raise ValueError(f"multi must be 'names' or 'numbers', not {multi!r}")
        meta["multi"] = multi
    if alone:
        if meta.get("multi") != "names":
            raise ValueError("alone names belong to a multi='names' key")
        meta["alone"] = tuple(alone)
    return field(default=default, metadata=meta)


def internal(default: Any = None) -> Any:
    """A field set by the loader, not a YAML key (left out of the YAML the run writes)."""
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: type(default)(default), repr=False, metadata={"internal": True})
    return field(default=default, repr=False, metadata={"internal": True})


def public_fields(cls_or_config: Any) -> list[dataclasses.Field]:
    """The YAML keys of a config class, in declaration order."""
    return [f for f in dataclasses.fields(cls_or_config) if not f.metadata.get("internal")]


def base_kinds(hint: Any) -> list[Any]:
    """``int | None`` -> [int]; ``str`` -> [str]; ``Any`` -> [Any]."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(hint) if a is not type(None)]
    return [hint]


def numeric_fields(cls: type) -> dict[str, type]:
    """Every int/float field of a config class (bool excluded) -> int or float."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in public_fields(cls):
        kinds = base_kinds(hints[f.name])
        if "choices" not in f.metadata and kinds and kinds[0] in (int, float):
            out[f.name] = kinds[0]
    return out


def _items(f: dataclasses.Field, value: Any) -> list[Any]:
    if f.metadata.get("multi") and isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [value]


def choice_problem(f: dataclasses.Field, value: Any) -> str | None:
    """Why ``value`` is not an accepted choice of field ``f`` (None when it is, or the field has no choices)."""
    choices = f.metadata.get("choices")
    if not choices or value is None:
        return None
    for item in _items(f, value):
        refused = f.metadata.get("refused", {})
        if item in refused:
            return f"{f.name}: {short_repr(item, 40)} {refused[item]}"
        if item not in choices:
            note = f.metadata.get("choices_note")
            return (f"{f.name}: {short_repr(item, 40)} is not one of {', '.join(map(str, choices))}."
                    + (f" {note}" if note else ""))
        pending = f.metadata.get("pending", {})
        if item in pending:
            return f"{f.name}: {short_repr(item, 40)} is not available in this build yet: {pending[item]}"
    return None


def alone_problem(f: dataclasses.Field, value: Any) -> str | None:
    """``alone_message``'s English sentence."""
    message = alone_message(f, value)
    return message.text if message else None


def alone_message(f: dataclasses.Field, value: Any) -> Message | None:
    """Why ``value`` lists a name that must stand alone beside others (``report_to: tensorboard,none``: the
    Trainer refuses "none" among trackers; ``lora_target: all,q_proj`` would adapt q_proj only in LLaMA-Factory)."""
    alone = f.metadata.get("alone") or ()
    items = _items(f, value) if isinstance(value, str) else []
    if len(items) < 2:
        return None
    for name in alone:
        if name in items:
            others = short_repr(", ".join(i for i in items if i != name), 60)
            return Message("config.alone", f"{f.name}: {name} stands alone and cannot be listed with {others}; write "
                           f"{f.name}: {name}, or only the names.", {"key": f.name, "name": name, "others": others})
    return None


def range_problem(f: dataclasses.Field, value: Any) -> str | None:
    """``range_message``'s English sentence."""
    message = range_message(f, value)
    return message.text if message else None


def range_message(f: dataclasses.Field, value: Any) -> Message | None:
    """Why a numeric ``value`` is out of field ``f``'s declared range (non-finite numbers never are in range)."""
    bounds = f.metadata.get("bounds")
    if bounds is None or value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    fields = {"key": f.name, "bounds": bounds.message(), "value": short_repr(value)}
    if isinstance(value, float) and not math.isfinite(value):
        return Message("config.not_finite", f"{f.name} must be a finite number ({bounds.describe()}), got "
                       f"{short_repr(value)}.", fields)
    if not bounds.contains(value):
        return Message("config.out_of_range", f"{f.name} must be {bounds.describe()}, got {short_repr(value)}.",
                       fields)
    return None


def field_problems(config: Any) -> list[str]:
    """Every choice and range problem of a config, one sentence each."""
    problems = []
    for f in public_fields(config):
        value = getattr(config, f.name)
        problem = choice_problem(f, value) or alone_problem(f, value) or range_problem(f, value)
        if problem:
            problems.append(problem)
    return problems
