"""Reading dataset files row by row (json, jsonl, csv, parquet, arrow) and writing JSON atomically.

The readers keep the line each row starts on, so the validator can point at "row 7 (line 41)" and a broken
JSON line is reported with its number instead of a parser traceback. Nothing here ever writes to an input file:
writers take a new path and replace it atomically (temp file in the same folder + os.replace).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from engine.data.rows import SUFFIX_KINDS, FileKind, RowIssue, RowsRead, duplicate_message  # noqa: F401 - this module's readers' types
from engine.data.rows import refusal
from engine.data.text import MAX_DEPTH, too_deep
from engine.jsonio import json_problem, write_text_atomic
from engine.messages import Message

_SNIFF_BYTES = 8192

class JsonTooDeep(Exception):
    """A JSON value nests deeper than MAX_DEPTH (or than the parser's own recursion limit)."""


class JsonReader:
    """json decoding that notices what json.loads hides: duplicate keys (it keeps the last one silently) and
    nesting deep enough to overflow the parser or any code that walks the value afterwards."""

    def __init__(self) -> None:
        self.duplicates: list[str] = []
        """The duplicate keys of the last value decoded."""
        self._decoder = json.JSONDecoder(object_pairs_hook=self._object)

    def _object(self, pairs: list[tuple[str, Any]]) -> dict:
        obj = dict(pairs)
        if len(obj) < len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen and key not in self.duplicates:
                    self.duplicates.append(key)
                seen.add(key)
        return obj

    def decode(self, text: str, pos: int = 0) -> tuple[Any, int]:
        """(value, end) of the JSON value at `pos`; ValueError when invalid, JsonTooDeep when too deep."""
        self.duplicates = []
        try:
            value, end = self._decoder.raw_decode(text, pos)
        except RecursionError:
            raise JsonTooDeep() from None
        if too_deep(value):
            raise JsonTooDeep()
        return value, end

    def decode_all(self, text: str) -> Any:
        """The one JSON value `text` holds (surrounding whitespace allowed)."""
        value, end = self.decode(text, _skip_space(text, 0))
        if text[end:].strip():
            raise json.JSONDecodeError("Extra data", text, _skip_space(text, end))
        return value


def file_kind(path: Path) -> FileKind:
    """The file type from the suffix; DataError listing the supported ones otherwise."""
    kind = SUFFIX_KINDS.get(path.suffix.lower())
    if kind is None:
        suffix, kinds = repr(path.suffix) if path.suffix else "(no suffix)", ", ".join(SUFFIX_KINDS)
        raise refusal("unsupported_type", f"{path}: unsupported file type {suffix}. Use one of {kinds}.",
                      path=path, suffix=suffix, kinds=kinds)
    return kind


def read_rows(path: Path) -> RowsRead:
    """Read one data file; whole-file problems (missing, empty, binary, bad encoding) raise DataError."""
    path = Path(path)
    _require_file(path)
    kind = file_kind(path)
    try:
        if kind in ("parquet", "arrow"):
            from engine.data.tables import read_table

            return read_table(path, kind)
        text = read_text(path)
    except OSError as exc:  # unreadable: permissions, a folder vanished, an I/O error
        raise refusal("unreadable", f"{path} cannot be read: {exc.strerror or exc}. Check the file and its "
                      "permissions.", path=path, error=str(exc.strerror or exc)) from None
    if kind == "text":
        return _read_text_lines(path, text)
    if kind == "csv":
        from engine.data.tables import read_csv

        return read_csv(path, text)
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
        raise refusal("missing", f"{path} does not exist. Check the path (relative paths start at {Path.cwd()}).",
                      path=path, cwd=Path.cwd())
    if path.is_dir():
        raise refusal("folder", f"{path} is a folder, not a file. Give one data file (json, jsonl, csv, parquet, "
                      "arrow).", path=path)
    if path.stat().st_size == 0:
        raise refusal("empty", f"{path} is empty (0 bytes). Write some rows into it, or pick another file.", path=path)


def read_text(path: Path) -> str:
    """A text data file as str: UTF-8 (a BOM is accepted); binary files and other encodings raise DataError."""
    raw = Path(path).read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise refusal("utf16", f"{path} is UTF-16 text. Save it as UTF-8 (for example: iconv -f UTF-16 -t UTF-8).",
                      path=path)
    if b"\x00" in raw[:_SNIFF_BYTES]:
        raise refusal("binary", f"{path} looks like a binary file, not {path.suffix} text. Check that you picked "
                      "the right file (parquet and arrow files need the .parquet / .arrow suffix).",
                      path=path, suffix=path.suffix)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        byte = f"0x{raw[exc.start]:02x}"
        raise refusal("not_utf8", f"{path} is not UTF-8 text (byte {byte} on line {line}). Re-save it as UTF-8, "
                      "e.g. iconv -f GBK -t UTF-8 in.json > out.json.", path=path, byte=byte, line=line) from None
    if not text.strip():
        raise refusal("blank", f"{path} holds only whitespace. Write some rows into it, or pick another file.",
                      path=path)
    return text


def _read_json_text(path: Path, text: str, kind: FileKind) -> RowsRead:
    stripped = text.lstrip()
    if stripped.startswith("[") and (kind == "json" or _is_single_document(text)):
        return _read_json_array(path, text)
    if kind == "json" and stripped.startswith("{") and _is_single_document(text):
        return _read_json_object(path, text)
    return _read_json_lines(path, text, kind)


def _is_single_document(text: str) -> bool:
    try:
        JsonReader().decode_all(text)
    except (ValueError, JsonTooDeep):
        return False
    return True


def _read_json_object(path: Path, text: str) -> RowsRead:
    """A top-level object: columns of equal-length lists (as `datasets` reads it), else one row."""
    reader = JsonReader()
    data = reader.decode_all(text)
    columns = list(data.values())
    if columns and all(isinstance(column, list) for column in columns):
        lengths = {len(column) for column in columns}
        if len(lengths) == 1:
            rows = [dict(zip(data, values)) for values in zip(*columns)]
            result = RowsRead(path, "json", [], [])
            for number, row in enumerate(rows, start=1):
                result.add(row, None, [])
            if reader.duplicates:
                result.issues.append(RowIssue.said(None, None, reader.duplicates[0],
                                                   duplicate_message(reader.duplicates)))
            return result
    raise refusal("single_object", f"{path} holds a single JSON object; a dataset is a list of rows: [{{...}}, "
                  "{...}]. Wrap the rows in [ ] (or write one object per line in a .jsonl file).", path=path)


def _read_json_array(path: Path, text: str) -> RowsRead:
    """Decode `[row, row, ...]` element by element so that each row keeps its line number."""
    reader = JsonReader()
    result = RowsRead(path, "json")
    pos = _skip_space(text, text.index("[") + 1)
    line, counted_to = 1, 0
    try:
        if text[pos:pos + 1] == "]":
            pos += 1
        else:
            while True:
                line += text.count("\n", counted_to, pos)  # counted incrementally: str.count runs in C
                counted_to = pos
                row, end = reader.decode(text, pos)
                result.add(row, line, reader.duplicates)
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
    except JsonTooDeep:
        row = len(result.rows) + 1
        raise refusal("row_too_deep", f"{path}: row {row} (line {line}) nests lists or objects more than "
                      f"{MAX_DEPTH} levels deep, which no dataset row needs. Fix or remove that row.",
                      path=path, row=row, line=line, depth=MAX_DEPTH) from None
    except ValueError as exc:
        problem = json_problem(exc)
        raise refusal("not_json", f"{path} is not valid JSON: {problem.text} (after {len(result.rows)} good rows). "
                      "Fix the file there.", path=path, problem=problem, good_rows=len(result.rows)) from None
    return result


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _read_json_lines(path: Path, text: str, kind: FileKind) -> RowsRead:
    result = RowsRead(path, kind)
    reader = JsonReader()
    # split("\n"), not splitlines(): JSON strings may legally hold U+2028 and other characters splitlines() breaks on.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = reader.decode_all(line)
        except JsonTooDeep:
            deep = f"nested more than {MAX_DEPTH} levels deep"
            result.bad_lines.append((number, Message("json.too_deep", deep, {"depth": MAX_DEPTH})))
            continue
        except ValueError as exc:
            result.bad_lines.append((number, json_problem(exc, line=False)))
            continue
        result.add(row, number, reader.duplicates)
    if kind == "json" and not result.rows:
        first_line, message = result.bad_lines[0]
        raise refusal("json_lines_not_json", f"{path} is not valid JSON ({message} on line {first_line}). A .json "
                      "file holds a list of rows [{...}, {...}]; a .jsonl file holds one JSON object per line.",
                      path=path, problem=message, line=first_line)
    return result


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
        raise refusal("out_suffix", f"Cannot write {path}: output files are .json or .jsonl. Choose a name with one "
                      "of those.", path=path)


def refuse_output_path(source: Path, out_path: Path) -> None:
    """A converted copy must be a new file: never the input, never an existing file."""
    if Path(os.path.abspath(out_path)) == Path(os.path.abspath(source)) or (
            out_path.exists() and source.exists() and os.path.samefile(out_path, source)):
        raise refusal("over_input", f"Refusing to write over the input {source}. Give a new file name for the copy.",
                      path=source)
    if out_path.exists():
        raise refusal("out_exists", f"{out_path} already exists. Give a new file name (the copy never replaces a "
                      "file).", path=out_path)
    blocking = next((parent for parent in Path(out_path).parents if parent.exists() and not parent.is_dir()), None)
    if blocking is not None:
        raise refusal("parent_is_file", f"Cannot write {out_path}: {blocking} is a file, not a folder. Give a path "
                      "in a folder.", path=out_path, blocking=blocking)
    folder = Path(os.path.abspath(out_path)).parent
    if not folder.is_dir():  # a mistyped folder is not made: the copy would land where nobody looks for it
        raise refusal("no_folder", f"Cannot write {out_path}: the folder {folder} does not exist. Create it first, "
                      "or give a path in an existing folder.", path=out_path, folder=folder)
