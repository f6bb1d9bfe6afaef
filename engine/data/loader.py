"""Loading registered datasets into normalized examples (see engine.data.formats for the format).

`load_examples("identity,alpaca_demo", data_dir)` reads each registered file (json, jsonl, csv, parquet, arrow, txt or
a folder of them), or a hub dataset's downloaded copy (engine.data.hub), converts every row, and mixes the datasets
(engine.data.mixing: concatenated in the order given unless mix_strategy interleaves them).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from engine.data.files import SUFFIX_KINDS, read_rows, refusal
from engine.data.formats import convert_record, convert_text, require_supported
from engine.data.mixing import mix
from engine.data.registry import INFO_FILE, DatasetSpec, dataset_file_path, get_dataset_spec
from engine.errors import DataError
from engine.messages import Message
from engine.readers import short_repr

__all__ = ["convert_record", "load_examples", "load_texts", "read_records", "split_names"]

_ERRORS_SHOWN = 5


def read_records(path: Path) -> list[dict]:
    """All rows of a data file, or of every data file in a folder (sorted by name, one file type)."""
    path = Path(path)
    files = _data_files(path) if path.is_dir() else [path]
    records: list = []
    for file in files:
        read = read_rows(file)
        if read.bad_lines:
            line, message = read.bad_lines[0]
            others = len(read.bad_lines) - 1
            more = f" ({others} more bad lines)" if others else ""
            raise refusal("bad_line" if not others else "bad_lines", f"{file}: line {line} is not valid JSON: "
                          f"{message}{more}. Fix it, or run `lf-assistant data check {file}` to list every problem.",
                          path=file, line=line, problem=message, more=others)
        if read.issues:
            raise _issues_refusal(file, read.issues)
        records.extend(read.rows)
    return records


def _issues_refusal(file: Path, issues: list) -> DataError:
    lines = []
    for issue in issues[:_ERRORS_SHOWN]:
        at = {"row": issue.row, "line": issue.line}
        where = (Message("data.load.file", "file") if issue.row is None and not issue.line else
                 Message("data.load.file_line", f"file (line {issue.line})", at) if issue.row is None else
                 Message("data.load.row", f"row {issue.row}", at) if not issue.line else
                 Message("data.load.row_line", f"row {issue.row} (line {issue.line})", at))
        field = f" {issue.field!r}" if issue.field else ""
        lines.append(Message("data.load.issue", f"{where.text}{field}: {issue.message}", {
            "where": where, "field": field, "problem": issue.coded or issue.message}))
    return _problems("file_issues", f"{file} has {len(issues)} problem(s) that training would hide:", lines,
                     len(issues), f"Fix the file, or run `lf-assistant data check {file}` for the full list.",
                     path=file)


def _dataset_refusal(code: str, text: str, **fields) -> DataError:
    """A refusal about the datasets of a run rather than one file: ``data.load.<code>`` with its values."""
    return refusal(code, text, scope="data.load", **fields)


def _problems(code: str, head: str, lines: list[Message], count: int, tail: str, **fields) -> DataError:
    """A refusal that lists the first problems found (``_ERRORS_SHOWN``), the count of the rest, and what to do:
    one sentence in English, and as ``data.load.<code>`` with the lines as messages of their own."""
    more = Message("data.load.more", f"\n  ... and {count - _ERRORS_SHOWN} more",
                   {"count": count - _ERRORS_SHOWN}) if count > _ERRORS_SHOWN else ""
    shown = "\n  ".join(line.text for line in lines)
    text = f"{head}\n  {shown}{more.text if more else ''}\n{tail}"
    return _dataset_refusal(code, text, **fields, count=count, lines=lines, more=more)


def _data_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                   and p.suffix.lower() in SUFFIX_KINDS and p.name != INFO_FILE)
    if not files:
        kinds = ", ".join(SUFFIX_KINDS)
        raise refusal("no_files", f"{folder} holds no data files ({kinds}). Put the rows there.", path=folder,
                      kinds=kinds)
    # LLaMA-Factory loads a folder with one datasets builder per type; .json and .jsonl are both its "json"
    kinds = {"json" if SUFFIX_KINDS[p.suffix.lower()] == "jsonl" else SUFFIX_KINDS[p.suffix.lower()] for p in files}
    if len(kinds) > 1:
        mixed = ", ".join(sorted(kinds))
        raise refusal("mixed_types", f"{folder} mixes file types ({mixed}); a dataset folder holds files of one "
                      "type. Register the files as separate datasets instead.", path=folder, kinds=mixed)
    return files


def split_names(dataset: str | list[str]) -> list[str]:
    """'a, b,c' or ['a', 'b'] -> ['a', 'b', 'c']; DataError when nothing is named."""
    raw = dataset.split(",") if isinstance(dataset, str) else [str(name) for name in dataset]
    names = [name.strip() for name in raw if name and name.strip()]
    if not names:
        raise _dataset_refusal("none_named", "No dataset named. Set `dataset` to one or more names from "
                               "dataset_info.json (comma-separated, e.g. identity,alpaca_demo).")
    return names


def data_options(config) -> dict:
    """How a training config's named datasets are read and mixed (as LLaMA-Factory: per-dataset max_samples,
    then the mix): the keyword arguments of load_examples and load_texts, for training and `data preview` alike."""
    return {"max_samples": config.max_samples, "mix_strategy": config.mix_strategy,
            "interleave_probs": config.interleave_probs, "seed": config.seed, "cache_dir": config.cache_dir}


def load_examples(dataset: str | list[str], dataset_dir: Path, *, max_samples: int | None = None,
                  ranking: bool | None = None, mix_strategy: str = "concat", interleave_probs=None,
                  seed: int = 42, cache_dir: str | None = None) -> list[dict]:
    """Normalized examples of every named dataset, mixed as ``mix_strategy`` says (concat: in the order given).

    max_samples keeps the first N rows of EACH dataset (LLaMA-Factory's semantics). ranking=True demands
    preference datasets (DPO), ranking=False demands SFT datasets, None accepts either but not a mix.
    """
    if max_samples is not None and max_samples < 1:
        raise _dataset_refusal("max_samples", f"max_samples must be at least 1, not {max_samples}.",
                               value=max_samples)
    specs = [get_dataset_spec(name, Path(dataset_dir)) for name in split_names(dataset)]
    _check_ranking(specs, ranking)
    parts = [_load_one(spec, Path(dataset_dir), max_samples, cache_dir=cache_dir, seed=seed) for spec in specs]
    return mix(parts, mix_strategy, interleave_probs, seed)


def load_texts(dataset: str | list[str], dataset_dir: Path, *, max_samples: int | None = None,
               mix_strategy: str = "concat", interleave_probs=None, seed: int = 42,
               cache_dir: str | None = None) -> list[str]:
    """Pre-training text of every named dataset (each row's ``prompt`` column, ``text`` by default; .txt files give
    one row per non-empty line), mixed as ``mix_strategy`` says."""
    parts = []
    for name in split_names(dataset):
        spec = get_dataset_spec(name, Path(dataset_dir))
        if spec.ranking:
            raise _dataset_refusal("pt_preference", f"Dataset {spec.name!r} is a preference dataset; pre-training "
                                   "reads plain text.", name=repr(spec.name))
        parts.append(_load_one(spec, Path(dataset_dir), max_samples, convert=convert_text, cache_dir=cache_dir,
                               seed=seed))
    return mix(parts, mix_strategy, interleave_probs, seed)


def _check_ranking(specs: list[DatasetSpec], ranking: bool | None) -> None:
    kinds = {spec.ranking for spec in specs}
    if ranking is None and len(kinds) > 1:
        names = ", ".join(f"{s.name} ({'preference' if s.ranking else 'sft'})" for s in specs)
        raise _dataset_refusal("mixed_kinds", f"Cannot mix preference and SFT datasets in one run: {names}.",
                               names=names)
    for spec in specs:
        if ranking is True and not spec.ranking:
            raise _dataset_refusal("not_preference", f"Dataset {spec.name!r} is not a preference dataset (no "
                                   "\"ranking\": true). DPO needs chosen/rejected answers, e.g. dpo_demo.",
                                   name=repr(spec.name))
        if ranking is False and spec.ranking:
            raise _dataset_refusal("is_preference", f"Dataset {spec.name!r} is a preference dataset (\"ranking\": "
                                   "true); SFT needs one answer per prompt. Use it with stage: dpo, or pick an SFT "
                                   "dataset.", name=repr(spec.name))


def _load_one(spec: DatasetSpec, dataset_dir: Path, max_samples: int | None, convert=convert_record, seed: int = 42,
              cache_dir: str | None = None) -> list:
    require_supported(spec)
    if spec.is_local:
        path, records = dataset_file_path(spec, dataset_dir), read_dataset_records(spec, dataset_dir)
    else:
        from engine.data.hub import read_hub_records

        path, records = read_hub_records(spec, dataset_dir, cache_dir)
    if not records:
        raise _dataset_refusal("no_rows", f"Dataset {spec.name!r} ({path}) has no rows.", name=repr(spec.name),
                               path=path)
    indices = _sample_indices(len(records), spec.num_samples, seed)
    if max_samples is not None:
        indices = indices[:max_samples]
    examples, errors = [], []
    for index in indices:
        try:
            examples.append(convert(records[index], spec, index))
        except DataError as exc:
            errors.append((index, exc))
    if errors:
        raise _row_errors_refusal(spec, path, errors)
    return examples


_SPLIT = re.compile(r"train(?:\[(-?\d{1,12}%?)?:(-?\d{1,12}%?)?\])?")


def read_dataset_records(spec: DatasetSpec, dataset_dir: Path) -> list:
    """The rows of a registered local dataset as training reads them: its file or folder, then its split."""
    return local_split(read_records(dataset_file_path(spec, Path(dataset_dir))), spec.split, spec.name)


def local_split(records: list, split: str | None, name: str) -> list:
    """The rows a local file's ``split`` selects. LLaMA-Factory hands a local file to ``datasets.load_dataset``
    with the entry's split, where the file is the one split ``train``; a slice (``train[:100]``,
    ``train[10%:]``) takes part of it, with percentages rounded as datasets rounds them ("closest")."""
    if split is None or split.strip() == "train":
        return records
    found = _SPLIT.fullmatch("".join(split.split())) if len(split) <= 200 else None  # spaces never matter
    if not found:
        raise DataError(f"Dataset {name!r}: split {short_repr(split, 60)} does not exist in a local file, which holds one split, "
                        "train. Write train, or a slice of it such as train[:1000] or train[:10%].")
    start, stop = (_split_bound(bound, len(records)) for bound in found.groups())
    return records[start:stop]


def _split_bound(bound: str | None, total: int) -> int | None:
    if bound is None:
        return None
    if bound.endswith("%"):
        return int(round(int(bound[:-1]) * total / 100.0))
    return int(bound)


def _sample_indices(total: int, num_samples: int | None, seed: int) -> list[int]:
    """num_samples rows drawn at random, as LLaMA-Factory does, from the run's seed (so runs reproduce, and a new
    seed draws other rows, as it does there)."""
    if num_samples is None:
        return list(range(total))
    rng = random.Random(seed)
    indices = rng.sample(range(total), min(num_samples, total))
    while len(indices) < num_samples:  # more than the file holds: repeat rows, as LF does
        indices += rng.sample(range(total), min(num_samples - len(indices), total))
    return indices


def _row_errors_refusal(spec: DatasetSpec, path: Path, errors: list[tuple[int, DataError]]) -> DataError:
    lines = [Message("data.load.row_error", str(exc), {"name": repr(spec.name), "row": index + 1,
                                                      "problem": getattr(exc, "detail_message", None) or str(exc)})
             for index, exc in errors[:_ERRORS_SHOWN]]
    return _problems("bad_rows", f"Dataset {spec.name!r} has {len(errors)} bad row(s):", lines, len(errors),
                     f"Run `lf-assistant data check {path}` for the full list, and `--fix OUT` to write a repaired "
                     "copy.", name=repr(spec.name), path=path)
