"""The dataset validator: every problem of a data file, with row numbers, before any training starts.

`check_file` works on a bare file (no dataset_info.json needed): it detects the format (alpaca, sharegpt, openai),
runs every row through the same converter the loader uses, and adds what a converter cannot see: role tags that
match no known name, duplicate rows and leftover {{placeholders}}. `convert_file` writes a repaired copy to a NEW
file (the input is never touched) and reports what it changed.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.data.files import RowsRead, read_rows, refusal, refuse_output_path, write_rows_atomic
from engine.data.formats import ROLE_ALIASES, RowError, convert_record
from engine.data.registry import TAG_DEFAULTS, DatasetSpec
from engine.data.repair import ALPACA_FIELDS, fill_row, repair_rows
from engine.data.text import escape_control, find_control, shorten
from engine.data.special_tokens import find_control_strings
from engine.data.templates.registry import registry_control_tokens
from engine.errors import DataError
from engine.messages import Message

FileFormat = Literal["alpaca", "sharegpt", "openai", "text", "unknown"]
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
OPENAI_TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
               "observation_tag": "tool", "function_tag": "function_call", "system_tag": "system"}
# Field names that mark a row as alpaca, LF's own and the common aliases `convert_file` renames.
_ALPACA_KEYS = tuple(alias for key in ("instruction", "input", "output", "chosen") for alias in ALPACA_FIELDS[key])


@dataclass
class Problem:
    """One thing wrong with a file. Rows count from 1 (None: the whole file)."""

    row: int | None
    field: str | None
    message: str
    level: Literal["error", "warning"] = "error"
    line: int | None = None
    """The line of the file the row starts on, where the format has lines (json, jsonl, csv)."""
    coded: Message | None = None
    """``message`` as engine.messages.Message."""

    @classmethod
    def said(cls, row: int | None, field: str | None, message: Message, level: Literal["error", "warning"] = "error",
             line: int | None = None) -> Problem:
        return cls(row, field, message.text, level, line, message)


@dataclass
class CheckReport:
    """What `check_file` found."""

    path: Path
    format: FileFormat
    rows: int
    problems: list[Problem] = field(default_factory=list)
    ranking: bool = False
    """The rows are preference pairs (chosen/rejected)."""
    spec: DatasetSpec | None = None
    """How the file reads: the dataset_info.json entry that registers it."""
    notes: list[str] = field(default_factory=list)
    """What `convert_file` changed to produce this file."""
    note_messages: list[Message] = field(default_factory=list)
    """``notes`` as engine.messages.Message, one per note."""

    @property
    def ok(self) -> bool:
        """No errors (warnings allowed)."""
        return not self.errors

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.level == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.level == "warning"]

    def suggested_entry(self) -> dict[str, Any] | None:
        """The dataset_info.json entry for this file (the file must sit in dataset_dir under this name)."""
        if self.spec is None:
            return None
        return {"file_name": self.path.name, **{k: v for k, v in self.spec.to_dict().items() if k != "file_name"}}


def detect_format(rows: list[Any]) -> tuple[FileFormat, bool]:
    """The format most rows look like, and whether they are preference pairs."""
    votes: Counter[str] = Counter()
    ranking = 0
    for row in rows[:200]:
        if not isinstance(row, dict):
            continue
        kind = _row_format(row)
        votes[kind] += 1
        ranking += "chosen" in row and "rejected" in row
    if not votes or votes.most_common(1)[0][0] == "unknown":
        return "unknown", False
    return votes.most_common(1)[0][0], ranking * 2 > sum(votes.values())


def _row_format(row: dict) -> str:
    for key in ("conversations", "messages"):
        messages = row.get(key)
        if isinstance(messages, list) and messages and isinstance(messages[0], dict):
            return "openai" if "role" in messages[0] or "content" in messages[0] else "sharegpt"
    if any(key in row for key in _ALPACA_KEYS):
        return "alpaca"
    return "unknown"


MEDIA_COLUMNS = ("images", "videos", "audios")


def kto_column(rows: list[Any]) -> str | None:
    """The column holding KTO's desirable/undesirable label: kto_tag, or LLaMA-Factory's demo name label, when
    every row that has it holds true or false."""
    for key in ("kto_tag", "label"):
        values = [row[key] for row in rows[:200] if isinstance(row, dict) and key in row]
        if values and all(isinstance(value, bool) for value in values):
            return key
    return None


def spec_for(rows: list[Any], file_format: FileFormat, ranking: bool, name: str) -> DatasetSpec:
    """The dataset_info.json entry that reads these rows (optional columns only when the rows have them)."""
    keys = {key for row in rows if isinstance(row, dict) for key in row}
    kto = None if ranking else kto_column(rows)
    if file_format == "alpaca":
        columns = {key: key for key in ("system", "history") if key in keys}
        if ranking:
            columns.update(chosen="chosen", rejected="rejected")
        columns.update({"kto_tag": kto} if kto else {})
        return DatasetSpec(name=name, formatting="alpaca", ranking=ranking, columns=columns)
    columns = {"messages": "messages" if "messages" in keys and "conversations" not in keys else "conversations"}
    columns.update({key: key for key in ("system", "tools") if key in keys})
    if ranking:
        columns.update(chosen="chosen", rejected="rejected")
    columns.update({"kto_tag": kto} if kto else {})
    tags = dict(OPENAI_TAGS) if file_format == "openai" else {}
    # OpenAI tool calling (assistant tool_calls, one tool message per result) reads only as formatting: openai
    formatting = "openai" if file_format == "openai" and _uses_tool_calls(rows, columns["messages"]) else "sharegpt"
    return DatasetSpec(name=name, formatting=formatting, ranking=ranking, columns=columns, tags=tags)


def _uses_tool_calls(rows: list[Any], column: str) -> bool:
    for row in rows:
        messages = row.get(column) if isinstance(row, dict) else None
        for message in messages if isinstance(messages, list) else []:
            if isinstance(message, dict) and (message.get("tool_calls")
                                              or message.get("role") == OPENAI_TAGS["observation_tag"]):
                return True
    return False


def media_problems(rows: list[Any], spec: DatasetSpec | None) -> list[Problem]:
    """One error for rows that carry images, videos or audios: training refuses such a dataset (text only)."""
    used = [key for key in MEDIA_COLUMNS if (spec is not None and spec.columns.get(key))
            or any(isinstance(row, dict) and row.get(key) for row in rows)]
    if not used:
        return []
    count = sum(1 for row in rows if isinstance(row, dict) and any(row.get(key) for key in used))
    return [Problem.said(None, used[0], Message(
        "data.check.multimodal", f"{count} row(s) carry {', '.join(used)}: LLaMA-Factory's multimodal (image, video, "
        "audio) training, which lf-assistant does not support (it trains text-only models); training refuses this "
        "file. Use text-only rows.", {"rows": count, "columns": ", ".join(used)}))]


def check_file(path: Path, *, formatting: str | None = None, spec: DatasetSpec | None = None) -> CheckReport:
    """Every problem of one data file. Whole-file problems (missing, empty, binary, encoding) raise DataError.

    formatting forces "alpaca", "sharegpt" or "openai" (OpenAI messages; with tool calls they register as
    formatting: openai); spec checks the file as a registered dataset_info.json entry reads it (its columns and
    tags).
    """
    path = Path(path)
    read = _rows_of(path)
    problems = file_problems(read)
    file_format, ranking = detect_format(read.rows)
    if spec is not None:
        file_format = "alpaca" if spec.formatting == "alpaca" else _messages_flavour(read.rows, spec)
        ranking = spec.ranking
    elif formatting is not None:
        file_format = _forced_format(formatting, file_format, read.rows)
    rows = len(read.rows) + len(read.bad_lines)
    if file_format == "unknown":
        problems.append(Problem.said(None, None, _unknown_format(read.rows)))
        return CheckReport(path, file_format, rows, problems)
    media = media_problems(read.rows, spec)
    if media:  # every row would fail the same way; say it once
        return CheckReport(path, file_format, rows, problems + media)
    spec = spec or spec_for(read.rows, file_format, ranking, path.stem)
    problems += _row_problems(read.rows, read.lines, spec)
    problems += _tag_problems(read.rows, spec) + _alias_problems(read.rows, spec)
    problems += _duplicate_problems(read.rows, read.lines)
    problems += _placeholder_problems(read.rows, read.lines)
    if ranking:
        problems += _identical_pair_problems(read.rows, read.lines, spec)
    problems.sort(key=lambda p: (p.row is not None, p.row or 0))
    return CheckReport(path, file_format, rows, problems, ranking=ranking, spec=spec)


def _rows_of(path: Path) -> RowsRead:
    """The file's rows; a file that holds none (`[]`, no lines) raises DataError, as an empty file does: checking
    it would report no problem, or an unknown format, and training refuses it."""
    read = read_rows(path)
    if not read.rows and not read.bad_lines:
        raise refusal("no_rows", f"{path} holds no rows. Write some rows into it, or pick another file.", path=path)
    return read


def file_problems(read: RowsRead) -> list[Problem]:
    """What is wrong with a file as read, whatever its rows hold: lines that are not JSON, what the reader noticed,
    control characters."""
    problems = [Problem.said(None, None, Message("data.check.bad_json_line", f"line {line} is not valid JSON: "
                                                 f"{message}", {"line": line, "error": message}), line=line)
                for line, message in read.bad_lines]
    return problems + read_problems(read) + control_problems(read)


def read_problems(read: RowsRead) -> list[Problem]:
    """What the reader noticed (duplicate keys, invalid Unicode, CSV widths, bytes columns): errors, because the
    loader refuses a file that has any."""
    return [Problem(issue.row, issue.field, issue.message, line=issue.line, coded=issue.coded)
            for issue in read.issues]


def control_problems(read: RowsRead) -> list[Problem]:
    """One warning for rows whose text holds control characters (terminal escape sequences, bidi overrides):
    rarely meant as training data, and able to rewrite a terminal that prints them raw."""
    found = [(index, hit) for index, row in enumerate(read.rows) if (hit := find_control(row)) is not None]
    if not found:
        return []
    index, (field_path, text, position) = found[0]
    excerpt = escape_control(text[max(0, position - 15):position + 15], keep_layout=False)
    return [Problem.said(index + 1, field_path or None, Message(
        "data.check.control_characters", f"{len(found)} row(s) hold control characters, first here: ...{excerpt}... "
        "(shown escaped). Check that escape sequences belong in the training text.",
        {"rows": len(found), "excerpt": excerpt}), "warning", read.lines[index])]


def looks_like_text(path: Path, rows: list[Any]) -> bool:
    """Whether a file is pre-training text: a .txt file, or rows whose only field is a ``text`` string."""
    if Path(path).suffix.lower() == ".txt":
        return True
    sample = [row for row in rows[:200] if isinstance(row, dict)]
    return bool(sample) and sum(set(row) == {"text"} for row in sample) * 2 > len(sample)


def check_text_file(path: Path) -> CheckReport:
    """Every problem of a pre-training text file (stage pt): rows without a non-empty ``text`` string, and text
    that spells control tokens; registered as LLaMA-Factory registers its c4_demo (the prompt column is text)."""
    path = Path(path)
    read = _rows_of(path)
    problems = file_problems(read)
    for index, row in enumerate(read.rows):
        text = row.get("text") if isinstance(row, dict) else None
        if not isinstance(text, str) or not text.strip():
            problems.append(Problem.said(index + 1, "text", Message(
                "data.check.no_text", "no text: a pre-training row needs a non-empty 'text' string."),
                line=read.lines[index]))
        else:
            problems += _control_token_problems([text], index + 1, read.lines[index], "text")
    spec = DatasetSpec(name=path.stem, formatting="alpaca", columns={"prompt": "text"}, columns_given=True)
    problems.sort(key=lambda p: (p.row is not None, p.row or 0))
    return CheckReport(path, "text", len(read.rows) + len(read.bad_lines), problems, spec=spec)


def _forced_format(formatting: str, detected: FileFormat, rows: list[Any]) -> FileFormat:
    if formatting == "alpaca":
        return "alpaca"
    if formatting in ("sharegpt", "openai"):
        return detected if detected in ("sharegpt", "openai") else formatting
    raise DataError(f"Unknown format {formatting!r}: use alpaca, sharegpt or openai.")


def _messages_flavour(rows: list[Any], spec: DatasetSpec) -> FileFormat:
    return "openai" if spec.tag("role_tag") == "role" else "sharegpt"


def _unknown_format(rows: list[Any]) -> Message:
    keys = Counter(key for row in rows[:200] if isinstance(row, dict) for key in row)
    names = ", ".join(shorten(key, 30) for key, _ in keys.most_common(8))
    found = Message("data.check.fields", names, {"names": names}) if names else \
        Message("data.check.no_named_fields", "no named fields")
    return Message("data.check.unknown_format", f"Cannot tell the format: rows have {found.text}. Expected alpaca "
                   "(instruction, input, output), sharegpt (conversations: [{from, value}]) or openai (messages: "
                   "[{role, content}]).", {"found": found})


def _row_problems(rows: list[Any], lines: list[int | None], spec: DatasetSpec) -> list[Problem]:
    problems = []
    for index, row in enumerate(rows):
        try:
            example = convert_record(row, spec, index)
        except RowError as exc:
            problems.append(Problem.said(index + 1, exc.field, exc.detail_message, line=lines[index]))
            continue
        problems += _row_warnings(row, example, spec, index + 1, lines[index])
        problems += _control_token_problems(_example_texts(example), index + 1, lines[index])
    return problems


def _row_warnings(row: dict, example: dict, spec: DatasetSpec, number: int, line: int | None) -> list[Problem]:
    prompt = spec.column("prompt")
    if spec.formatting == "alpaca" and not row.get(prompt):
        query = spec.column("query")
        return [Problem.said(number, prompt, Message("data.check.no_prompt", f"no {prompt!r}: the {query!r} text "
                                                     "alone becomes the prompt. Put the request in the instruction.",
                                                     {"prompt": repr(prompt), "query": repr(query)}), "warning", line)]
    if any(m["role"] == "user" and not m["content"].strip() for m in example["messages"]):
        return [Problem.said(number, spec.column("messages") or prompt,
                             Message("data.check.empty_user_message", "a user message is empty."), "warning", line)]
    return []


def _example_texts(example: dict) -> list[Any]:
    return [m["content"] for m in example["messages"]] + [example.get(key) for key in
                                                          ("system", "tools", "chosen", "rejected")]


def _control_token_problems(texts: list[Any], number: int, line: int | None,
                            field: str | None = None) -> list[Problem]:
    """Text spelling control tokens ("<|im_end|>\n<|im_start|>system") would forge turns if encoded as tokens."""
    tokens = registry_control_tokens()
    found = list(dict.fromkeys(s for text in texts if isinstance(text, str) for s in find_control_strings(text, tokens)))
    if not found:
        return []
    tokens_said = ", ".join(found[:5])
    return [Problem.said(number, field, Message(
        "data.check.control_tokens", f"the text spells control token(s) {tokens_said}. Training and chat encode them "
        "as the plain text they spell, so the row cannot forge a turn; set allow_special_tokens_in_text: true to "
        "make them real control tokens (LLaMA-Factory's way).", {"tokens": tokens_said}), "warning", line)]


def _tag_problems(rows: list[Any], spec: DatasetSpec) -> list[Problem]:
    """One summary for role tags outside the expected set: which were found, which are expected, what they mean."""
    if spec.formatting == "alpaca":
        return []
    expected = [spec.tag(key) for key in TAG_DEFAULTS if key not in ("role_tag", "content_tag")]
    found: Counter[str] = Counter()
    for row in rows:
        messages = row.get(spec.column("messages")) if isinstance(row, dict) else None
        for message in messages if isinstance(messages, list) else []:
            if isinstance(message, dict) and message.get(spec.tag("role_tag")) is not None:
                found[str(message.get(spec.tag("role_tag")))] += 1
    unknown = [tag for tag in found if tag not in expected]
    if not unknown:
        return []
    meanings = [Message("data.check.looks_like", f"{shorten(tag, 30)} looks like {ROLE_ALIASES[tag.lower()]}",
                        {"tag": shorten(tag, 30), "role": ROLE_ALIASES[tag.lower()]}) for tag in unknown
                if tag.lower() in ROLE_ALIASES]
    hint = Message("data.check.meanings", f" ({'; '.join(m.text for m in meanings)})", {"meanings": meanings}) \
        if meanings else ""
    tags, seen = _few(unknown), _few([f"{_label(tag)} ({count})" for tag, count in found.most_common()], quote=False)
    text = (f"unknown role tags {tags.text}{hint and hint.text}. Tags found: {seen.text}; expected: "
            f"{', '.join(expected)}. Set \"tags\" in dataset_info.json, or write a fixed copy with --fix.")
    return [Problem.said(None, spec.tag("role_tag"), Message("data.check.unknown_tags", text, {
        "tags": tags, "hint": hint, "found": seen, "expected": ", ".join(expected)}))]


def _label(text: str, limit: int = 30) -> str:
    """Text from the data, unquoted, for a list in a message: cut to `limit`, control characters escaped."""
    return escape_control(text[:limit], keep_layout=False) + ("..." if len(text) > limit else "")


def _few(items: list[str], limit: int = 8, *, quote: bool = True) -> Message:
    """At most `limit` items for a message, each shortened (and quoted), with how many more there are."""
    shown = ", ".join(shorten(item, 30) if quote else item for item in items[:limit])
    if len(items) > limit:
        return Message("data.check.few_more", f"{shown} and {len(items) - limit} more",
                       {"items": shown, "more": len(items) - limit})
    return Message("data.check.few", shown, {"items": shown})


def _alias_problems(rows: list[Any], spec: DatasetSpec) -> list[Problem]:
    """Rows that name their fields 'prompt' / 'response' (or similar) where the entry expects other names."""
    if spec.formatting != "alpaca":
        return []
    keys = {key for row in rows[:200] if isinstance(row, dict) for key in row}
    renames = {}
    for column_key, canonical in (("prompt", "instruction"), ("query", "input"), ("response", "output")):
        expected = spec.column(column_key)
        alias = next((a for a in ALPACA_FIELDS[canonical] if a in keys and a != expected), None)
        if expected not in keys and alias:
            renames[column_key] = alias
    if not renames:
        return []
    used = [Message("data.check.alias_for", f"{alias!r} for {spec.column(key)!r}",
                    {"alias": repr(alias), "column": repr(spec.column(key))}) for key, alias in renames.items()]
    text = (f"the rows use {', '.join(u.text for u in used)}. Map them in dataset_info.json with \"columns\": "
            f"{json.dumps(renames)}, or write a renamed copy with --fix.")
    return [Problem.said(None, None, Message("data.check.aliases", text, {"used": used,
                                                                          "columns": json.dumps(renames)}))]


def _duplicate_problems(rows: list[Any], lines: list[int | None]) -> list[Problem]:
    first_seen: dict[str, int] = {}
    problems = []
    for index, row in enumerate(rows):
        key = json.dumps(row, sort_keys=True, ensure_ascii=False)
        if key in first_seen:
            problems.append(Problem.said(index + 1, None, Message("data.check.duplicate_row", f"duplicate of row "
                                                                  f"{first_seen[key]}.", {"row": first_seen[key]}),
                                         "warning", lines[index]))
        else:
            first_seen[key] = index + 1
    return problems


def _identical_pair_problems(rows: list[Any], lines: list[int | None], spec: DatasetSpec) -> list[Problem]:
    """A pair whose chosen and rejected answers are the same teaches preference training nothing."""
    chosen_key, rejected_key = spec.column("chosen"), spec.column("rejected")
    problems = []
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or chosen_key not in row or rejected_key not in row:
            continue
        chosen, rejected = row[chosen_key], row[rejected_key]
        if isinstance(chosen, dict) and isinstance(rejected, dict):
            chosen, rejected = chosen.get(spec.tag("content_tag")), rejected.get(spec.tag("content_tag"))
        # Whitespace alone does not make a different answer (" 10 " and "10" teach the same nothing).
        same_words = isinstance(chosen, str) and isinstance(rejected, str) and chosen.split() == rejected.split()
        if chosen and (chosen == rejected or same_words):
            problems.append(Problem.said(index + 1, chosen_key, Message(
                "data.check.identical_pair", "chosen and rejected answers are identical: the pair teaches nothing; "
                "fix the rejected answer or remove the row."), "error", lines[index]))
    return problems


def _placeholder_problems(rows: list[Any], lines: list[int | None]) -> list[Problem]:
    names: set[str] = set()
    with_placeholders = []
    for index, row in enumerate(rows):
        found = set(_placeholders_in(row))
        if found:
            with_placeholders.append(index + 1)
            names |= found
    if not names:
        return []
    listed = ", ".join("{{" + name + "}}" for name in sorted(names))
    first_row = with_placeholders[0]
    return [Problem.said(None, None, Message(
        "data.check.placeholders", f"placeholders {listed} appear in {len(with_placeholders)} row(s), first in row "
        f"{first_row}. Replace them with real values before training (e.g. --fill name=... with --fix).",
        {"names": listed, "rows": len(with_placeholders), "first": first_row}), "warning")]


def _placeholders_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return PLACEHOLDER.findall(value)
    if isinstance(value, dict):
        return [name for item in value.values() for name in _placeholders_in(item)]
    if isinstance(value, list):
        return [name for item in value for name in _placeholders_in(item)]
    return []


def find_placeholders(path: Path) -> list[str]:
    """The {{names}} used anywhere in a data file, sorted (e.g. ["author", "name"] for identity.json)."""
    read = read_rows(Path(path))
    return sorted({name for row in read.rows for name in _placeholders_in(row)})


def fill_placeholders(path: Path, values: dict[str, str], out_path: Path) -> Path:
    """Write a copy of `path` to `out_path` (.json/.jsonl) with every {{name}} replaced by values[name]."""
    path, out_path = Path(path), Path(out_path)
    refuse_output_path(path, out_path)
    read = read_rows(path)
    missing = sorted({name for row in read.rows for name in _placeholders_in(row)} - set(values))
    if missing:
        raise DataError(f"{path} uses {', '.join('{{' + m + '}}' for m in missing)} but no value was given for "
                        f"{', '.join(missing)}. Give a value for every placeholder.")
    write_rows_atomic(out_path, [fill_row(row, values, PLACEHOLDER) for row in read.rows])
    return out_path


def convert_file(path: Path, out_path: Path, *, formatting: str | None = None,
                 placeholders: dict[str, str] | None = None) -> CheckReport:
    """Write a repaired, compliant copy of `path` to the NEW file `out_path` (.json or .jsonl); never the input.

    alpaca stays alpaca (field names normalized); sharegpt and openai become sharegpt with the default tags
    (human/gpt/observation/function_call, system in its own field). Role names like "bot" or "user" are renamed,
    broken turn order is repaired, and rows that still fail are left out. Returns the check of the new file, with
    `notes` saying what changed.
    """
    path, out_path = Path(path), Path(out_path)
    refuse_output_path(path, out_path)
    read = read_rows(path)
    file_format, ranking = detect_format(read.rows)
    if formatting is not None:
        file_format = _forced_format(formatting, file_format, read.rows)
    if file_format == "unknown":
        raise DataError(f"{path}: {_unknown_format(read.rows).text}")
    notes = [Message("data.skipped_line", f"skipped line {line} (not valid JSON)", {"line": line})
             for line, _ in read.bad_lines]
    notes += [Message("data.read_issue_file" if issue.row is None else "data.read_issue_row",
                      f"{'file' if issue.row is None else f'row {issue.row}'}: {issue.message} (the copy keeps the "
                      "row as read)", {"row": issue.row, "issue": issue.coded or issue.message})
              for issue in read.issues]
    rows, repair_notes = repair_rows(read.rows, file_format, ranking)
    notes += repair_notes
    if placeholders:
        rows = [fill_row(row, placeholders, PLACEHOLDER) for row in rows]
        names = ", ".join("{{" + name + "}}" for name in sorted(placeholders))
        notes.append(Message("data.filled", f"filled {names}", {"names": names}))
    target = spec_for(rows, "alpaca" if file_format == "alpaca" else "sharegpt", ranking, out_path.stem)
    kept, dropped = [], []
    for index, row in enumerate(rows):
        try:
            convert_record(row, target, index)
            kept.append(row)
        except RowError as exc:
            dropped.append(f"row {index + 1}: {exc.detail}")
    if dropped:
        which = "; ".join(dropped[:5]) + (" ..." if len(dropped) > 5 else "")
        notes.append(Message("data.left_out", f"left out {len(dropped)} row(s) that could not be repaired: {which}",
                             {"rows": len(dropped), "which": which}))
    if not kept:
        raise DataError(f"No row of {path} could be repaired ({dropped[0] if dropped else 'no rows'}); nothing "
                        "was written.")
    write_rows_atomic(out_path, kept)
    report = check_file(out_path, formatting="alpaca" if file_format == "alpaca" else "sharegpt")
    notes.append(Message("data.wrote", f"wrote {len(kept)} of {len(read.rows)} rows to {out_path}",
                         {"kept": len(kept), "rows": len(read.rows), "path": str(out_path)}))
    report.notes, report.note_messages = [note.text for note in notes], notes
    return report
