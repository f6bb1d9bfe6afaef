"""What reading a dataset file gives: the rows, the line each starts on, and the problems found on the way.

Shared by the readers of every file kind (engine.data.files for JSON and text, engine.data.tables for CSV, parquet
and arrow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.data.text import escape_control, find_bad_text, replace_bad_text, shorten
from engine.errors import DataError
from engine.messages import Message

FileKind = Literal["json", "jsonl", "csv", "parquet", "arrow", "text"]
SUFFIX_KINDS: dict[str, FileKind] = {
    ".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow", ".txt": "text",
}


@dataclass
class RowIssue:
    """A problem found while reading: the row keeps going (screened), the loader refuses the file."""

    row: int | None
    """Rows count from 1; None: the whole file (a CSV header, a column of a table)."""
    line: int | None
    field: str | None
    message: str
    coded: Message | None = None
    """``message`` as engine.messages.Message."""

    @classmethod
    def said(cls, row: int | None, line: int | None, field: str | None, message: Message) -> RowIssue:
        return cls(row, line, field, message.text, message)


@dataclass
class RowsRead:
    """The rows of one file, with the line each starts on (None for binary formats) and the lines that failed."""

    path: Path
    kind: FileKind
    rows: list[Any] = field(default_factory=list)
    lines: list[int | None] = field(default_factory=list)
    bad_lines: list[tuple[int, Message]] = field(default_factory=list)
    """(line, what the parser found there) for each line that is not JSON."""
    """(line number, parser message) for JSON lines that could not be read; their rows are skipped."""
    issues: list[RowIssue] = field(default_factory=list)
    """Rows that were read but are not what they seem: duplicate keys, text that is not valid Unicode, CSV rows
    of the wrong width, table columns of bytes. Their rows stay (screened: safe to print), but they are errors."""

    def add(self, row: Any, line: int | None, duplicates: list[str] = ()) -> None:
        """Append one row; note its duplicate keys, and replace text no UTF-8 writer accepts (noted too)."""
        number = len(self.rows) + 1
        if duplicates:
            self.issues.append(RowIssue.said(number, line, escape_control(duplicates[0], keep_layout=False),
                                             duplicate_message(duplicates)))
        bad = find_bad_text(row)
        if bad is not None:
            field_path, text, position = bad
            self.issues.append(RowIssue.said(number, line, field_path or None, _surrogate_message(text, position)))
            row = replace_bad_text(row)
        self.rows.append(row)
        self.lines.append(line)


def duplicate_message(keys: list[str]) -> Message:
    """What a row (or a file of columns) with keys given twice is told."""
    names = ", ".join(shorten(key, 40) for key in keys[:3]) + (" ..." if len(keys) > 3 else "")
    return Message("data.read.duplicate_key", f"duplicate key {names}: JSON keeps only the last value and drops "
                   "the others silently. Keep one of them (rename or merge the values).", {"keys": names})


def _surrogate_message(text: str, position: int) -> Message:
    code, around = f"\\u{ord(text[position]):04x}", shorten(text[max(0, position - 20):position + 20], 50)
    return Message("data.read.lone_surrogate", f"text that is not valid Unicode: a lone surrogate {code} at "
                   f"character {position + 1} ({around}). A \\ud800-\\udfff escape must be half of a pair; fix or "
                   "remove it (shown as \ufffd here).", {"code": code, "at": position + 1, "around": around})


def refusal(code: str, text: str, *, scope: str = "data.file", **fields: Any) -> DataError:
    """A DataError whose sentence also travels as ``<scope>.<code>`` with its values (engine.messages): by default
    a whole file refused by one of the readers (engine/data/files.py, tables.py) or the loader; ``data.load`` for
    the loader's refusals about a run's datasets."""
    return DataError(text, message=Message(f"{scope}.{code}", text, {key: str(value) if isinstance(value, Path)
                                                                     else value for key, value in fields.items()}))
