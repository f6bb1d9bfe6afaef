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


def describe(path: str | Path) -> dict:
    """The record of saved tokenized data ({} for a folder LLaMA-Factory wrote)."""
    record = _folder(path) / RECORD
    try:
        return json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
    except (OSError, ValueError):
        return {}


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


def load_tokenized(path: str | Path, stage: str) -> tuple[list[dict], list[dict]]:
    """(train, eval) samples from saved tokenized data; DataError when it was made for another stage."""
    from datasets import load_from_disk

    folder = _folder(path)
    made_for = describe(folder).get("stage")
    if made_for and made_for != stage:
        raise DataError(f"tokenized_path {path} holds data tokenized for stage {made_for}; this run is stage {stage}. "
                        "Give another tokenized_path (a new folder is filled on the first run).")
    try:
        saved = load_from_disk(str(folder))
    except (OSError, ValueError, FileNotFoundError) as exc:
        raise DataError(f"tokenized_path {path} cannot be read as saved tokenized data: {exc}. Remove the folder "
                        "(or give another one) to tokenize again.") from None
    splits = saved if hasattr(saved, "keys") else {"train": saved}
    if "train" not in splits:
        raise DataError(f"tokenized_path {path} has no train split (it has: {', '.join(splits.keys())}).")
    evaluation = splits["validation"] if "validation" in splits else None
    return _rows(splits["train"]), _rows(evaluation) if evaluation is not None else []


def _rows(dataset) -> list[dict]:
    keep = [name for name in dataset.column_names if name not in DROPPED_COLUMNS]
    return dataset.select_columns(keep).to_list()
