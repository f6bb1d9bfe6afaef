"""``tokenized_path``: the encoded samples saved once and read back instead of the datasets, as in LLaMA-Factory.

The folder is what LLaMA-Factory writes there: a ``datasets`` DatasetDict (``save_to_disk``) with a ``train`` and,
when there is eval data, a ``validation`` split, one column per sample field (input_ids, labels, ...). Beside it,
``lfa_tokenized.json`` records the stage, template, cutoff_len and datasets the samples were made with, so a run of
another stage is refused instead of failing on missing fields. A folder LLaMA-Factory wrote (no record) is read
too: its attention_mask columns are dropped, the rest is what the stage's batches need.

The first run with a new tokenized_path encodes, saves and stops (LLaMA-Factory's preprocessing run, e.g. its
qwen3_preprocess.yaml); the runs after it read the folder and ignore the data keys. Writes go to a temporary
sibling folder renamed into place, so an interrupted save never leaves a folder that reads as done.
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from engine.errors import DataError, EngineError

RECORD = "lfa_tokenized.json"
LF_MARKERS = ("dataset_dict.json", "state.json")
# Columns LLaMA-Factory saves that our batches rebuild themselves (masks) or never use (media).
DROPPED_COLUMNS = ("attention_mask", "chosen_attention_mask", "rejected_attention_mask", "kl_attention_mask",
                   "images", "videos", "audios", "token_type_ids")


class TokenizedDataSaved(EngineError):
    """The preprocessing run is done: the tokenized data is saved and training is left to the next run."""


def _folder(path: str | Path) -> Path:
    return Path(os.path.expanduser(str(path)))


def has_tokenized(path: str | Path) -> bool:
    """A folder holding saved tokenized data (ours or LLaMA-Factory's)."""
    folder = _folder(path)
    return folder.is_dir() and ((folder / RECORD).is_file() or any((folder / m).is_file() for m in LF_MARKERS))


def tokenized_path_problem(path: str | None) -> str | None:
    """A sentence when tokenized_path is neither saved tokenized data, nor a new or empty folder to write."""
    if not path:
        return None
    folder = _folder(path)
    if folder.exists() and not folder.is_dir():
        return f"tokenized_path {path} is a file; give a folder (new, empty, or holding saved tokenized data)."
    if folder.is_dir() and any(folder.iterdir()) and not has_tokenized(folder):
        return (f"tokenized_path {path} holds other files and no saved tokenized data; give a new or empty folder "
                "(nothing there is overwritten).")
    return None


_RECORD_FIX = "Remove the folder (or give another tokenized_path) to tokenize again."
_RECORD_FIELDS = {"stage": str, "template": str, "cutoff_len": int, "dataset": str, "eval_dataset": str,
                  "model": str, "train": int, "eval": int}
# The columns each stage's batches read (engine.data.encode / feedback); LLaMA-Factory's names where they differ.
STAGE_COLUMNS = {"sft": ("input_ids", "labels"), "pt": ("input_ids", "labels"),
                 "dpo": ("chosen_input_ids", "chosen_labels", "rejected_input_ids", "rejected_labels"),
                 "kto": ("input_ids", "labels", "kl_input_ids", "kl_labels", "kto_tag")}
STAGE_COLUMNS["rm"] = STAGE_COLUMNS["dpo"]
LF_COLUMN_NAMES = {"kto_tags": "kto_tag"}


def describe(path: str | Path) -> dict:
    """The record of saved tokenized data ({} for a folder LLaMA-Factory wrote); DataError naming the file when
    it is damaged (not JSON, not an object, a field of another type)."""
    from engine.jsonio import read_record

    return read_record(_folder(path) / RECORD, _RECORD_FIELDS, fix=_RECORD_FIX, error=DataError) or {}


def saved_problem(path: str | Path, stage: str) -> str | None:
    """Why the data saved in tokenized_path cannot train `stage`, as far as its record tells: the record is
    damaged, or the data was tokenized for another stage."""
    try:
        made_for = describe(path).get("stage")
    except DataError as exc:
        return str(exc)
    if made_for and made_for != stage:
        return (f"tokenized_path {path} holds data tokenized for stage {made_for}; this run is stage {stage}. "
                "Give another tokenized_path (a new folder is filled on the first run).")
    return None


@contextmanager
def quiet_datasets():
    """No datasets progress bars in the run log (they would print one line per update there)."""
    from datasets.utils import logging as datasets_logging

    was_enabled = datasets_logging.is_progress_bar_enabled()
    datasets_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            datasets_logging.enable_progress_bar()


def save_tokenized(path: str | Path, train: list[dict], evaluation: list[dict], record: dict) -> Path:
    """Write the samples as a DatasetDict plus our record, atomically (a temporary folder renamed into place)."""
    from datasets import Dataset, DatasetDict

    folder = _folder(path).resolve()
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.with_name(f".{folder.name}.saving")
    shutil.rmtree(staging, ignore_errors=True)
    splits = {"train": Dataset.from_list(train)}
    if evaluation:
        splits["validation"] = Dataset.from_list(evaluation)
    with quiet_datasets():
        DatasetDict(splits).save_to_disk(str(staging))
    (staging / RECORD).write_text(json.dumps({**record, "train": len(train), "eval": len(evaluation)}, indent=1),
                                  encoding="utf-8")
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()  # an empty folder the user made: replaced by the saved one
    staging.replace(folder)
    return folder


def load_tokenized(path: str | Path, stage: str, vocab_size: int | None = None) -> tuple[list[dict], list[dict]]:
    """(train, eval) samples from saved tokenized data; DataError when its record is damaged or names another
    stage, or when the samples are not what `stage` trains on (columns missing, not lists of token ids, labels
    of another length than the ids, ids past `vocab_size`: tokenized for another model)."""
    from datasets import load_from_disk

    problem = saved_problem(path, stage)
    if problem:
        raise DataError(problem)
    folder = _folder(path)
    try:
        saved = load_from_disk(str(folder))
    except Exception as exc:  # datasets raises what its readers raise: JSON, arrow, type and key errors
        first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise DataError(f"tokenized_path {path} cannot be read as saved tokenized data: {first}. Remove the folder "
                        "(or give another one) to tokenize again.") from None
    splits = saved if hasattr(saved, "keys") else {"train": saved}
    if "train" not in splits:
        raise DataError(f"tokenized_path {path} has no train split (it has: {', '.join(splits.keys())}).")
    evaluation = splits["validation"] if "validation" in splits else None
    loaded = []
    for name, dataset in (("train", splits["train"]), ("validation", evaluation)):
        if dataset is None:
            loaded.append([])
            continue
        dataset = _lf_names(dataset, stage)
        sample_problem = _column_problem(dataset, stage, vocab_size)
        if sample_problem:
            raise DataError(f"tokenized_path {path}: in the {name} split, {sample_problem}, so it is not data tokenized "
                            f"for this stage ({stage}) and model. Remove the folder (or give another one) to "
                            "tokenize again.")
        loaded.append(_rows(dataset))
    return loaded[0], loaded[1]


def _lf_names(dataset, stage: str):
    """LLaMA-Factory's columns under the names the batches read: kto_tags is kto_tag, and its pre-training data has
    no labels (its collator copies the ids)."""
    renames = {old: new for old, new in LF_COLUMN_NAMES.items()
               if old in dataset.column_names and new not in dataset.column_names}
    if renames:
        dataset = dataset.rename_columns(renames)
    if stage == "pt" and "labels" not in dataset.column_names and "input_ids" in dataset.column_names:
        dataset = dataset.add_column("labels", dataset["input_ids"])
    return dataset


def _column_problem(dataset, stage: str, vocab_size: int | None) -> str | None:
    """What in the saved columns `stage` cannot train on (checked on the arrow columns, without a Python loop)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from engine.data.encode import IGNORE_INDEX

    needed = STAGE_COLUMNS.get(stage, ())
    absent = [name for name in needed if name not in dataset.column_names]
    if absent:
        return f"there is no column {', '.join(absent)} (it has: {', '.join(dataset.column_names[:8]) or 'none'})"
    table = dataset.data.table
    lengths = {}
    for name in needed:
        column = table.column(name)
        if name == "kto_tag":
            if not (pa.types.is_boolean(column.type) or pa.types.is_integer(column.type)) or column.null_count:
                return f"column kto_tag holds {column.type}, not true/false per sample"
            continue
        kind = column.type
        if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_integer(kind.value_type):
            return f"column {name} holds {kind}, not lists of token ids"
        if column.null_count:
            return f"column {name} is empty in {column.null_count} sample(s)"
        values = pc.list_flatten(column)
        if len(values):
            low, high = pc.min_max(values).values()
            low, high = low.as_py(), high.as_py()
            floor = IGNORE_INDEX if name.endswith("labels") else 0
            if low < floor:
                return f"column {name} holds the id {low}, which no token has"
            if vocab_size and high >= vocab_size:
                return (f"column {name} holds the token id {high}, past the model's vocabulary ({vocab_size} "
                        "tokens)")
        lengths[name] = pc.list_value_length(column)
    for ids in (name for name in needed if name.endswith("input_ids")):
        labels = ids.replace("input_ids", "labels")
        if labels in lengths and not pc.all(pc.equal(lengths[ids], lengths[labels])).as_py():
            return f"column {labels} has another length than {ids} in some samples"
    return None


def _rows(dataset) -> list[dict]:
    keep = [name for name in dataset.column_names if name not in DROPPED_COLUMNS]
    return dataset.select_columns(keep).to_list()
