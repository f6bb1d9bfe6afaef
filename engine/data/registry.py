"""The dataset registry: `dataset_info.json`, in LLaMA-Factory's format, read and written safely.

A training config names datasets (`dataset: identity,alpaca_demo`); each name is an entry of the
`dataset_info.json` inside `dataset_dir`. Users arrive with LLaMA-Factory's own file, so every key it documents is
understood here; entries the offline engine cannot use (hub-only, scripts, cloud files) are still parsed, and refused
only when they are loaded.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.data.files import JsonReader, JsonTooDeep, write_json_atomic
from engine.data.text import MAX_DEPTH, find_bad_text, shorten
from engine.errors import DataError
from engine.readers import short_repr

INFO_FILE = "dataset_info.json"

Formatting = Literal["alpaca", "sharegpt", "openai"]
FORMATTINGS: tuple[str, ...] = ("alpaca", "sharegpt", "openai")

# Column defaults per formatting, as LLaMA-Factory's DatasetAttr has them; None means "no such column".
COLUMN_DEFAULTS: dict[str, dict[str, str | None]] = {
    "alpaca": {"prompt": "instruction", "query": "input", "response": "output", "history": None},
    "sharegpt": {"messages": "conversations"},
    "openai": {"messages": "conversations"},  # sharegpt with tool_calls read (LLaMA-Factory's defaults, tags too)
}
COLUMN_KEYS: tuple[str, ...] = (
    "prompt", "query", "response", "history", "messages", "system", "tools",
    "images", "videos", "audios", "chosen", "rejected", "kto_tag",
)
TAG_DEFAULTS: dict[str, str] = {
    "role_tag": "from",
    "content_tag": "value",
    "user_tag": "human",
    "assistant_tag": "gpt",
    "observation_tag": "observation",
    "function_tag": "function_call",
    "system_tag": "system",
}
# Keys of an entry that point at data somewhere other than dataset_dir.
REMOTE_KEYS: tuple[str, ...] = ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name")
ENTRY_KEYS: tuple[str, ...] = (
    "file_name", *REMOTE_KEYS, "formatting", "ranking", "subset", "split", "folder", "num_samples", "columns", "tags",
)


@dataclass
class DatasetSpec:
    """One entry of dataset_info.json."""

    name: str
    """The key the entry is registered under."""
    file_name: str | None = None
    """A file or folder inside dataset_dir (json, jsonl, csv, parquet, arrow)."""
    formatting: Formatting = "alpaca"
    """alpaca (instruction/input/output columns), sharegpt (a list of messages per row), or openai: sharegpt whose
    assistant messages may carry OpenAI ``tool_calls``, whose tool results may come one message per call, and whose
    system text gets LLaMA-Factory's "detailed thinking off" rule (engine.data.formats.openai_system)."""
    ranking: bool = False
    """A preference set (chosen/rejected answers) for DPO rather than SFT data."""
    split: str = "train"
    """The hub dataset's split; a local file is the one split train, of which a slice (train[:100]) takes part."""
    subset: str | None = None
    folder: str | None = None
    num_samples: int | None = None
    """Sample this many rows (seeded, with repetition when larger than the file) before max_samples applies."""
    columns: dict[str, str] = field(default_factory=dict)
    """Column names in the file, overriding the defaults of the formatting."""
    columns_given: bool = False
    """The entry had a "columns" object: as in LLaMA-Factory (DatasetAttr.join), a column it does not name is
    then absent, not the formatting's default (firefly's {"prompt": "input", "response": "target"} has no query)."""
    tags_given: bool = False
    """The same for "tags": a tag the object does not name is absent (its messages are not accepted)."""
    tags: dict[str, str] = field(default_factory=dict)
    """ShareGPT message keys and role names, overriding TAG_DEFAULTS."""
    hf_hub_url: str | None = None
    ms_hub_url: str | None = None
    om_hub_url: str | None = None
    script_url: str | None = None
    cloud_file_name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys this engine does not know; kept so that rewriting the file loses nothing."""

    def column(self, key: str) -> str | None:
        """The file's column for `key` (prompt, response, messages, ...), or None when the dataset has none."""
        if key in self.columns:
            return self.columns[key]
        if self.ranking and key in ("chosen", "rejected"):
            return key  # LF has no default here and fails on a KeyError; the obvious name is the useful one
        if self.columns_given:
            return None
        return COLUMN_DEFAULTS[self.formatting].get(key)

    def tag(self, key: str) -> str | None:
        """A ShareGPT tag (role_tag, user_tag, ...): the entry's, else LLaMA-Factory's default unless the entry
        has a "tags" object (then None, as there)."""
        if key in self.tags:
            return self.tags[key]
        return None if self.tags_given else TAG_DEFAULTS[key]

    @property
    def is_local(self) -> bool:
        """True when the rows live in a file inside dataset_dir (LF prefers hub urls when both are given)."""
        return self.file_name is not None and not any(getattr(self, key) for key in REMOTE_KEYS)

    def to_dict(self) -> dict[str, Any]:
        """The entry as it is written to dataset_info.json (defaults left out)."""
        out: dict[str, Any] = {}
        for key in ENTRY_KEYS:
            value = getattr(self, key)
            default = DatasetSpec.__dataclass_fields__[key].default
            if key == "columns":  # every column it reads, so LLaMA-Factory (which then defaults none) reads the same
                if value or self.columns_given:
                    out[key] = {k: self.column(k) for k in COLUMN_KEYS if self.column(k) is not None}
            elif key == "tags":
                if value or self.tags_given:
                    out[key] = {k: self.tag(k) for k in TAG_DEFAULTS if self.tag(k) is not None}
            elif value != default:
                out[key] = value
        out.update(self.extra)
        return out


def parse_spec(name: str, entry: Any) -> DatasetSpec:
    """One dataset_info.json entry -> DatasetSpec; DataError naming the entry and the bad key."""
    where = f"dataset {shorten(name)} in {INFO_FILE}"
    if not isinstance(entry, dict):
        raise DataError(f"{where} must be an object such as {{\"file_name\": \"data.json\"}}, not {shorten(entry)}.")
    if not any(entry.get(key) for key in ("file_name", *REMOTE_KEYS)):
        raise DataError(f"{where} has no file_name. Add \"file_name\": \"<your file>\" (a file inside dataset_dir).")
    formatting = entry.get("formatting", "alpaca")
    if not isinstance(formatting, str) or formatting not in FORMATTINGS:
        raise DataError(f"{where}: formatting {shorten(formatting)} is not one of {', '.join(FORMATTINGS)}.")
    columns = _string_map(entry.get("columns", {}), f"{where}: columns", COLUMN_KEYS)
    tags = _string_map(entry.get("tags", {}), f"{where}: tags", tuple(TAG_DEFAULTS))
    ranking = entry.get("ranking", False)
    if not isinstance(ranking, bool):
        raise DataError(f"{where}: ranking must be true or false, not {shorten(ranking)}.")
    num_samples = entry.get("num_samples")
    if num_samples is not None and (not isinstance(num_samples, int) or isinstance(num_samples, bool)
                                    or num_samples < 1):
        raise DataError(f"{where}: num_samples must be a positive whole number, not {shorten(num_samples)}.")
    for key in ("file_name", "split", "subset", "folder", *REMOTE_KEYS):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            raise DataError(f"{where}: {key} must be a string, not {shorten(entry[key])}.")
    known = {key: entry[key] for key in ENTRY_KEYS if key in entry and key not in ("columns", "tags")}
    extra = {key: value for key, value in entry.items() if key not in ENTRY_KEYS}
    return DatasetSpec(name=name, columns=columns, tags=tags, extra=extra, columns_given="columns" in entry,
                       tags_given="tags" in entry, **known)


def entry_problem(spec: DatasetSpec) -> str | None:
    """Why an entry's "columns" / "tags" object leaves out what every row of its formatting needs (there the
    unnamed ones are absent, not defaulted, so LLaMA-Factory reads no row of it either), or None. Asked where the
    dataset is used (get_dataset_spec), so one such entry does not hide the others of a listing."""
    try:
        _require_named(spec, f"dataset {shorten(spec.name)} in {INFO_FILE}")
    except DataError as exc:
        return str(exc)
    return None


def _require_named(spec: DatasetSpec, where: str) -> None:
    if any(spec.columns.get(key) for key in ("images", "videos", "audios")):
        return  # a multimodal entry: refused as such where it is used (listed as not usable, never read)
    if spec.formatting != "alpaca" and spec.column("messages") is None:
        raise DataError(f"{where}: its \"columns\" names no \"messages\" column. A columns object replaces every "
                        "default (as in LLaMA-Factory), so add \"messages\": \"conversations\" (or your column).")
    if spec.formatting == "alpaca" and spec.columns_given and spec.column("prompt") is None \
            and spec.column("query") is None:
        # e.g. {"columns": {"system": "system"}}, as lf-assistant once wrote entries: no row has a prompt then
        raise DataError(f"{where}: its \"columns\" names no \"prompt\" (nor \"query\") column. A columns object "
                        "replaces every default (as in LLaMA-Factory), so name them all, e.g. \"prompt\": "
                        "\"instruction\", \"query\": \"input\", \"response\": \"output\" beside the ones it has.")
    if spec.formatting != "alpaca" and spec.tags_given:
        missing = [key for key in ("role_tag", "content_tag", "user_tag", "assistant_tag") if spec.tag(key) is None]
        if missing:
            raise DataError(f"{where}: its \"tags\" leaves out {', '.join(missing)}. A tags object replaces every "
                            "default (as in LLaMA-Factory), so no message could be read; name "
                            + ", ".join(f"{key} (default {TAG_DEFAULTS[key]!r})" for key in missing) + ".")


def _string_map(value: Any, where: str, allowed: tuple[str, ...]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise DataError(f"{where} must be an object of names to strings, not {shorten(value)}.")
    for key, item in value.items():
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else f" Valid keys: {', '.join(allowed)}."
            raise DataError(f"{where}: unknown key {shorten(key, 40)}.{hint}")
        if not isinstance(item, str):
            raise DataError(f"{where}: {key} must be a string, not {shorten(item)}.")
    return dict(value)


def find_dataset_dir(dataset_dir: str | Path, *, config_dir: Path | None = None) -> Path:
    """The folder holding dataset_info.json. Relative paths: the config's folder first, then the working dir."""
    if str(dataset_dir) == "ONLINE" or str(dataset_dir).startswith("REMOTE:"):
        raise DataError(f"dataset_dir {short_repr(str(dataset_dir), 200)} is LLaMA-Factory's way to read datasets "
                        "straight from a hub without a dataset_info.json (ONLINE) or with one kept on a hub "
                        "(REMOTE:repo), which lf-assistant does not do. Register the hub dataset in a local "
                        "dataset_info.json with hf_hub_url (or ms_hub_url) and set dataset_dir to its folder.")
    raw = Path(os.path.expanduser(str(dataset_dir)))
    if raw.is_absolute():
        candidates = [raw]
    else:
        candidates = [Path(config_dir) / raw] if config_dir is not None else []
        if Path.cwd() / raw not in candidates:
            candidates.append(Path.cwd() / raw)
    for candidate in candidates:
        if (candidate / INFO_FILE).is_file():
            return candidate.resolve()
    looked = "; ".join(_describe_candidate(candidate) for candidate in candidates)
    raise DataError(f"No {INFO_FILE} found for dataset_dir {short_repr(str(dataset_dir), 200)}. Looked in: {looked}. "
                    "Set dataset_dir to the folder that holds dataset_info.json (an absolute path always works).")


def _describe_candidate(path: Path) -> str:
    if not path.exists():
        return f"{path} (does not exist)"
    if not path.is_dir():
        return f"{path} (not a folder)"
    return f"{path} (no {INFO_FILE} inside)"


def load_dataset_info(dataset_dir: Path) -> dict[str, DatasetSpec]:
    """Every entry of dataset_dir/dataset_info.json; DataError on bad JSON (line and column) or a bad entry."""
    raw = _read_info(Path(dataset_dir))
    return {name: parse_spec(name, entry) for name, entry in raw.items()}


def _read_info(dataset_dir: Path, *, missing_ok: bool = False) -> dict[str, Any]:
    path = dataset_dir / INFO_FILE
    if not path.is_file():
        if missing_ok:
            return {}
        raise DataError(f"{path} does not exist. Create it (an empty registry is {{}}) or point dataset_dir elsewhere.")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text (bad byte at offset {exc.start}). Save it as UTF-8.") from None
    except OSError as exc:
        raise DataError(f"{path} cannot be read: {exc.strerror or exc}. Check its permissions.") from None
    if "\x00" in text:
        raise DataError(f"{path} looks like a binary file, not JSON text. Point dataset_dir at the folder of the "
                        "real dataset_info.json.")
    reader = JsonReader()
    try:
        data = reader.decode_all(text)
    except JsonTooDeep:
        raise DataError(f"{path} nests objects more than {MAX_DEPTH} levels deep; a registry entry needs 3. "
                        "Fix the file.") from None
    except ValueError as exc:
        where = f"{exc.msg} at line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) \
            else shorten(str(exc), 80)
        raise DataError(f"{path} is not valid JSON: {where}. Fix the syntax (a trailing comma is the usual "
                        "culprit).") from None
    if reader.duplicates:
        names = ", ".join(shorten(name, 40) for name in reader.duplicates[:5])
        raise DataError(f"{path} names {names} more than once (in the same object); JSON keeps only the last, "
                        "silently. Keep one of each.")
    if not isinstance(data, dict):
        raise DataError(f"{path} must hold one JSON object mapping dataset names to entries.")
    bad = find_bad_text(data)
    if bad is not None:
        raise DataError(f"{path}: {bad[0] or 'a key'} holds text that is not valid Unicode (a lone surrogate). "
                        "Fix it.")
    return data


def get_dataset_spec(name: str, dataset_dir: Path) -> DatasetSpec:
    """The entry registered as `name`; an unknown name lists close matches, or explains how to register a file."""
    info = _read_info(Path(dataset_dir))
    if name in info:
        spec = parse_spec(name, info[name])
        problem = entry_problem(spec)
        if problem:
            raise DataError(problem)
        return spec
    if _looks_like_path(name):
        raise DataError(_path_given_message(name, Path(dataset_dir)))
    close = difflib.get_close_matches(name, list(info), n=3, cutoff=0.6)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    raise DataError(f"Dataset {shorten(name)} is not registered in {Path(dataset_dir) / INFO_FILE}.{hint} "
                    f"Registered names: {_short_list(list(info))}.")


def _looks_like_path(name: str) -> bool:
    suffix = Path(name).suffix.lower()
    return "/" in name or "\\" in name or suffix in (".json", ".jsonl", ".csv", ".parquet", ".arrow")


def _path_given_message(name: str, dataset_dir: Path) -> str:
    stem = Path(name).stem or "my_data"
    snippet = json.dumps({stem: {"file_name": Path(name).name}})
    return (f"{short_repr(name, 60)} looks like a file path, but `dataset` takes names registered in "
            f"{dataset_dir / INFO_FILE}. Copy the file into {dataset_dir} and add an entry such as {snippet} (run "
            f"`lf-assistant data check {short_repr(name, 200)}` to see its format), then use dataset: {stem}.")


def _short_list(names: list[str], limit: int = 12) -> str:
    if not names:
        return "(none)"
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def register_dataset(dataset_dir: Path, name: str, spec: dict, *, overwrite: bool = False) -> None:
    """Add `name` to dataset_dir/dataset_info.json (created when missing), written atomically.

    An existing, different entry under the same name is kept unless overwrite=True; registering the same entry
    twice is a no-op.
    """
    dataset_dir = Path(dataset_dir)
    if not name or not isinstance(name, str) or name != name.strip() or "," in name:
        raise DataError(f"Dataset name {short_repr(name, 60)} is not usable: it must be non-empty, without commas or "
                        "surrounding spaces (configs list several names separated by commas).")
    parsed = parse_spec(name, spec)
    if parsed.file_name is not None:
        dataset_file_path(parsed, dataset_dir, must_exist=False)
    info = _read_info(dataset_dir, missing_ok=True)
    if name in info and info[name] != spec and not overwrite:
        raise DataError(f"{dataset_dir / INFO_FILE} already has a different entry named {name!r}: "
                        f"{shorten(info[name], 120)}. Choose another name or pass overwrite=True.")
    if info.get(name) == spec:
        return
    info[name] = spec
    # A dataset_info.json that is a link (one registry shared by several folders) is updated where it lives: the
    # atomic replace would otherwise put a plain file in place of the link, and the shared one would not learn of it.
    write_json_atomic((dataset_dir / INFO_FILE).resolve(), info)


def dataset_file_path(spec: DatasetSpec, dataset_dir: Path, *, must_exist: bool = True) -> Path:
    """Where the entry's file_name lives; it must stay inside dataset_dir (no `..`, no absolute path outside)."""
    if not spec.file_name:
        raise DataError(f"Dataset {short_repr(spec.name, 60)} has no file_name: it lives on a hub "
                        f"({spec.hf_hub_url or spec.ms_hub_url or spec.om_hub_url or spec.script_url}).")
    root = Path(os.path.abspath(dataset_dir))
    # Lexical check (abspath, not resolve): a symlink the user placed inside dataset_dir is theirs to make,
    # but a dataset_info.json from elsewhere must not point the engine at arbitrary files.
    target = Path(os.path.abspath(root / spec.file_name))
    if target != root and root not in target.parents:
        raise DataError(f"Dataset {short_repr(spec.name, 60)}: file_name {short_repr(spec.file_name, 200)} points "
                        f"outside {root}. "
                        "Dataset files must live inside dataset_dir; copy the file there and use a relative name.")
    if must_exist and not target.exists():
        raise DataError(f"Dataset {short_repr(spec.name, 60)}: file {target} does not exist. Fix file_name in "
                        f"{root / INFO_FILE} or copy the file there.")
    return target
