"""Rows whose answer cutoff_len cuts away entirely are kept, as LLaMA-Factory keeps them: they count in the
examples and the steps (LF's step count), train nothing, and are named in the notes; a run of only such rows is
refused."""

import json

import pytest

import engine

from tests.engine.test_train import tiny_config

ANSWER = "The answer is the number seven, written out in full."
LONG_PROMPT = "word " * 300


def dataset(tmp_path, prompts):
    folder = tmp_path / "data"
    folder.mkdir()
    rows = [{"instruction": prompt, "output": ANSWER} for prompt in prompts]
    (folder / "rows.json").write_text(json.dumps(rows))
    (folder / "dataset_info.json").write_text(json.dumps({"rows": {"file_name": "rows.json"}}))
    return {"dataset": "rows", "dataset_dir": str(folder), "max_samples": None}


def test_rows_that_train_nothing_count_in_the_steps(demo_model_dir, tmp_path):
    # cutoff_len 16: a short prompt keeps 3 answer tokens, a 300-word one none (its share rounds to 0).
    prompts = ["What is seven?", LONG_PROMPT, "Say seven.", "Name it.", LONG_PROMPT, "Spell seven."]
    config = tiny_config(demo_model_dir, tmp_path, **dataset(tmp_path, prompts), cutoff_len=16, max_steps=-1,
                         num_train_epochs=1, per_device_train_batch_size=2, gradient_accumulation_steps=1,
                         logging_steps=1)
    status = engine.train(config, runs_dir=tmp_path / "runs").status()
    assert status.state == "completed", status
    assert status.total_steps == 3  # 6 rows in batches of 2, as LLaMA-Factory counts them (4 rows: 2 steps)
    assert any(note.startswith("2 of 6 row(s) train nothing: no answer token fits in cutoff_len 16 (first: rows:2)")
               for note in status.notes), status.notes


def test_a_run_of_only_rows_that_train_nothing_is_refused(demo_model_dir, tmp_path):
    config = tiny_config(demo_model_dir, tmp_path, **dataset(tmp_path, [LONG_PROMPT] * 2), cutoff_len=16)
    with pytest.raises(engine.DataError, match="No sample has a trained token after encoding"):
        engine.train(config, runs_dir=tmp_path / "runs")
