"""The project's own demo data (data/): registered, loadable, small, and its answers are actually correct."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from engine.data import load_texts, check_file, find_placeholders, load_dataset_info, load_examples
from engine.errors import DataError

DATA = Path(__file__).resolve().parents[2] / "data"
ARITHMETIC = re.compile(r"(\d+) ([-+×÷]) (\d+) = (\d+)")
UNITS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
         "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
         "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40,
         "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}


def _words_to_number(text: str) -> int:
    """An independent reader of English number words (up to the thousands), to check the generated ones."""
    total = current = 0
    for word in text.replace("-", " ").split():
        if word == "hundred":
            current *= 100
        elif word == "thousand":
            total, current = total + current * 1000, 0
        else:
            current += UNITS[word]
    return total + current


def _arithmetic_is_right(text: str) -> int:
    checked = 0
    for a, op, b, result in ARITHMETIC.findall(text):
        a, b, result = int(a), int(b), int(result)
        expected = {"+": a + b, "-": a - b, "×": a * b, "÷": a // b if b and a % b == 0 else None}[op]
        assert expected == result, f"wrong arithmetic in demo data: {a} {op} {b} = {result}"
        checked += 1
    return checked


def test_every_registered_demo_dataset_loads_and_checks_clean():
    info = load_dataset_info(DATA)
    assert set(info) == {"identity", "alpaca_demo", "sharegpt_demo", "dpo_demo", "rm_demo", "kto_demo", "pt_demo"}
    for name, spec in info.items():
        if name == "pt_demo":
            assert len(load_texts(name, DATA)) >= 150
            continue
        examples = load_examples(name, DATA, ranking=spec.ranking)
        assert len(examples) >= (50 if name in ("identity", "dpo_demo", "rm_demo") else 100), name
        if name == "kto_demo":
            assert {e["kto_tag"] for e in examples} == {True, False}
        report = check_file(DATA / spec.file_name, spec=spec)
        assert report.ok and not [p for p in report.warnings if "duplicate" in p.message], name


def test_demo_data_stays_small():
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 1_000_000


def test_identity_uses_name_and_author_placeholders():
    examples = load_examples("identity", DATA)
    assert 80 <= len(examples) <= 100
    assert find_placeholders(DATA / "identity.json") == ["author", "name"]
    assert all("{{name}}" in e["messages"][-1]["content"] or "{{author}}" in e["messages"][-1]["content"]
               for e in examples)
    assert len({e["messages"][0]["content"] for e in examples}) == len(examples)


def test_alpaca_demo_answers_are_correct_and_lengths_are_skewed():
    rows = load_examples("alpaca_demo", DATA)
    checked = 0
    for example in rows:
        question, answer = example["messages"][0]["content"], example["messages"][1]["content"]
        checked += _arithmetic_is_right(answer)
        if question.startswith("Write this number in words."):
            assert _words_to_number(answer) == int(question.split("\n")[1])
            checked += 1
        if question.startswith("Sort these numbers"):
            numbers = [int(x) for x in question.split("\n")[1].split(", ")]
            expected = sorted(numbers, reverse="largest to smallest" in question)
            assert answer == ", ".join(map(str, expected))
            checked += 1
        if question.startswith("Sort these words"):
            assert answer == ", ".join(sorted(question.split("\n")[1].split(", ")))
            checked += 1
    assert checked > 250
    lengths = sorted(len(e["messages"][1]["content"]) for e in rows)
    assert lengths[-1] > 10 * statistics.median(lengths)  # a long tail, for batching and cutoff demos


def test_sharegpt_demo_is_multi_turn_with_some_system_prompts_and_correct_math():
    rows = load_examples("sharegpt_demo", DATA)
    assert all(len(e["messages"]) >= 4 for e in rows)
    assert 0 < sum(e["system"] is not None for e in rows) < len(rows)
    assert sum(_arithmetic_is_right(m["content"]) for e in rows for m in e["messages"]) > 100


@pytest.mark.parametrize("side", ["chosen", "rejected"])
def test_dpo_demo_prefers_the_correct_answer(side):
    rows = load_examples("dpo_demo", DATA, ranking=True)
    assert 50 <= len(rows) <= 70 and all(e["chosen"] != e["rejected"] for e in rows)
    sums = [e for e in rows if ARITHMETIC.search(e["chosen"])]
    assert len(sums) >= 20
    for example in sums:
        a, _, b, result = ARITHMETIC.search(example[side]).groups()
        assert (int(a) + int(b) == int(result)) == (side == "chosen")


def test_pre_training_on_conversations_reads_what_llamafactory_reads(tmp_path):
    """stage pt on alpaca data trains its prompt column, and on sharegpt data each conversation's first message
    after the system prompt (LLaMA-Factory's pt reads `_prompt[0]`); the answers are not pre-training text."""
    rows = [{"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Tea?"},
                               {"from": "gpt", "value": "Yes."}]},
            {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."},
                               {"from": "human", "value": "Bye"}, {"from": "gpt", "value": "Bye."}]}]
    (tmp_path / "chat.json").write_text(json.dumps(rows))
    (tmp_path / "dataset_info.json").write_text(json.dumps(
        {"chat": {"file_name": "chat.json", "formatting": "sharegpt", "columns": {"messages": "conversations"}}}))
    assert load_texts("chat", tmp_path) == ["Tea?", "Hi"]
    first = load_examples("alpaca_demo", DATA)[0]["messages"][0]["content"]
    assert load_texts("alpaca_demo", DATA)[0] == first
    alpaca = [{"instruction": "Q0", "input": "ctx", "output": "A0"},
              {"instruction": "Q1", "output": "A1", "history": [["hi", "hello"]]}]
    (tmp_path / "alpaca").mkdir()
    (tmp_path / "alpaca" / "alpaca.json").write_text(json.dumps(alpaca))
    (tmp_path / "alpaca" / "dataset_info.json").write_text(json.dumps({"alpaca": {
        "file_name": "alpaca.json", "columns": {"prompt": "instruction", "query": "input", "response": "output",
                                                "history": "history"}}}))
    assert load_texts("alpaca", tmp_path / "alpaca") == ["Q0\nctx", "hi"]  # the input after a newline; history's first turn
    broken = [{"conversations": [{"from": "human", "value": "Tea?"}]}]  # no answer: not a conversation
    (tmp_path / "chat.json").write_text(json.dumps(broken))
    with pytest.raises(DataError, match="row 1"):
        load_texts("chat", tmp_path)
