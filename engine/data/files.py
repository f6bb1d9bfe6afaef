"""Reading dataset files row by row (json, jsonl, csv, parquet, arrow) and writing JSON atomically.

The readers keep the line each row starts on, so the validator can point at "row 7 (line 41)" and a broken
JSON line is reported with its number instead of a parser traceback. Nothing here ever writes to an input file:
writers take a new path and replace it atomically (temp file in the same folder + os.replace).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.errors import DataError
from engine.jsonio import write_text_atomic

FileKind = Literal["json", "jsonl", "csv", "parquet", "arrow", "text"]
SUFFIX_KINDS: dict[str, FileKind] = {
    ".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet", ".arrow": "arrow", ".txt": "text",
}
_SNIFF_BYTES = 8192


@dataclass
class RowsRead:
    """The rows of one file, with the line each starts on (None for binary formats) and the lines that failed."""

    path: Path
    kind: FileKind
    rows: list[Any] = field(default_factory=list)
    lines: list[int | None] = field(default_factory=list)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    """(line number, parser message) for JSON lines that could not be read; their rows are skipped."""


def file_kind(path: Path) -> FileKind:
    """The file type from the suffix; DataError listing the supported ones otherwise."""
    kind = SUFFIX_KINDS.get(path.suffix.lower())
    if kind is None:
        raise DataError(f"{path}: unsupported file type {path.suffix or '(no suffix)'!r}. "
                        f"Use one of {', '.join(SUFFIX_KINDS)}.")
    return kind


def read_rows(path: Path) -> RowsRead:
    """Read one data file; whole-file problems (missing, empty, binary, bad encoding) raise DataError."""
    path = Path(path)
    _require_file(path)
    kind = file_kind(path)
    if kind in ("parquet", "arrow"):
        rows = _read_table(path, kind)
        return RowsRead(path, kind, rows, [None] * len(rows))
    text = read_text(path)
    if kind == "text":
        return _read_text_lines(path, text)
    if kind == "csv":
        return _read_csv(path, text)
    return _read_json_text(path, text, kind)


def _read_text_lines(path: Path, text: str) -> RowsRead:
    """A .txt file is pre-training text: each non-empty line is one row ``{"text": line}`` (as LLaMA-Factory reads
    it through the datasets "text" builder, empty lines left out)."""
    read = RowsRead(path, "text")
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            read.rows.append({"text": line})
            read.lines.append(number)
    return read


def _require_file(path: Path) -> None:
    if not path.exists():
        raise DataError(f"{path} does not exist. Check the path (relative paths start at {Path.cwd()}).")
    if path.is_dir():
        raise DataError(f"{path} is a folder, not a file. Give one data file (json, jsonl, csv, parquet, arrow).")
    if path.stat().st_size == 0:
        raise DataError(f"{path} is empty (0 bytes). Write some rows into it, or pick another file.")


def read_text(path: Path) -> str:
    """A text data file as str: UTF-8 (a BOM is accepted); binary files and other encodings raise DataError."""
    raw = Path(path).read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DataError(f"{path} is UTF-16 text. Save it as UTF-8 (for example: iconv -f UTF-16 -t UTF-8).")
    if b"\x00" in raw[:_SNIFF_BYTES]:
        raise DataError(f"{path} looks like a binary file, not {path.suffix} text. Check that you picked the "
                        "right file (parquet and arrow files need the .parquet / .arrow suffix).")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"{path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}). Re-save it as "
                        "UTF-8, e.g. iconv -f GBK -t UTF-8 in.json > out.json.") from None
    if not text.strip():
        raise DataError(f"{path} holds only whitespace. Write some rows into it, or pick another file.")
    return text


def _read_json_text(path: Path, text: str, kind: FileKind) -> RowsRead:
    stripped = text.lstrip()
    if stripped.startswith("[") and (kind == "json" or _is_single_document(text)):
        return _read_json_array(path, text)
    if kind == "json" and stripped.startswith("{") and _is_single_document(text):
        return _read_json_object(path, json.loads(text))
    return _read_json_lines(path, text, kind)


def _is_single_document(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def _read_json_object(path: Path, data: dict) -> RowsRead:
    """A top-level object: columns of equal-length lists (as `datasets` reads it), else one row."""
    columns = list(data.values())
    if columns and all(isinstance(column, list) for column in columns):
        lengths = {len(column) for column in columns}
        if len(lengths) == 1:
            rows = [dict(zip(data, values)) for values in zip(*columns)]
            return RowsRead(path, "json", rows, [None] * len(rows))
    raise DataError(f"{path} holds a single JSON object; a dataset is a list of rows: [{{...}}, {{...}}]. "
                    "Wrap the rows in [ ] (or write one object per line in a .jsonl file).")


def _read_json_array(path: Path, text: str) -> RowsRead:
    """Decode `[row, row, ...]` element by element so that each row keeps its line number."""
    decoder = json.JSONDecoder()
    result = RowsRead(path, "json")
    pos = _skip_space(text, text.index("[") + 1)
    line, counted_to = 1, 0
    try:
        if text[pos:pos + 1] == "]":
            pos += 1
        else:
            while True:
                row, end = decoder.raw_decode(text, pos)
                line += text.count("\n", counted_to, pos)  # counted incrementally: str.count runs in C
                counted_to = pos
                result.rows.append(row)
                result.lines.append(line)
                pos = _skip_space(text, end)
                if text[pos:pos + 1] == ",":
                    pos = _skip_space(text, pos + 1)
                    continue
                if text[pos:pos + 1] == "]":
                    pos += 1
                    break
                raise json.JSONDecodeError("Expecting ',' or ']' after a row", text, pos)
        if text[pos:].strip():
            raise json.JSONDecodeError("Extra data after the closing ]", text, _skip_space(text, pos))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno} "
                        f"(after {len(result.rows)} good rows). Fix the file there.") from None
    return result


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _read_json_lines(path: Path, text: str, kind: FileKind) -> RowsRead:
    result = RowsRead(path, kind)
    # split("\n"), not splitlines(): JSON strings may legally hold U+2028 and other characters splitlines() breaks on.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            result.rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            result.bad_lines.append((number, f"{exc.msg} at column {exc.colno}"))
            continue
        result.lines.append(number)
    if kind == "json" and not result.rows:
        first_line, message = result.bad_lines[0]
        raise DataError(f"{path} is not valid JSON ({message} on line {first_line}). A .json file holds a list "
                        "of rows [{...}, {...}]; a .jsonl file holds one JSON object per line.")
    return result


def _read_csv(path: Path, text: str) -> RowsRead:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    result = RowsRead(path, "csv")
    try:
        for row in reader:
            result.rows.append({key: value for key, value in row.items() if key is not None})
            result.lines.append(reader.line_num)
    except csv.Error as exc:
        raise DataError(f"{path}: bad CSV on line {reader.line_num}: {exc}. Fix the quoting there.") from None
    if reader.fieldnames is None:
        raise DataError(f"{path} has no header row. The first CSV line must name the columns.")
    return result


def _read_table(path: Path, kind: FileKind) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if kind == "parquet":
            return pq.read_table(path).to_pylist()
        try:
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_file(source).read_all().to_pylist()
        except pa.ArrowInvalid:
            # `datasets.save_to_disk` writes the streaming flavour of the Arrow IPC format.
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_stream(source).read_all().to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path} is not a readable {kind} file ({str(exc).splitlines()[0]}). "
                        "Check that the file is complete and has the right suffix.") from None


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON (indent 2, UTF-8) to `path` through a temp file in the same folder + os.replace."""
    write_text_atomic(Path(path), json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def write_rows_atomic(path: Path, rows: list[Any]) -> None:
    """Write rows as a JSON list (.json) or JSON lines (.jsonl), chosen by the suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        write_json_atomic(path, rows)
    elif suffix == ".jsonl":
        write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    else:
        raise DataError(f"Cannot write {path}: output files are .json or .jsonl. Choose a name with one of those.")


def refuse_output_path(source: Path, out_path: Path) -> None:
    """A converted copy must be a new file: never the input, never an existing file."""
    if Path(os.path.abspath(out_path)) == Path(os.path.abspath(source)) or (
            out_path.exists() and source.exists() and os.path.samefile(out_path, source)):
        raise DataError(f"Refusing to write over the input {source}. Give a new file name for the copy.")
    if out_path.exists():
        raise DataError(f"{out_path} already exists. Give a new file name (the copy never replaces a file).")
