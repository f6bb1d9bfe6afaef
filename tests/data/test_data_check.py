"""The validator: each kind of problem found at the right row; repaired copies that never touch the input."""

from __future__ import annotations

import hashlib
import json

import pytest

from engine.data.check import check_file, convert_file, fill_placeholders, find_placeholders
from engine.data.loader import load_examples
from engine.errors import DataError


def _json(path, rows):
    path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return path


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _by_row(report) -> dict:
    found: dict = {}
    for problem in report.problems:
        found.setdefault(problem.row, []).append(problem)
    return found


def test_alpaca_problems_are_found_at_their_rows(tmp_path):
    rows = [
        {"instruction": "ok", "input": "", "output": "fine"},
        {"instruction": "no output here"},                                # row 2: missing field
        {"instruction": "blank", "output": "   "},                        # row 3: empty output
        {"instruction": 42, "output": "x"},                               # row 4: wrong type
        {"instruction": "ok", "input": "", "output": "fine"},             # row 5: duplicate of row 1
        {"instruction": "Hi {{name}}", "output": "I am {{name}}"},        # row 6: placeholder
        {"input": "context only", "output": "y"},                         # row 7: no instruction
        ["not", "an", "object"],                                          # row 8: wrong type
    ]
    report = check_file(_json(tmp_path / "a.json", rows))
    assert report.format == "alpaca" and report.rows == 8 and not report.ok
    problems = _by_row(report)
    assert set(problems) == {None, 2, 3, 4, 5, 7, 8}
    assert problems[2][0].field == "output" and "missing" in problems[2][0].message
    assert "'output' is empty" in problems[3][0].message
    assert problems[4][0].field == "instruction" and "must be text, not int" in problems[4][0].message
    assert problems[5][0].level == "warning" and problems[5][0].message == "duplicate of row 1."
    assert problems[7][0].level == "warning" and "alone becomes the prompt" in problems[7][0].message
    assert "not an object" in problems[8][0].message
    [placeholder] = problems[None]
    assert placeholder.level == "warning" and "{{name}}" in placeholder.message and "first in row 6" in \
        placeholder.message
    assert [p.line for p in problems[2]] == [7]  # the JSON array row starts on line 7 of the file


def test_sharegpt_role_problems_name_found_and_expected_tags(tmp_path):
    rows = [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "hello"}]},    # unknown tag
        {"conversations": [{"from": "human", "value": "a"}, {"from": "human", "value": "b"},
                           {"from": "gpt", "value": "c"}]},                                          # not alternating
        {"conversations": [{"from": "human", "value": "question only"}]},                           # no answer
        {"conversations": [{"from": "hummany", "value": "x"}, {"from": "gpt", "value": "y"}]},      # typo
        {"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": 3}]},          # wrong type
    ]
    report = check_file(_json(tmp_path / "s.json", rows))
    assert report.format == "sharegpt"
    problems = _by_row(report)
    assert set(problems) == {None, 2, 3, 4, 5, 6}
    assert "the role 'bot'" in problems[2][0].message
    assert "must alternate" in problems[3][0].message
    assert "no answer" in problems[4][0].message
    assert "'hummany'" in problems[5][0].message
    assert "must be a string" in problems[6][0].message
    [summary] = problems[None]
    assert "unknown role tags 'bot', 'hummany'" in summary.message
    assert "Tags found: human (6), gpt (4), bot (1), hummany (1)" in summary.message
    assert "expected: human, gpt, observation, function_call, system" in summary.message


def test_a_function_call_that_is_not_a_json_call_is_a_row_error(tmp_path):
    """Whatever the template, a function call must be JSON with a "name" (preview and training stop on it): the
    check says so at its row, before anything loads."""
    def row(call):
        return {"conversations": [{"from": "human", "value": "weather?"}, {"from": "function_call", "value": call},
                                  {"from": "observation", "value": "sunny"}, {"from": "gpt", "value": "Sunny."}],
                "tools": json.dumps([{"name": "w", "parameters": {}}])}

    report = check_file(_json(tmp_path / "f.json", [row("{not json"), row('{"name": "w", "arguments": {}}'),
                                                    row('{"arguments": {}}'), row("[" * 100_000)]))
    problems = _by_row(report)
    assert set(problems) == {1, 3, 4}
    assert "function call is not valid JSON" in problems[1][0].message
    assert "must be JSON like {\"name\"" in problems[3][0].message
    assert "nested more than 64 levels" in problems[4][0].message
    assert all(p.message.endswith("Fix or remove that row.") for rows in problems.values() for p in rows)


def test_bad_json_lines_are_reported_and_good_lines_still_checked(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"instruction": "a", "output": "b"}\n{"instruction": "c", "output": }\n'
                    '{"instruction": "d"}\n', encoding="utf-8")
    report = check_file(path)
    lines = {p.line: p.message for p in report.problems}
    assert "line 2 is not valid JSON" in lines[2] and "no answer" in lines[3]


def test_openai_messages_are_recognised_and_registered_with_tags(tmp_path):
    rows = [{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "Yo"}]}]
    report = check_file(_json(tmp_path / "o.json", rows))
    assert report.format == "openai" and report.ok
    entry = report.suggested_entry()
    assert entry["formatting"] == "sharegpt" and entry["columns"] == {"messages": "messages"}
    assert entry["tags"]["role_tag"] == "role" and entry["tags"]["assistant_tag"] == "assistant"
    (tmp_path / "dataset_info.json").write_text(json.dumps({"o": entry}))
    assert load_examples("o", tmp_path)[0]["system"] == "S"


def test_check_against_a_registered_spec_uses_its_columns(tmp_path):
    from engine.data.registry import parse_spec

    path = _json(tmp_path / "c.json", [{"q": "Hi", "a": "Yo"}])
    assert not check_file(path).ok  # read blindly: unknown format
    spec = parse_spec("c", {"file_name": "c.json", "columns": {"prompt": "q", "response": "a"}})
    assert check_file(path, spec=spec).ok


def test_whole_file_problems_raise_one_clear_error(tmp_path):
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "binary.json").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "gbk.json").write_bytes('[{"instruction": "你好", "output": "好"}]'.encode("gbk"))
    (tmp_path / "object.json").write_text('{"instruction": "a", "output": "b"}')
    (tmp_path / "data.xml").write_text("<a/>")
    cases = {"empty.json": "is empty", "binary.json": "binary", "gbk.json": "not UTF-8", "missing.json": "does not "
             "exist", "object.json": "single JSON object", "data.xml": "unsupported file type", ".": "is a folder"}
    for name, message in cases.items():
        with pytest.raises(DataError, match=message):
            check_file(tmp_path / name)


def test_convert_file_repairs_openai_and_odd_roles_without_touching_the_input(tmp_path):
    rows = [
        {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                      {"role": "bot", "content": "Yo"}]},
        {"messages": [{"role": "assistant", "content": "orphan"}, {"role": "Human", "content": "a"},
                      {"role": "user", "content": "b"}, {"role": "model", "content": "c"},
                      {"role": "user", "content": "dangling"}]},
        {"messages": [{"role": "alien", "content": "?"}, {"role": "assistant", "content": "!"}]},
    ]
    source = _json(tmp_path / "in.json", rows)
    before = _digest(source)
    report = convert_file(source, tmp_path / "out.jsonl")
    assert _digest(source) == before
    assert report.ok and report.format == "sharegpt" and report.rows == 2
    written = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert written[0] == {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}],
                          "system": "S"}
    assert written[1]["conversations"] == [{"from": "human", "value": "a\n\nb"}, {"from": "gpt", "value": "c"}]
    notes = " | ".join(report.notes)
    assert "renamed role 'bot' to 'gpt'" in notes and "merged consecutive turns" in notes
    assert "left out rows with a message whose role is unknown (1 row)" in notes
    for target in (source, tmp_path / "out.jsonl"):  # never the input, never an existing file
        with pytest.raises(DataError):
            convert_file(source, target)
    assert _digest(source) == before


def test_convert_file_normalizes_alpaca_field_names(tmp_path):
    source = _json(tmp_path / "in.json", [{"prompt": "2+2?", "response": 4, "extra": 1}, {"prompt": "x"}])
    report = convert_file(source, tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text()) == [{"instruction": "2+2?", "output": "4"}]
    assert report.ok and any("renamed field 'response' to 'output'" in note for note in report.notes)
    assert any("left out 1 row(s)" in note for note in report.notes)


def test_placeholders_are_found_and_filled_into_a_copy(tmp_path):
    source = _json(tmp_path / "id.json", [{"instruction": "Who are you?", "output": "I am {{name}} by {{ author }}."},
                                          {"instruction": "Name?", "output": "{{name}}"}])
    assert find_placeholders(source) == ["author", "name"]
    before = _digest(source)
    out = fill_placeholders(source, {"name": "Ada", "author": "Lab"}, tmp_path / "filled.json")
    assert json.loads(out.read_text())[0]["output"] == "I am Ada by Lab."
    assert find_placeholders(out) == [] and _digest(source) == before
    with pytest.raises(DataError, match="no value was given for author"):
        fill_placeholders(source, {"name": "Ada"}, tmp_path / "other.json")
    with pytest.raises(DataError, match="Refusing to write over the input"):
        fill_placeholders(source, {"name": "Ada", "author": "Lab"}, source)


def test_llamafactory_identity_has_two_placeholders(lf_reference):
    assert find_placeholders(lf_reference / "data" / "identity.json") == ["author", "name"]


def test_identical_preference_answers_are_reported(tmp_path):
    from engine.data import check_file

    path = tmp_path / "pairs.json"
    path.write_text('[{"instruction": "a", "chosen": "yes", "rejected": "no"},'
                    ' {"instruction": "b", "chosen": "same", "rejected": "same"}]')
    report = check_file(path)
    assert report.ranking
    identical = [p for p in report.problems if "identical" in p.message]
    assert [p.row for p in identical] == [2] and identical[0].level == "error"


def test_an_openai_tool_calling_file_checks_as_formatting_openai_and_trains_so(tmp_path):
    """Assistant tool_calls (content null) and one tool message per result: the check suggests formatting: openai,
    under which it loads; a repaired copy joins the results with LLaMA-Factory's tool_response separator."""
    calls = [{"id": "1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]
    rows = [{"messages": [{"role": "user", "content": f"Weather {i}?"},
                          {"role": "assistant", "content": None, "tool_calls": calls},
                          {"role": "tool", "content": "3 C"}, {"role": "tool", "content": "4 C"},
                          {"role": "assistant", "content": "Cold."}]} for i in range(3)]
    source = tmp_path / "tools.json"
    source.write_text(json.dumps(rows))
    report = check_file(source)
    assert report.ok and report.spec.formatting == "openai", [p.message for p in report.problems]
    (tmp_path / "dataset_info.json").write_text(json.dumps({"tools": {"file_name": "tools.json",
                                                                     **report.spec.to_dict()}}))
    assert [m["role"] for m in load_examples("tools", tmp_path)[0]["messages"]] == \
        ["user", "function_call", "observation", "assistant"]
    convert_file(source, tmp_path / "fixed.json")
    fixed = json.loads((tmp_path / "fixed.json").read_text())
    assert fixed[0]["conversations"][2]["value"] == "3 C\n</tool_response>\n<tool_response>\n4 C"


def test_a_file_of_columns_with_a_key_given_twice_is_a_problem_not_a_crash(tmp_path):
    """{"instruction": [...], "instruction": [...], "output": [...]}: JSON keeps the last list; the check says so
    (it stopped on a NameError)."""
    path = tmp_path / "cols.json"
    path.write_text('{"instruction": ["a", "b"], "instruction": ["c", "d"], "output": ["x", "y"]}')
    report = check_file(path)
    assert any("duplicate key 'instruction'" in p.message for p in report.errors), report.problems
