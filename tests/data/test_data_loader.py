"""Loading registered datasets: every format x file type, the column/tag options, and LLaMA-Factory's own files."""

from __future__ import annotations

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.data.loader import load_examples, read_records
from engine.errors import DataError

ALPACA = [
    {"instruction": "Add 2 and 3.", "input": "", "output": "5"},
    {"instruction": "Translate to French:", "input": "cat", "output": "chat"},
]
SHAREGPT = [
    {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"},
                       {"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
    {"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Capital of Peru?"},
                       {"from": "gpt", "value": "Lima."}]},
]
OPENAI = [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello!"}]},
    {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
]
ENTRIES = {
    "alpaca": {},
    "sharegpt": {"formatting": "sharegpt"},
    "openai": {"formatting": "sharegpt", "columns": {"messages": "messages"},
               "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                        "assistant_tag": "assistant", "system_tag": "system"}},
}
EXPECTED = {
    "alpaca": [([("user", "Add 2 and 3."), ("assistant", "5")], None),
               ([("user", "Translate to French:\ncat"), ("assistant", "chat")], None)],
    "sharegpt": [([("user", "Hi"), ("assistant", "Hello!"), ("user", "2+2?"), ("assistant", "4")], None),
                 ([("user", "Capital of Peru?"), ("assistant", "Lima.")], "Be brief.")],
    "openai": [([("user", "Hi"), ("assistant", "Hello!")], "Be brief."),
               ([("user", "2+2?"), ("assistant", "4")], None)],
}
ROWS = {"alpaca": ALPACA, "sharegpt": SHAREGPT, "openai": OPENAI}


def _write(path, rows, kind: str) -> None:
    if kind == "json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    elif kind == "csv":
        with path.open("w", newline="", encoding="utf-8") as stream:
            writer = csv.DictWriter(stream, fieldnames=list(rows[0]))
            writer.writeheader()
            for row in rows:  # nested values are stored as JSON text, as spreadsheets export them
                writer.writerow({k: v if isinstance(v, str) else json.dumps(v) for k, v in row.items()})
    elif kind == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif kind in ("arrow", "arrow-file"):
        table = pa.Table.from_pylist(rows)
        # datasets.save_to_disk writes the stream flavour; pyarrow's default file writer the file flavour.
        opener = pa.ipc.new_stream if kind == "arrow" else pa.ipc.new_file
        with pa.OSFile(str(path), "wb") as sink, opener(sink, table.schema) as writer:
            writer.write_table(table)


def _shape(example) -> tuple:
    return [(m["role"], m["content"]) for m in example["messages"]], example["system"]


@pytest.mark.parametrize("kind", ["json", "jsonl", "csv", "parquet", "arrow", "arrow-file"])
@pytest.mark.parametrize("fmt", ["alpaca", "sharegpt", "openai"])
def test_every_format_loads_from_every_file_type(tmp_path, fmt, kind):
    suffix = kind.split("-")[0]
    _write(tmp_path / f"d.{suffix}", ROWS[fmt], kind)
    (tmp_path / "dataset_info.json").write_text(json.dumps({"d": {"file_name": f"d.{suffix}", **ENTRIES[fmt]}}))
    examples = load_examples("d", tmp_path)
    assert [_shape(e) for e in examples] == EXPECTED[fmt]
    assert [e["source"] for e in examples] == ["d:1", "d:2"]


def test_sharegpt_custom_tags_tools_and_function_calls(make_dataset):
    tools = json.dumps([{"name": "get_time", "description": "Time in a city",
                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])
    rows = [{"dialog": [{"speaker": "me", "text": "Time in Oslo?"},
                        {"speaker": "call", "text": '{"name": "get_time", "arguments": {"city": "Oslo"}}'},
                        {"speaker": "result", "text": '{"time": "10:00"}'},
                        {"speaker": "bot", "text": "It is 10:00 in Oslo."}],
             "sys": "You can use tools.", "functions": tools}]
    entry = {"formatting": "sharegpt", "columns": {"messages": "dialog", "system": "sys", "tools": "functions"},
             "tags": {"role_tag": "speaker", "content_tag": "text", "user_tag": "me", "assistant_tag": "bot",
                      "function_tag": "call", "observation_tag": "result"}}
    [example] = load_examples("tooly", make_dataset("tooly", rows, entry))
    assert [m["role"] for m in example["messages"]] == ["user", "function_call", "observation", "assistant"]
    assert example["system"] == "You can use tools." and json.loads(example["tools"])[0]["name"] == "get_time"


def test_alpaca_history_and_system_columns(make_dataset):
    rows = [{"q": "And 3+3?", "a": "6", "sys": "Math tutor.", "past": [["1+1?", "2"], ["2+2?", "4"]]}]
    entry = {"columns": {"prompt": "q", "response": "a", "system": "sys", "history": "past"}}
    [example] = load_examples("hist", make_dataset("hist", rows, entry))
    assert _shape(example) == ([("user", "1+1?"), ("assistant", "2"), ("user", "2+2?"), ("assistant", "4"),
                                ("user", "And 3+3?"), ("assistant", "6")], "Math tutor.")


def test_names_are_mixed_in_order_and_max_samples_applies_per_dataset(make_dataset):
    make_dataset("a", [{"instruction": f"a{i}", "output": "x"} for i in range(5)])
    folder = make_dataset("b", [{"instruction": f"b{i}", "output": "y"} for i in range(3)])
    examples = load_examples(" b , a", folder, max_samples=2)
    assert [e["source"] for e in examples] == ["b:1", "b:2", "a:1", "a:2"]
    assert len(load_examples(["a", "b"], folder)) == 8


def test_num_samples_draws_rows_reproducibly(make_dataset):
    folder = make_dataset("a", [{"instruction": f"q{i}", "output": "x"} for i in range(10)], {"num_samples": 4})
    first = [e["source"] for e in load_examples("a", folder)]
    assert len(first) == 4 and len(set(first)) == 4 and first == [e["source"] for e in load_examples("a", folder)]
    reseeded = [[e["source"] for e in load_examples("a", folder, seed=seed)] for seed in (1, 2, 3)]
    assert any(drawn != first for drawn in reseeded)  # the run's seed draws the rows, as in LLaMA-Factory
    make_dataset("small", [{"instruction": "q", "output": "x"}], {"num_samples": 3})
    assert len(load_examples("small", folder)) == 3  # more than the file holds: rows repeat


def test_a_folder_of_files_is_one_dataset(tmp_path):
    (tmp_path / "parts").mkdir()
    _write(tmp_path / "parts" / "1.jsonl", ALPACA[:1], "jsonl")
    _write(tmp_path / "parts" / "2.jsonl", ALPACA[1:], "jsonl")
    (tmp_path / "dataset_info.json").write_text(json.dumps({"p": {"file_name": "parts"}}))
    assert len(load_examples("p", tmp_path)) == 2
    _write(tmp_path / "parts" / "0.json", ALPACA[:1], "json")  # LF's "json" type holds .json and .jsonl alike
    assert len(load_examples("p", tmp_path)) == 3
    _write(tmp_path / "parts" / "3.csv", ALPACA, "csv")
    with pytest.raises(DataError, match=r"mixes file types \(csv, json\)"):
        load_examples("p", tmp_path)


def test_ranking_examples_and_stage_checks(make_dataset):
    make_dataset("pref", [{"instruction": "2+2?", "chosen": "4", "rejected": "5"}], {"ranking": True})
    folder = make_dataset("sft", ALPACA)
    [example] = load_examples("pref", folder, ranking=True)
    assert _shape(example) == ([("user", "2+2?")], None) and (example["chosen"], example["rejected"]) == ("4", "5")
    with pytest.raises(DataError, match="not a preference dataset"):
        load_examples("sft", folder, ranking=True)
    with pytest.raises(DataError, match="is a preference dataset"):
        load_examples("pref", folder, ranking=False)
    with pytest.raises(DataError, match="Cannot mix"):
        load_examples("pref,sft", folder)


def test_hub_entries_not_downloaded_say_how_to_download(tmp_path):
    (tmp_path / "dataset_info.json").write_text(json.dumps({"alpaca_en": {"hf_hub_url": "llamafactory/alpaca_en"}}))
    with pytest.raises(DataError, match="needs a download .* `lf-assistant data download alpaca_en`"):
        load_examples("alpaca_en", tmp_path)


def test_bad_rows_are_listed_with_row_numbers(make_dataset):
    rows = [ALPACA[0], {"instruction": "no answer"}, ALPACA[1], {"instruction": "empty", "output": " "}]
    with pytest.raises(DataError) as info:
        load_examples("bad", make_dataset("bad", rows))
    message = str(info.value)
    assert "2 bad row(s)" in message and "bad: row 2: no answer" in message
    assert "bad: row 4: 'output' is empty" in message
    assert "lf-assistant data check" in message


def test_bad_json_line_is_reported_with_its_number(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"instruction": "a", "output": "b"}\n\n{"instruction": oops}\n')
    with pytest.raises(DataError, match="line 3 is not valid JSON"):
        read_records(tmp_path / "d.jsonl")


def test_sharegpt_role_errors_name_the_tags(make_dataset):
    rows = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "yo"}]}]
    with pytest.raises(DataError, match="the role 'bot'; expected one of human, gpt, observation, function_call"):
        load_examples("s", make_dataset("s", rows, {"formatting": "sharegpt"}))


LF_DATASETS = {  # name -> (rows, ranking)
    "identity": (91, False), "alpaca_en_demo": (999, False), "alpaca_zh_demo": (1000, False),
    "glaive_toolcall_en_demo": (300, False), "glaive_toolcall_zh_demo": (None, False), "dpo_en_demo": (300, True),
}


@pytest.mark.parametrize("name", list(LF_DATASETS))
def test_llamafactory_text_datasets_load(lf_reference, name):
    rows, ranking = LF_DATASETS[name]
    dataset_dir = lf_reference / "data"
    info = json.loads((dataset_dir / "dataset_info.json").read_text(encoding="utf-8"))
    if not (dataset_dir / info[name]["file_name"]).exists():
        pytest.skip(f"{info[name]['file_name']} is registered but not shipped in the reference copy")
    examples = load_examples(name, dataset_dir, ranking=ranking)
    assert len(examples) == rows
    assert all(e["messages"][0]["role"] == "user" for e in examples)
    if ranking:
        assert all(e["chosen"] and e["rejected"] and len(e["messages"]) % 2 == 1 for e in examples)
    if name.startswith("glaive"):
        roles = {m["role"] for e in examples for m in e["messages"]}
        assert roles == {"user", "assistant", "function_call", "observation"}
        assert sum(e["tools"] is not None for e in examples) > rows // 2


def test_openai_formatting_reads_tool_calls_and_tool_results_as_llamafactory_does(tmp_path):
    """LLaMA-Factory's `formatting: openai`: sharegpt with its tags, a system message first, an assistant message's
    tool_calls turned into a function call (the JSON list of the calls' `function` objects) and consecutive tool
    results joined into one observation."""
    calls = [{"id": "1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}},
             {"id": "2", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Rome\"}"}}]
    row = {"messages": [{"role": "system", "content": "Use tools."},
                        {"role": "user", "content": "Weather in Oslo and Rome?"},
                        {"role": "assistant", "content": "", "tool_calls": calls},
                        {"role": "tool", "content": "Oslo: 3 C"}, {"role": "tool", "content": "Rome: 18 C"},
                        {"role": "assistant", "content": "Oslo is cold, Rome is mild."}]}
    (tmp_path / "tools.json").write_text(json.dumps([row]))
    tags = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
            "observation_tag": "tool", "system_tag": "system"}
    (tmp_path / "dataset_info.json").write_text(json.dumps({"tools": {
        "file_name": "tools.json", "formatting": "openai", "columns": {"messages": "messages"}, "tags": tags}}))
    [example] = load_examples("tools", tmp_path)
    assert example["system"] == "Use tools.\ndetailed thinking off"  # LF's openai converter appends the switch
    assert [m["role"] for m in example["messages"]] == ["user", "function_call", "observation", "assistant"]
    assert json.loads(example["messages"][1]["content"]) == [c["function"] for c in calls]
    assert example["messages"][2]["content"] == "Oslo: 3 C\n</tool_response>\n<tool_response>\nRome: 18 C"

    row["messages"][2]["tool_calls"] = "weather(Oslo)"
    (tmp_path / "tools.json").write_text(json.dumps([row]))
    with pytest.raises(DataError, match="row 1.*tool_calls must be a list"):
        load_examples("tools", tmp_path)


def test_openai_formatting_keeps_llamafactorys_system_text():
    """OpenAIDatasetConverter's rule, case by case (LF data/converter.py)."""
    from engine.data.formats import openai_system

    tools = '[{"name": "weather"}]'
    assert openai_system(None, None) == "detailed thinking off"
    assert openai_system(None, tools) is None  # empty: the template's default system
    assert openai_system("Be brief.", None) == "Be brief.\ndetailed thinking off"
    assert openai_system("Be brief. detailed thinking on", None) == "Be brief. detailed thinking on"
    assert openai_system("Be brief.", tools) == "Be brief.\n"


@pytest.mark.parametrize(("split", "kept"), [("train", [0, 1, 2, 3, 4]), ("train[:2]", [0, 1]),
                                             ("train[40%:]", [2, 3, 4]), ("train[1:-1]", [1, 2, 3]),
                                             ("train[-20%:]", [4])])
def test_a_split_slice_takes_part_of_a_local_file_as_datasets_does(tmp_path, split, kept):
    rows = [{"instruction": f"Q{i}", "output": f"A{i}"} for i in range(5)]
    (tmp_path / "five.json").write_text(json.dumps(rows))
    (tmp_path / "dataset_info.json").write_text(json.dumps({"five": {"file_name": "five.json", "split": split}}))
    assert [e["messages"][0]["content"] for e in load_examples("five", tmp_path)] == [f"Q{i}" for i in kept]


def test_a_split_a_local_file_does_not_have_is_refused(tmp_path):
    (tmp_path / "five.json").write_text(json.dumps([{"instruction": "Q", "output": "A"}]))
    (tmp_path / "dataset_info.json").write_text(json.dumps({"five": {"file_name": "five.json", "split": "test"}}))
    with pytest.raises(DataError, match="split 'test' does not exist in a local file.*train\\[:1000\\]"):
        load_examples("five", tmp_path)
    from engine.data.loader import local_split

    for hostile in ("train" + " " * 32_000 + "x", "train[:" + "9" * 5000 + "]"):  # answered at once, by name
        with pytest.raises(DataError, match="does not exist in a local file"):
            local_split([1, 2], hostile, "five")
    assert local_split([1, 2, 3], " train [ : 2 ] ", "five") == [1, 2]


def test_split_slices_match_the_datasets_library(tmp_path):
    """The same rows as datasets.load_dataset(..., split=S) on the file, which is what LLaMA-Factory calls."""
    from datasets import load_dataset

    from engine.data.loader import local_split

    (tmp_path / "seven.json").write_text(json.dumps([{"q": i} for i in range(7)]))
    for split in ("train[:2]", "train[40%:]", "train[1:-1]", "train[-20%:]", "train[:33%]", "train[50%:]", "train"):
        expected = [row["q"] for row in load_dataset("json", data_files=str(tmp_path / "seven.json"), split=split,
                                                     cache_dir=str(tmp_path / "cache"))]
        assert local_split(list(range(7)), split, "seven") == expected, split



def test_a_columns_object_names_every_column_read_as_in_llamafactory(tmp_path):
    """LF's firefly entry {"prompt": "input", "response": "target"}: the query column is absent (not the alpaca
    default "input", which read the same text twice); LF's ultrachat-style tags leave out system_tag, so a row
    starting with a system message is not accepted (LF drops it; here it is named)."""
    (tmp_path / "firefly.json").write_text(json.dumps([{"kind": "k", "input": "Translate hello", "target": "bonjour"}]))
    rows = [{"messages": [{"role": "system", "content": "SYSTEM-IN-ROW"}, {"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello"}]}]
    (tmp_path / "uc.json").write_text(json.dumps(rows))
    (tmp_path / "dataset_info.json").write_text(json.dumps({
        "firefly": {"file_name": "firefly.json", "columns": {"prompt": "input", "response": "target"}},
        "uc": {"file_name": "uc.json", "formatting": "sharegpt", "columns": {"messages": "messages"},
               "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                        "assistant_tag": "assistant"}}}))
    [example] = load_examples("firefly", tmp_path)
    assert example["messages"] == [{"role": "user", "content": "Translate hello"},
                                   {"role": "assistant", "content": "bonjour"}]
    with pytest.raises(DataError, match="uc: row 1: message 1 has the role 'system'"):
        load_examples("uc", tmp_path)
