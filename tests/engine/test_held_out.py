"""What validation needs from a training run: the rows SFT held out (with their answers), a reward model's scores of
held-out pairs, reference answers passed through to the validation rows, and plain completion for pre-training."""

import json
from pathlib import Path

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
    # the same rows the engine's split holds out of the samples (nothing is dropped at cutoff 96)
    from engine.data import load_examples
    from engine.training.loop import split_validation

    examples = load_examples("identity", REPO / "data")
    _train, expected = split_validation(examples, 5, 3)
    assert [row["source"] for row in held] == [example["source"] for example in expected]
    assert any("85 train / 5 eval" in line for line in handle.run.tail_log(40))


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
