"""The one config loader: a YAML path or a dict, ``key=value`` overrides and keyword overrides, into a typed
TrainConfig, InferConfig or ExportConfig.

Every key is a field of the config (converted to the field's type), an alias of one, a LLaMA-Factory key from
``engine.config.lf_table`` (refused by name, or accepted and named as not used), a key of another of our configs
(not used here), or unknown ("Did you mean ...?"). Every problem is collected and raised at once.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

from engine.config.fields import base_kinds, public_fields
from engine.config.lf_keys import TRAIN, WHAT, foreign_file_problem
from engine.readers import load_yaml_text, read_yaml, short_repr
from engine.errors import ConfigError
from engine.messages import Message
from engine.jsonio import write_text_atomic

C = TypeVar("C")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")
# What YAML 1.1 reads as a boolean, given back as the word when the field expects one of its string choices.
_BOOL_WORDS = {False: ("no", "off", "false"), True: ("yes", "on", "true")}
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


@dataclass(frozen=True)
class Schema:
    """One config class as the loader sees it."""

    cls: type
    purpose: str
    aliases: dict[str, tuple[str, Callable[[Any], Any] | None]]

    @functools.cached_property
    def fields(self) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in public_fields(self.cls)}

    @functools.cached_property
    def hints(self) -> dict[str, Any]:
        return typing.get_type_hints(self.cls)


@functools.cache
def schemas() -> dict[str, Schema]:
    """train, infer and export (imported here: their modules import the field helpers beside this one)."""
    from engine.config.export import ExportConfig
    from engine.config.infer import InferConfig
    from engine.config.train import KEY_ALIASES, TrainConfig

    return {"train": Schema(TrainConfig, "train", KEY_ALIASES), "infer": Schema(InferConfig, "infer", {}),
            "export": Schema(ExportConfig, "export", {})}


def known_keys() -> set[str]:
    """Every key any of our configs or the LLaMA-Factory table knows."""
    from engine.config.lf_table import LF_KEYS

    keys = set(LF_KEYS)
    for schema in schemas().values():
        keys |= set(schema.fields) | set(schema.aliases)
    return keys


def load(purpose: str, source: str | Path | dict[str, Any], *overrides: str, **kw_overrides: Any) -> Any:
    """A typed config of ``purpose`` (train | infer | export); ConfigError listing every problem otherwise."""
    schema = schemas()[purpose]
    if isinstance(source, dict):
        data, label, config_dir = dict(source), "config", None
    else:
        data, label, config_dir = read_yaml(source), str(source), str(Path(source).resolve().parent)
    problem = foreign_file_problem(data, known_keys(), label, purpose)  # the file's own keys, before overrides
    if problem:
        raise ConfigError(problem)
    given = {**parse_overrides(list(overrides)), **kw_overrides}
    data.update(given)
    data = _apply_aliases(schema, data)
    config, unused = build(schema, data, label, overridden=frozenset(given))
    config.unused_keys = tuple(sorted(unused))
    if purpose == TRAIN:
        config.config_dir, config.given_keys = config_dir, tuple(str(key) for key in data)
    return config


def load_checked(purpose: str, check, source: str | Path | dict[str, Any], *overrides: str,
                 **kw_overrides: Any) -> Any:
    """``load`` followed by ``check(config)`` (a list of problems): ConfigError listing them all, if any."""
    config = load(purpose, source, *overrides, **kw_overrides)
    problems = check(config)
    if problems:
        label = "config" if isinstance(source, dict) else str(source)
        raise ConfigError(f"{label} has problems:\n- " + "\n- ".join(problems))
    return config


def _apply_aliases(schema: Schema, data: dict[str, Any]) -> dict[str, Any]:
    out = {key: value for key, value in data.items() if key not in schema.aliases}
    for alias, (target, convert) in schema.aliases.items():
        if alias not in data:
            continue
        value = convert(data[alias]) if convert else data[alias]
        default = schema.fields[target].default
        if target in out and out[target] not in (None, value, default):
            said = "" if value == data[alias] else f" (that is {target}: {short_repr(value)})"
            raise ConfigError(f"{alias}: {short_repr(data[alias])}{said} and {target}: {short_repr(out[target])} "
                              "disagree; keep one of them.")
        out[target] = value
    return out


def build(schema: Schema, data: dict[str, Any], label: str,
          overridden: frozenset = frozenset()) -> tuple[Any, dict[str, str]]:
    """The config instance and the keys accepted but not used (key -> why); ConfigError with every problem.
    A refused key in ``overridden`` came from the key=value overrides, not from the file ``label`` names."""
    kwargs: dict[str, Any] = {}
    unused: dict[str, str] = {}
    errors: list[str] = []
    messages: list[Message | None] = []
    for key, value in data.items():
        if key in schema.fields:
            try:
                kwargs[key] = coerce(schema.fields[key], schema.hints[key], value)
            except ConfigError as exc:
                errors.append(str(exc))
                messages.append(exc.message)
            continue
        refusal, reason, coded = classify(schema, key, value, "the key=value overrides" if key in overridden else label)
        if refusal:
            errors.append(refusal)
            messages.append(coded)
        else:
            unused[str(key)] = reason
    if errors:  # problems that all have a code keep them (a front end shows them in its language)
        text = "\n".join(errors)
        coded = None if None in messages else messages[0] if len(messages) == 1 else \
            Message("config.problems", text, {"lines": messages})  # one problem per line
        raise ConfigError(text, message=coded)
    return schema.cls(**kwargs), unused


def classify(schema: Schema, key: Any, value: Any, label: str) -> tuple[str | None, str, Message | None]:
    """(refusal message, "", the refusal as a code with values where it has one) or (None, why the key is not used,
    None) for a key that is not a field of ``schema``."""
    from engine.config.lf_table import LF_KEYS

    rule = LF_KEYS.get(key) if isinstance(key, str) else None
    if rule is not None:
        refusal = rule.refusal(key, value, schema.purpose)
        if refusal is not None:
            return refusal.text, "", refusal
        return None, rule.unused_reason(schema.purpose), None
    for other in schemas().values():
        if other is not schema and (key in other.fields or key in other.aliases):
            return None, f"a key of the {WHAT[other.purpose]} config", None
    valid = list(schema.fields) + list(schema.aliases)
    near = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
    words = set(str(key).lower().split("_")) - {""}
    related = ", ".join(sorted(name for name in schema.fields if words & set(name.split("_")))[:8])
    if near:
        hint = Message("config.did_you_mean", f" Did you mean {near[0]!r}?", {"key": near[0]})
    elif related:
        hint = Message("config.related_keys", f" Keys with a word in common: {related}.", {"keys": related})
    else:  # no key to point at: say where the keys are shown in use
        hint = Message("config.see_valid_keys", " Check its spelling against the configs in examples/.")
    text = f"Unknown key {short_repr(key, 60)} in {label}.{hint.text}"
    return text, "", Message("config.unknown_key", text, {"key": short_repr(key, 60), "label": label, "hint": hint})


def coerce(f: dataclasses.Field, hint: Any, value: Any) -> Any:
    """A YAML value in the field's type, or a ConfigError naming the key and the expected type."""
    if value is None:
        return None if type(None) in typing.get_args(hint) or hint is Any else f.default
    choices = f.metadata.get("choices") or ()
    if isinstance(value, bool) and choices and all(isinstance(c, str) for c in choices):
        names = tuple(choices) + tuple(f.metadata.get("refused", ()))
        value = next((word for word in _BOOL_WORDS[value] if word in names), str(value).lower())
    if f.metadata.get("multi") and isinstance(value, (list, tuple)):
        value = _comma_text(f, value)
    kinds = base_kinds(hint)
    if Any in kinds:
        return value
    for kind in kinds:
        converted = _convert(kind, value)
        if converted is not None:
            return converted
    names = [getattr(k, "__name__", str(k)) for k in kinds]
    expected = " or ".join(names)
    share = _STEP_SHARES.get(f.name) if isinstance(value, float) and 0 < value < 1 else None
    if share:  # Transformers reads a float below 1 here as a share of the total steps
        text = (f"{f.name}: {short_repr(value)} is a share of the total steps (Transformers' reading), "
                f"which lf-assistant does not take here: {share.text}.")
        raise ConfigError(text, message=Message("config.step_share", text,
                                                {"key": f.name, "value": short_repr(value), "share": share}))
    text = f"{f.name}: expected {expected}, got {short_repr(value)}."
    raise ConfigError(text, message=Message("config.expected_type", text, {
        "key": f.name, "expected": expected, "kinds": " / ".join(names), "value": short_repr(value)}))


def _comma_text(f: dataclasses.Field, items: list | tuple) -> str:
    """A YAML list of a comma-separated key as the text ``a,b`` the key takes, so the run's YAML, the validator and
    every reader after the loader see one form; ConfigError when an item could not be written that way."""
    if f.metadata["multi"] == "numbers":
        bad = [item for item in items if isinstance(item, (bool, dict, list, tuple, set)) or item is None]
        if bad:
            raise ConfigError(f"{f.name}: the list must hold numbers only, got {short_repr(bad[0], 40)} in it.")
        return ",".join(str(item).strip() for item in items)
    problems = []
    for item in items:
        if not isinstance(item, str):
            problems.append(f"{short_repr(item, 40)} is not a name")
        elif "," in item:
            problems.append(f"{short_repr(item, 40)} holds a comma (give each name as its own item)")
        elif not item.strip():
            problems.append("an empty item (remove it)")
    if problems:
        raise ConfigError(f"{f.name}: the list must hold names (text without commas): {'; '.join(problems)}.")
    return ",".join(item.strip() for item in items)


_STEP_SHARES = {
    "warmup_steps": Message("config.share_warmup", "give warmup_ratio instead (e.g. warmup_ratio: 0.1) or a step "
                            "count"),
    **{key: Message("config.share_steps", "give a step count (e.g. 10)")
       for key in ("logging_steps", "save_steps", "eval_steps")},
}


def _convert(kind: type, value: Any) -> Any:
    """``value`` as ``kind``, or None when it does not convert."""
    if isinstance(value, (dict, list, tuple, set)):
        return None
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            word = str(value).strip().lower() if isinstance(value, (str, int)) else None
            return True if word in _TRUE else False if word in _FALSE else None
        if kind is str:
            if isinstance(value, bool):
                return "true" if value else "false"
            return value if isinstance(value, str) else str(value)
        if isinstance(value, bool):
            return None
        if kind is int:
            if isinstance(value, str):
                text = value.strip()
                value = int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
            if isinstance(value, float):
                return int(value) if value.is_integer() else None
            return value if isinstance(value, int) else None
        if kind is float:
            return float(value) if isinstance(value, (int, float, str)) else None
    except (TypeError, ValueError, OverflowError):
        return None
    return None


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["max_steps=20", "dataset=a,b"]`` -> dict; values parsed as YAML scalars (numbers, booleans, null) or
    flow lists (``report_to=[wandb,tensorboard]``)."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"Override {short_repr(item)} is not of the form key=value (for example max_steps=20).")
        try:
            value = load_yaml_text(raw, f"override {key}") if raw.strip() else None
        except ConfigError:
            value = raw
        if isinstance(value, str) and _NUMBER.match(value.strip()):
            value = float(value)  # YAML 1.1 reads "1e-4" (no dot) as a string
        # "[a,b]" is a list, as LLaMA-Factory's command line reads it (the comma-list keys take one, other keys say
        # what they expect); "a,b" stays a string. A mapping stays the text given: the keys that take one read it.
        overrides[key] = raw if isinstance(value, dict) else value
    return overrides


def config_to_dict(config: Any, *, drop_defaults: bool = False) -> dict[str, Any]:
    """The YAML-serializable form (internal fields left out)."""
    out = {}
    for f in public_fields(config):
        value = getattr(config, f.name)
        if drop_defaults and value == f.default:
            continue
        out[f.name] = value
    return out


def dump_yaml(data: dict[str, Any], path: Path) -> None:
    """Write YAML atomically (temp file, then rename), so a crash never leaves half a config."""
    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


__all__ = ["Schema", "build", "classify", "coerce", "config_to_dict", "dump_yaml", "known_keys", "load",
           "parse_overrides", "read_yaml", "schemas"]
