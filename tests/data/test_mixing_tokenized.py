"""mix_strategy / interleave_probs draw the rows LLaMA-Factory's datasets.interleave_datasets call draws, and
tokenized_path saves the encoded samples once (that run stops, as LLaMA-Factory's preprocessing) and reuses them."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

import engine
from engine.data.loader import load_examples
from engine.data.mixing import mix, mix_problems

REPO = Path(__file__).resolve().parents[2]


def rows(name, count):
    return [f"{name}{i}" for i in range(count)]


def interleaved_by_datasets(parts, probs, seed, stopping):
    from datasets import Dataset, interleave_datasets

    sets = [Dataset.from_dict({"x": part}) for part in parts]
    return interleave_datasets(sets, probabilities=probs, seed=seed, stopping_strategy=stopping)["x"]


@pytest.mark.parametrize("strategy,stopping", [("interleave_under", "first_exhausted"),
                                               ("interleave_over", "all_exhausted"),
                                               ("interleave_once", "all_exhausted_without_replacement")])
@pytest.mark.parametrize("probs", [None, [0.8, 0.2]])
def test_interleaving_draws_what_datasets_draws(strategy, stopping, probs):
    parts = [rows("a", 30), rows("b", 7)]
    ours = mix(parts, strategy, probs, seed=13)
    assert ours == interleaved_by_datasets(parts, probs, 13, stopping)
    counts = Counter(row[0] for row in ours)
    if strategy == "interleave_under" and probs is None:
        assert counts == {"a": 7, "b": 7}  # alternate until the shorter runs out
    if strategy == "interleave_over" and probs is None:
        assert counts == {"a": 30, "b": 30}  # the shorter one repeats
    if strategy == "interleave_once":
        assert sorted(ours) == sorted(parts[0] + parts[1])  # every row exactly once


def test_concat_keeps_the_order_and_a_seed_changes_the_draw():
    parts = [rows("a", 3), rows("b", 2)]
    assert mix(parts, "concat", None, seed=1) == ["a0", "a1", "a2", "b0", "b1"]
    assert mix(parts, "interleave_under", "0.5,0.5", 1) != mix(parts, "interleave_under", "0.5,0.5", 2)


def test_the_loader_mixes_registered_datasets():
    examples = load_examples("identity,alpaca_demo", REPO / "data", max_samples=20, mix_strategy="interleave_under",
                             interleave_probs="0.5,0.5", seed=42)
    sources = Counter(e["source"].split(":")[0] for e in examples)
    assert set(sources) == {"identity", "alpaca_demo"} and len(examples) < 40


def test_interleave_probs_rules_follow_llamafactory():
    assert "only applies to interleaved mixing" in mix_problems("concat", "0.5,0.5", 2, 0)[0]
    assert "3 values for 2 dataset(s)" in mix_problems("interleave_under", "0.2,0.3,0.5", 2, 0)[0]
    assert "sum to 1" in mix_problems("interleave_over", "0.5,0.6", 2, 0)[0]
    assert mix_problems("interleave_over", [0.25, 0.75], 2, 0) == []
    config = engine.load_config({"dataset": "identity,alpaca_demo", "dataset_dir": str(REPO / "data"),
                                 "mix_strategy": "interleave_under", "interleave_probs": [0.3, 0.3, 0.4]})
    assert any("3 values for 2 dataset(s)" in p for p in engine.validate(config))


def tiny(model_dir, tmp_path, **over):
    base = {"model_name_or_path": str(model_dir), "dataset": "identity,alpaca_demo", "dataset_dir": str(REPO / "data"),
            "template": "qwen", "cutoff_len": 64, "max_samples": 12, "per_device_train_batch_size": 4,
            "learning_rate": 5e-3, "max_steps": 3, "logging_steps": 1, "output_dir": str(tmp_path / "out"),
            "overwrite_output_dir": True, "plot_loss": False, "val_size": 0.2,
            "tokenized_path": str(tmp_path / "tokenized")}
    return engine.load_config({**base, **over})


def test_tokenized_path_saves_then_stops_then_trains_on_the_same_samples(demo_model_dir, tmp_path):
    first = engine.train(tiny(demo_model_dir, tmp_path), runs_dir=tmp_path / "runs")
    status = first.status()
    assert status.state == "completed" and status.step == 0
    assert "Tokenized data saved at" in status.exit_reason and "tokenized_path" in status.exit_reason
    assert not (tmp_path / "out" / "adapter_model.safetensors").exists()  # the preprocessing run trains nothing
    record = json.loads((tmp_path / "tokenized" / "lfa_tokenized.json").read_text())
    assert record["stage"] == "sft" and record["train"] + record["eval"] == 24

    from engine.data.tokenized import load_tokenized

    train, evaluation = load_tokenized(tmp_path / "tokenized", "sft")
    from transformers import AutoTokenizer

    from engine.data import encode_supervised, get_template
    from engine.training.loop import split_validation

    tokenizer = AutoTokenizer.from_pretrained(demo_model_dir)
    samples = encode_supervised(load_examples("identity,alpaca_demo", REPO / "data", max_samples=12), tokenizer,
                                get_template("qwen", tokenizer), 64)
    expected_train, expected_eval = split_validation(list(samples), 0.2, 42)
    assert train == expected_train and evaluation == expected_eval

    # The same config now trains on the saved samples, and ignores the dataset keys (as LLaMA-Factory does).
    second = engine.train(tiny(demo_model_dir, tmp_path, dataset="no_such_dataset"), runs_dir=tmp_path / "runs")
    assert second.status().state == "completed" and second.status().step == 3
    assert "read from tokenized_path" in second.run.log_path.read_text()
    assert (tmp_path / "out" / "adapter_model.safetensors").exists()


def test_tokenized_path_refuses_foreign_folders_and_other_stages(demo_model_dir, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    problems = engine.validate(tiny(demo_model_dir, tmp_path, tokenized_path=str(foreign)))
    assert any("holds other files and no saved tokenized data" in p for p in problems)
    from engine.data.tokenized import load_tokenized, save_tokenized
    from engine.errors import DataError

    save_tokenized(tmp_path / "t", [{"input_ids": [1, 2], "labels": [1, 2]}], [], {"stage": "sft"})
    with pytest.raises(DataError, match="tokenized for stage sft; this run is stage dpo"):
        load_tokenized(tmp_path / "t", "dpo")


@pytest.mark.parametrize("record, words", [
    ("not json", "lfa_tokenized.json is not valid JSON"),
    ("[1]", "lfa_tokenized.json must hold a JSON object, not a list"),
    ('{"stage": ["sft"]}', "the field 'stage' must be text, not a list"),
    ("[" * 100 + "]" * 100, "nested more than 64 levels deep"),
    ('{"stage": "dpo"}', "holds data tokenized for stage dpo; this run is stage sft"),
], ids=["text", "list", "stage-list", "deep", "other-stage"])
def test_a_damaged_or_foreign_tokenized_record_is_a_problem_before_training(demo_model_dir, tmp_path, record, words):
    from engine.config.validate import check_notes
    from engine.data.tokenized import load_tokenized, save_tokenized
    from engine.errors import DataError

    save_tokenized(tmp_path / "tokenized", [{"input_ids": [1, 2], "labels": [1, 2]}], [], {"stage": "sft"})
    (tmp_path / "tokenized" / "lfa_tokenized.json").write_text(record, encoding="utf-8")
    config = tiny(demo_model_dir, tmp_path)
    assert any(words in p for p in engine.validate(config)), engine.validate(config)
    assert any(note.startswith("tokenized_path: trains on") for note in check_notes(config))
    with pytest.raises(DataError, match=re.escape(words)):
        load_tokenized(tmp_path / "tokenized", "sft")


@pytest.mark.parametrize("rows, stage, words", [
    ([{"text": "hello"}], "sft", "there is no column input_ids, labels (it has: text)"),
    ([{"input_ids": "abc", "labels": "abc"}], "sft", "column input_ids holds string, not lists of token ids"),
    ([{"input_ids": [1, 2, 3], "labels": [1, 2]}], "sft", "column labels has another length than input_ids"),
    ([{"input_ids": [1, 2], "labels": [1, 99999]}], "sft", "holds the token id 99999, past the model's vocabulary"),
    ([{"input_ids": [1, -5], "labels": [1, 2]}], "sft", "column input_ids holds the id -5, which no token has"),
    ([{"input_ids": [1, 2], "labels": [1, 2]}], "dpo", "there is no column chosen_input_ids"),
], ids=["text", "strings", "lengths", "vocab", "negative", "stage"])
def test_saved_samples_another_stage_or_model_cannot_train_on_are_refused(tmp_path, rows, stage, words):
    from datasets import Dataset, DatasetDict

    from engine.data.tokenized import load_tokenized
    from engine.errors import DataError

    DatasetDict({"train": Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "lf"))
    with pytest.raises(DataError, match=re.escape(words) + ".*Remove the folder"):
        load_tokenized(tmp_path / "lf", stage, vocab_size=1000)


def test_llamafactory_pretraining_and_kto_columns_are_read_under_the_names_training_uses(tmp_path):
    from datasets import Dataset

    from engine.data.tokenized import load_tokenized

    Dataset.from_list([{"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1]}]).save_to_disk(str(tmp_path / "pt"))
    assert load_tokenized(tmp_path / "pt", "pt") == ([{"input_ids": [5, 6, 7], "labels": [5, 6, 7]}], [])
    Dataset.from_list([{"input_ids": [1], "labels": [1], "kl_input_ids": [2], "kl_labels": [2], "kto_tags": True}]) \
        .save_to_disk(str(tmp_path / "kto"))
    assert load_tokenized(tmp_path / "kto", "kto")[0][0]["kto_tag"] is True


def test_a_damaged_saved_dataset_is_named_instead_of_failing_inside_datasets(tmp_path):
    from engine.data.tokenized import load_tokenized, save_tokenized
    from engine.errors import DataError

    save_tokenized(tmp_path / "t", [{"input_ids": [1, 2], "labels": [1, 2]}], [], {"stage": "sft"})
    (tmp_path / "t" / "dataset_dict.json").write_text('{"splits": 5}', encoding="utf-8")
    with pytest.raises(DataError, match="cannot be read as saved tokenized data.*Remove the folder"):
        load_tokenized(tmp_path / "t", "sft")
