"""What kind of rows a registered dataset holds, and which kind each training stage takes.

One classification for the config check (`engine.config.validate`) and for front ends that list only the datasets
a stage can train on:

- ``pairs``: preference pairs ("ranking": true, a chosen and a rejected answer): dpo and rm;
- ``kto``: answers labelled desirable or not (a kto_tag column): kto;
- ``text``: raw text, a .txt file or an entry that maps only a ``prompt`` column (LLaMA-Factory's c4_demo shape): pt;
- ``conversations``: prompts with answers (alpaca or sharegpt): sft. pt also reads them as LLaMA-Factory does
  (alpaca's prompt column, a sharegpt conversation's first message), but they are not what a pre-training run is
  meant for.
"""

from __future__ import annotations

from typing import Literal

from engine.readers import short_repr

DataKind = Literal["pairs", "kto", "text", "conversations"]

STAGE_KIND: dict[str, DataKind] = {"dpo": "pairs", "rm": "pairs", "kto": "kto", "pt": "text", "sft": "conversations"}
"""The kind of rows each stage is made for."""

KIND_WORDS: dict[DataKind, str] = {"pairs": "preference pairs (\"ranking\": true, chosen/rejected)",
                                   "kto": "answers labelled desirable or not (a kto_tag column)",
                                   "text": "raw text (a text/prompt column, or a .txt file)",
                                   "conversations": "conversations with answers"}

# Columns that make an alpaca entry more than raw text: an answer, a second prompt part, earlier turns.
_ANSWER_COLUMNS = ("response", "query", "history", "messages", "chosen", "rejected")


def dataset_kind(spec) -> DataKind:
    """The kind of rows a dataset_info.json entry (engine.data.registry.DatasetSpec) holds."""
    if spec.ranking:
        return "pairs"
    if spec.column("kto_tag"):
        return "kto"
    file_name = (spec.file_name or "").lower()
    maps_only_prompt = "prompt" in spec.columns and not any(key in spec.columns for key in _ANSWER_COLUMNS)
    if spec.formatting == "alpaca" and (file_name.endswith(".txt") or maps_only_prompt):
        return "text"
    return "conversations"


def stage_kind(stage: str) -> DataKind:
    return STAGE_KIND.get(stage, "conversations")


def stage_data_problem(stage: str, name: str, spec) -> str | None:
    """Whether dataset ``name`` holds what ``stage`` trains on, as a sentence when it does not."""
    has, wants = dataset_kind(spec), stage_kind(stage)
    if has == wants or (wants == "text" and has == "conversations"):
        return None
    return f"dataset {short_repr(name, 60)} holds {KIND_WORDS[has]}, but stage {stage} needs {KIND_WORDS[wants]}."
