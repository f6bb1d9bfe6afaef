"""Hostile dataset files through `data check`, `data preview` and `train --check`: every one ends in a clear message
and the right exit code, never a traceback, never a raw escape sequence on stdout, and the file is never changed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from assistant.cli.main import app

runner = CliRunner()
WIDE = {"COLUMNS": "250"}
OSC52 = "\x1b]52;c;ZXZpbA==\x07"  # writes "evil" to the terminal's clipboard when printed raw


def _parquet(path: Path, columns: dict) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)
    return path.read_bytes()


def _alpaca(text: str = "hi") -> dict:
    return {"instruction": text, "input": "", "output": "ok"}


# name -> (file name, content (bytes or a builder of bytes), what `data check` must say, its exit code)
CORPUS = {
    "duplicate keys": ("dup.json", b'[{"instruction": "a", "instruction": "b", "output": "c"}]',
                       "duplicate key 'instruction'", 1),
    "duplicate keys, nested": ("dupn.jsonl", b'{"conversations": [{"from": "human", "from": "gpt", "value": "x"},'
                                             b' {"from": "gpt", "value": "y"}]}\n', "duplicate key 'from'", 1),
    "deep nesting": ("deep.json", b"[" + b"[" * 100_000 + b"]" * 100_000 + b"]", "levels deep", 2),
    "deep row in jsonl": ("deep.jsonl", (json.dumps(_alpaca()) + "\n").encode()
                          + b'{"instruction": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", "levels deep", 1),
    "moderately deep row": ("mid.json", json.dumps([{"instruction": "a", "output": "b",
                                                     "x": json.loads("[" * 200 + "]" * 200)}]).encode(),
                            "levels deep", 2),
    "lone surrogate": ("sur.jsonl", b'{"instruction": "a\\ud800b", "output": "c"}\n', "lone surrogate", 1),
    "lone surrogate in a key": ("surk.json", b'[{"instruction": "a", "output": "c", "x\\udc00": "d"}]',
                                "lone surrogate", 1),
    "huge number": ("num.jsonl", b'{"instruction": ' + b"9" * 5000 + b', "output": "c"}\n', "number", 1),
    "csv extra cells": ("extra.csv", b"instruction,output\na,b,c\n", "3 cells but the header names 2", 1),
    "csv duplicate header": ("duph.csv", b"instruction,output,output\na,b,c\n", "twice", 1),
    "csv missing cells": ("miss.csv", b"instruction,input,output\na\n", "1 cells but the header names 3", 1),
    "csv empty header name": ("noname.csv", b"instruction,,output\na,b,c\n", "has no name", 1),
    "parquet bytes column": ("bytes.parquet", lambda p: _parquet(p, {"instruction": [b"\x00\xff"], "output": ["x"]}),
                             "raw bytes", 1),
    "truncated parquet": ("trunc.parquet", lambda p: _parquet(p, {"instruction": ["a"] * 50, "output": ["b"] * 50})
                          [:300], "not a readable parquet", 2),
    "unhashable role tag": ("role.json", json.dumps([{"conversations": [{"from": ["human"], "value": "a"},
                                                                        {"from": "gpt", "value": "b"}]}]).encode(),
                            "message 1 has the role ['human']", 1),
    "escape sequences (a warning)": ("esc.jsonl", (json.dumps(_alpaca("x" + OSC52 + "\x1b[2J")) + "\n").encode(),
                                     "control characters", 0),
    "rich markup in text": ("markup.jsonl", (json.dumps(_alpaca("[bold]b[/bold] [/x]")) + "\n").encode(),
                            "ok", 0),
    "markup in a field name": ("mkey.json", json.dumps([{"[/x]": 1, "[bold]": 2}]).encode(),
                               "[/x]", 1),
}


def _write(folder: Path, name: str) -> Path:
    file_name, content, _said, _code = CORPUS[name]
    path = folder / file_name
    path.write_bytes(content(path) if callable(content) else content)
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(*args: object):
    result = runner.invoke(app, [str(a) for a in args], env=WIDE)
    output = result.output
    assert "Traceback" not in output and result.exception is None or isinstance(result.exception, SystemExit), \
        output
    assert "\x1b" not in output and "\x07" not in output, output
    assert "unexpected" not in output, output  # the catch-all for bugs must not be what answered
    return result


@pytest.mark.parametrize("name", list(CORPUS))
def test_data_check_reports_each_hostile_file_clearly(name, tmp_path):
    path = _write(tmp_path, name)
    before = _digest(path)
    result = _run("data", "check", path, "--all")
    _file, _content, said, code = CORPUS[name]
    assert result.exit_code == code, result.output
    assert said in result.output, result.output
    assert _digest(path) == before


@pytest.mark.parametrize("file_name,flags", [("rows.json", []), ("rows.json", ["--format", "alpaca"]),
                                             ("rows.json", ["--format", "text"]),
                                             ("rows.jsonl", ["--format", "sharegpt"])])
def test_a_file_that_holds_no_rows_is_refused_never_ok(file_name, flags, tmp_path):
    path = tmp_path / file_name
    path.write_text("[]\n")
    result = _run("data", "check", path, *flags)
    assert result.exit_code == 2, result.output
    assert "holds no rows" in result.output and "rows: ok" not in result.output, result.output


@pytest.fixture()
def hostile_registry(tmp_path, demo_model_dir):
    """Every corpus file registered in one dataset_dir, and a training config on the demo model."""
    folder = tmp_path / "data"
    folder.mkdir()
    info = {}
    for number, name in enumerate(CORPUS):
        path = _write(folder, name)
        info[f"d{number}"] = {"file_name": path.name, **({"formatting": "sharegpt"} if "role" in name or "nested"
                                                         in name else {})}
    (folder / "dataset_info.json").write_text(json.dumps(info))
    config = tmp_path / "train.yaml"
    config.write_text(f"model_name_or_path: {demo_model_dir}\ndataset_dir: {folder}\ntemplate: qwen\n"
                      f"finetuning_type: lora\ncutoff_len: 64\noutput_dir: {tmp_path / 'out'}\n")
    digests = {path.name: _digest(path) for path in folder.iterdir()}
    yield config, folder
    assert {path.name: _digest(path) for path in folder.iterdir()} == digests  # nothing changed


@pytest.mark.parametrize("command", ["preview", "train-check"])
def test_preview_and_train_check_refuse_bad_rows_and_show_text_as_text(command, hostile_registry):
    config, _folder = hostile_registry
    for number, (name, (_file, _content, said, code)) in enumerate(CORPUS.items()):
        args = ["data", "preview", config, f"dataset=d{number}"] if command == "preview" else \
            ["train", config, f"dataset=d{number}", "--check"]
        result = _run(*args)
        if code == 0:
            assert result.exit_code == 0, (name, result.output)
        else:
            assert result.exit_code == 2, (name, result.output)
            assert said in result.output, (name, result.output)
    escaped = _run("data", "preview", config, f"dataset=d{list(CORPUS).index('escape sequences (a warning)')}")
    assert "\\x1b]52;c;ZXZpbA==\\x07" in escaped.output  # shown, escaped, not obeyed
    markup = _run("data", "preview", config, f"dataset=d{list(CORPUS).index('rich markup in text')}")
    assert "[bold]b[/bold] [/x]" in markup.output


def test_a_dataset_name_and_a_path_that_look_like_markup_are_printed_as_text(hostile_registry, tmp_path):
    config, _folder = hostile_registry
    # x[/x]: markup, and not the [a,b] form an override reads as a list
    for args in (["data", "preview", config, "dataset=x[/x]"], ["train", config, "dataset=x[/x]", "--check"],
                 ["data", "check", tmp_path / "[bold]missing[/bold].json"]):
        result = _run(*args)
        assert result.exit_code == 2 and "x[/x]" in result.output or "[bold]missing[/bold]" in result.output, \
            result.output


def test_dataset_info_with_duplicate_names_or_deep_nesting_is_refused(tmp_path, demo_model_dir):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps([_alpaca()]))
    config = tmp_path / "train.yaml"
    config.write_text(f"model_name_or_path: {demo_model_dir}\ndataset_dir: {folder}\ndataset: a\ntemplate: qwen\n")
    for text, said in (('{"a": {"file_name": "a.json"}, "a": {"file_name": "b.json"}}', "more than once"),
                       ('{"a": {"file_name": "a.json", "x": ' + "[" * 50_000 + "]" * 50_000 + "}}", "levels deep")):
        (folder / "dataset_info.json").write_text(text)
        result = _run("train", config, "--check")
        assert result.exit_code == 2 and said in result.output, result.output


DEEP = "[" * 50_000 + "]" * 50_000  # JSON text too deep for Python's parser (a RecursionError once)


def _tool_rows(tools: str = "", call: str = '{"name": "f", "arguments": {}}') -> list[dict]:
    turns = [{"from": "human", "value": "hi"}, {"from": "function_call", "value": call},
             {"from": "observation", "value": "ok"}, {"from": "gpt", "value": "done"}]
    return [{"conversations": turns, **({"tools": tools} if tools else {})}]


def test_json_text_nested_too_deep_inside_a_field_is_a_row_problem(tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(_tool_rows(tools=DEEP)))
    result = _run("data", "check", tools)
    assert result.exit_code == 1 and "'tools' is not valid JSON (nested more than 64 levels deep)" in result.output, \
        result.output
    cell = tmp_path / "cell.csv"  # a CSV cell holding a list is read as JSON
    cell.write_text('instruction,output,history\nhi,yo,"' + "[" * 20_000 + "]" * 20_000 + '"\n')
    result = _run("data", "check", cell)
    assert result.exit_code == 1 and "'history' must be a list" in result.output, result.output
    calls = tmp_path / "calls.json"  # --fix reads an openai tool call's arguments text as JSON
    calls.write_text(json.dumps([{"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": DEEP}}]},
        {"role": "tool", "content": "ok"}, {"role": "assistant", "content": "done"}]}]))
    result = _run("data", "check", calls, "--fix", tmp_path / "fixed.json")
    assert result.exit_code == 0 and "wrote 1 of 1 rows" in result.output, result.output


@pytest.mark.parametrize("call", [DEEP, '{"name": "f", "arguments": ' + DEEP + "}", '{"name": "f", '],
                         ids=["deep", "deep arguments", "cut short"])
def test_a_function_call_that_is_not_json_is_refused_naming_its_row(call, tmp_path, demo_model_dir):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "calls.json").write_text(json.dumps(_tool_rows() + _tool_rows(call=call)))
    (folder / "dataset_info.json").write_text(json.dumps(
        {"calls": {"file_name": "calls.json", "formatting": "sharegpt"}}))
    config = tmp_path / "train.yaml"
    config.write_text(f"model_name_or_path: {demo_model_dir}\ndataset_dir: {folder}\ndataset: calls\ntemplate: qwen\n"
                      f"finetuning_type: lora\ncutoff_len: 64\nmax_steps: 2\noutput_dir: {tmp_path / 'out'}\n")
    for args in (["data", "preview", config], ["train", config, "--runs-dir", tmp_path / "runs"]):
        result = _run(*args)
        assert result.exit_code != 0, result.output
        assert "calls: row 2: The function call is not valid JSON" in result.output, result.output
        assert "Fix or remove that row" in result.output, result.output
