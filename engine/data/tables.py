"""Reading CSV, parquet and arrow files into rows, with their shape problems reported instead of smoothed over.

csv.DictReader quietly keeps the last of two columns with the same name, files extra cells under a None key and
fills missing ones with None; pyarrow hands back `bytes` for binary columns and datetime / Decimal objects for
temporal and decimal ones, which no JSON writer or text encoder takes. Here each of those becomes a RowIssue that
names the row, line and column, so `data check` lists it and the loader refuses the file with that message.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from engine.data.rows import FileKind, RowIssue, RowsRead, refusal
from engine.data.text import MAX_DEPTH, escape_control, shorten, too_deep
from engine.messages import Message


def read_csv(path: Path, text: str) -> RowsRead:
    """Rows as {header: cell}; duplicate or empty header names and rows of the wrong width become issues."""
    reader = csv.reader(io.StringIO(text, newline=""))
    result = RowsRead(path, "csv")
    try:
        header = next((row for row in reader if row), None)
        if header is None:
            raise refusal("no_header", f"{path} has no header row. The first CSV line must name the columns.",
                          path=path)
        result.issues += _header_issues(header, reader.line_num)
        for cells in reader:
            if not cells:
                continue  # a blank line, as csv.DictReader skips it
            row = dict(zip(header, cells))
            result.add(row, reader.line_num)
            if len(cells) != len(header):
                result.issues.append(_width_issue(len(result.rows), reader.line_num, header, cells))
    except csv.Error as exc:
        raise refusal("bad_csv", f"{path}: bad CSV on line {reader.line_num}: {exc}. Fix the quoting there.",
                      path=path, line=reader.line_num, error=str(exc)) from None
    return result


def _header_issues(header: list[str], line: int) -> list[RowIssue]:
    issues, seen = [], set()
    for number, name in enumerate(header, start=1):
        shown = escape_control(name, keep_layout=False)
        if not name.strip():
            issues.append(RowIssue.said(None, line, None, Message(
                "data.read.unnamed_column", f"column {number} of the header has no name; name it or remove the "
                "column.", {"number": number})))
        elif name in seen:
            issues.append(RowIssue.said(None, line, shown, Message(
                "data.read.column_twice", f"the header names column {shorten(name, 40)} twice (again as column "
                f"{number}); only one would be read. Rename one of them.",
                {"name": shorten(name, 40), "number": number})))
        seen.add(name)
    return issues


def _width_issue(number: int, line: int, header: list[str], cells: list[str]) -> RowIssue:
    if len(cells) > len(header):
        extra = ", ".join(shorten(cell, 30) for cell in cells[len(header):][:3])
        return RowIssue.said(number, line, None, Message(
            "data.read.extra_cells", f"{len(cells)} cells but the header names {len(header)} columns; the extra "
            f"cells ({extra}) belong to no column. Quote cells that contain commas, or remove the extra cells.",
            {"cells": len(cells), "columns": len(header), "extra": extra}))
    missing = ", ".join(shorten(name, 30) for name in header[len(cells):][:3])
    return RowIssue.said(number, line, escape_control(header[len(cells)], keep_layout=False), Message(
        "data.read.missing_cells", f"{len(cells)} cells but the header names {len(header)} columns (no cell for "
        f"{missing}). Add the missing cells (an empty one is two commas).",
        {"cells": len(cells), "columns": len(header), "missing": missing}))


def read_table(path: Path, kind: FileKind) -> RowsRead:
    """Rows of a parquet or arrow file. Columns no dataset can use (raw bytes) are left out and reported;
    temporal and decimal columns are read as their text."""
    import pyarrow as pa

    try:
        table = _open_table(path, kind)
        table, issues = _usable_columns(table)
        rows = table.to_pylist()
    except (pa.ArrowException, OSError, UnicodeDecodeError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise refusal("unreadable_table", f"{path} is not a readable {kind} file ({reason}). Check that the file is "
                      "complete and has the right suffix.", path=path, kind=kind, reason=reason) from None
    result = RowsRead(path, kind, issues=issues)
    for number, row in enumerate(rows, start=1):
        if too_deep(row):
            raise refusal("table_too_deep", f"{path}: row {number} nests lists or structs more than {MAX_DEPTH} "
                          "levels deep, which no dataset row needs. Fix or remove that row.", path=path, row=number,
                          depth=MAX_DEPTH)
        result.add(row, None)
    return result


def _open_table(path: Path, kind: FileKind):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == "parquet":
        with pq.ParquetFile(path) as source:  # not pq.read_table: its dataset layer rejects repeated column names
            return source.read()
    try:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).read_all()
    except pa.ArrowInvalid:
        # `datasets.save_to_disk` writes the streaming flavour of the Arrow IPC format.
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_stream(source).read_all()


def _usable_columns(table):
    """(table with every column JSON-like, issues for the columns left out)."""
    import pyarrow as pa

    issues = []
    names = table.column_names
    for name in sorted({name for name in names if names.count(name) > 1}):
        issues.append(RowIssue.said(None, None, escape_control(name, keep_layout=False), Message(
            "data.read.table_column_twice", f"the table has {names.count(name)} columns named {shorten(name, 40)}; "
            "only the last would be read. Rename them.", {"count": names.count(name), "name": shorten(name, 40)})))
    for index in reversed(range(table.num_columns)):
        column_type, name = table.schema.field(index).type, table.column_names[index]
        if _holds_bytes(column_type):
            shown = escape_control(name, keep_layout=False)
            issues.append(RowIssue.said(None, None, shown, Message(
                "data.read.bytes_column", f"column {shorten(name, 40)} holds raw bytes ({column_type}), not text, so "
                "it was left out. Store it as a string column (decode the bytes as UTF-8 when you write the file).",
                {"name": shorten(name, 40), "type": str(column_type)})))
            table = table.remove_column(index)
        elif not _json_like(column_type):
            try:
                table = table.set_column(index, name, table.column(index).cast(pa.string()))
            except pa.ArrowException:
                kind = shorten(str(column_type), 60)
                issues.append(RowIssue.said(None, None, escape_control(name, keep_layout=False), Message(
                    "data.read.untyped_column", f"column {shorten(name, 40)} has the type {kind}, which has no text "
                    "form, so it was left out. Store it as text.", {"name": shorten(name, 40), "type": kind})))
                table = table.remove_column(index)
    return table, list(reversed(issues))


def _children(data_type) -> list:
    return [data_type.field(i).type for i in range(data_type.num_fields)]


def _holds_bytes(data_type) -> bool:
    import pyarrow.types as t

    if t.is_binary(data_type) or t.is_large_binary(data_type) or t.is_fixed_size_binary(data_type) or \
            getattr(t, "is_binary_view", lambda _: False)(data_type):
        return True
    if t.is_dictionary(data_type):
        return _holds_bytes(data_type.value_type)
    return any(_holds_bytes(child) for child in _children(data_type))


def _json_like(data_type) -> bool:
    """Types whose Python values JSON can hold as they are (text, numbers, booleans, lists and structs of them)."""
    import pyarrow.types as t

    if t.is_string(data_type) or t.is_large_string(data_type) or t.is_integer(data_type) or \
            t.is_floating(data_type) or t.is_boolean(data_type) or t.is_null(data_type) or \
            getattr(t, "is_string_view", lambda _: False)(data_type):
        return True
    if t.is_dictionary(data_type):
        return _json_like(data_type.value_type)
    if t.is_list(data_type) or t.is_large_list(data_type) or t.is_fixed_size_list(data_type) or \
            t.is_struct(data_type):
        return all(_json_like(child) for child in _children(data_type))
    return False
