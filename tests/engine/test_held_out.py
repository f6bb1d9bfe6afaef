"""What validation needs from a training run: the rows SFT held out (with their answers), a reward model's scores of
held-out pairs, reference answers passed through to the validation rows, and plain completion for pre-training."""

import json
from pathlib import Path

import pytest

import engine
from engine.inference.prompts import read_prompt_rows
from engine.rundir import read_jsonl

REPO = Path(__file__).resolve().parents[2]


def test_sft_records_exactly_the_rows_it_held_out(demo_model_dir, tmp_path):
    config = engine.load_config({"model_name_or_path": str(demo_model_dir), "dataset": "identity",
                                 "dataset_dir": str(REPO / "data"), "template": "qwen", "cutoff_len": 96,
                                 "val_size": 5, "max_steps": 2, "output_dir": str(tmp_path / "out"), "seed": 3})
    handle = engine.train(config, runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed"
    held = read_jsonl(handle.run.held_out_path)
    assert len(held) == 5 and all(row["messages"][-1]["role"] == "assistant" for row in held)
    # the rows LLaMA-Factory holds out: datasets' train_test_split of the loaded rows with the run's seed
    import datasets

    from engine.data import load_examples

    examples = load_examples("identity", REPO / "data")
    lf_test = datasets.Dataset.from_dict({"i": list(range(len(examples)))}).train_test_split(test_size=5, seed=3)
    assert [row["source"] for row in held] == [examples[i]["source"] for i in lf_test["test"]["i"]]
    assert any("90 rows (5 held out) -> 85 train / 5 eval" in line for line in handle.run.tail_log(40))


@pytest.mark.parametrize("count, val_size, seed", [(90, 5, 3), (90, 0.05, 42), (7, 0.3, 0), (1000, 0.001, 7),
                                                   (45, 0.1, 1234), (3, 2, 42)])
def test_val_size_holds_out_the_rows_datasets_train_test_split_does(count, val_size, seed):
    """LLaMA-Factory splits with datasets' train_test_split(test_size=val_size, seed=seed) before preprocessing:
    the same rows, the same count (a share is rounded up: 90 x 0.05 = 4.5 holds out 5), the train rows in its
    order (which decides the preprocessing batches)."""
    import datasets

    from engine.data.chunks import holdout_indices

    lf_val = int(val_size) if val_size > 1 else val_size
    split = datasets.Dataset.from_dict({"i": list(range(count))}).train_test_split(test_size=lf_val, seed=seed)
    assert holdout_indices(count, val_size, seed) == (split["train"]["i"], split["test"]["i"])


def test_a_val_size_that_leaves_nothing_to_train_is_refused():
    from engine.errors import DataError
    from engine.data.chunks import holdout_indices

    with pytest.raises(DataError, match="val_size 10 holds out 10 of the 10 rows, leaving none"):
        holdout_indices(10, 10, 42)
    assert any("val_size 1 is read as the share 1.0" in problem
               for problem in engine.validate(engine.load_config({"val_size": 1})))


def test_reference_answers_are_read_and_shown_beside_the_answers(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(row) for row in [
        {"prompt": "Who are you?"},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hi, I am Nova."}]},
        {"instruction": "Add 2 and 2", "output": "4"},
    ]) + "\n", encoding="utf-8")
    rows = read_prompt_rows(prompts)
    assert [reference for _conversation, reference in rows] == [None, "Hi, I am Nova.", "4"]
    assert rows[1][0] == [{"role": "user", "content": "hi"}]  # the answer is not part of the prompt


def test_validation_rows_carry_the_reference_and_completion_skips_the_template(demo_model_dir, tmp_path):
    from engine.inference.config import load_infer_config
    from engine.inference.validate import run_validation

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                {"role": "assistant", "content": "Hello."}]}) + "\n")
    config = load_infer_config({"model_name_or_path": str(demo_model_dir), "template": "qwen",
                                "max_new_tokens": 4, "do_sample": False})
    rows = run_validation(config, prompts, tmp_path / "out.jsonl")
    assert rows[0]["reference"] == "Hello." and rows[0]["prompt"] == "hi" and rows[0]["template"] == "qwen"
    texts = tmp_path / "texts.txt"
    texts.write_text("The number 12 is written\n")
    completed = run_validation(config, texts, tmp_path / "done.jsonl", completion=True)
    assert completed[0]["template"] == "none" and "reference" not in completed[0]
    assert isinstance(completed[0]["tuned"], str)
