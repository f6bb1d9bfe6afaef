"""The pre-flight: real steps of the run's own components, timed in a child process, nothing of the run written;
a micro-batch that does not fit is halved with the accumulation raised to keep the effective batch."""

import json
from pathlib import Path

import pytest

import engine
from engine.recipes.measure import DoesNotFit, choose_groups, fit_micro_batch, group_tokens, proposal_reason

REPO = Path(__file__).resolve().parents[2]


def tiny_config(model_dir, tmp_path, **over):
    base = {"model_name_or_path": str(model_dir), "dataset": "identity", "dataset_dir": str(REPO / "data"),
            "template": "qwen", "cutoff_len": 96, "max_samples": 48, "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 2, "learning_rate": 5e-3, "num_train_epochs": 2, "logging_steps": 2,
            "output_dir": str(tmp_path / "out"), "seed": 7}
    base.update(over)
    return engine.load_config(base)


def test_a_micro_batch_that_does_not_fit_is_halved_keeping_the_effective_batch():
    tried = []

    def attempt(micro, accum):
        tried.append((micro, accum))
        if micro > 2:
            raise DoesNotFit("out of memory")
        return "timed"

    micro, accum, result, reason = fit_micro_batch(attempt, 8, 1)
    assert (micro, accum, result) == (2, 4, "timed") and tried == [(8, 1), (4, 2), (2, 4)]
    assert "micro-batch 8 does not fit (out of memory)" == reason.text == str(reason)
    # The same sentence as a code and its values, for front ends in other languages.
    assert reason.to_dict()["fields"] == {"micro": 8, "why": {"code": "measure.error", "text": "out of memory",
                                                              "fields": {"error": "out of memory"}}}
    assert proposal_reason(reason, 2, 4).text == ("micro-batch 8 does not fit (out of memory); 2 fits, and "
                                                  "gradient_accumulation_steps 4 keeps the effective batch")
    assert fit_micro_batch(attempt, 2, 3)[:2] == (2, 3)  # fits as asked: nothing changes
    assert fit_micro_batch(attempt, 2, 3)[3] is None
    with pytest.raises(DoesNotFit):
        fit_micro_batch(lambda micro, accum: (_ for _ in ()).throw(DoesNotFit("never")), 4, 1)


def test_the_longest_steps_are_measured_first():
    samples = [{"input_ids": [0] * n} for n in (5, 50, 10, 40)]

    class Plan:
        def groups(self, epoch):
            return [[[0], [2]], [[1], [3]]]  # step 2 holds the two long samples

    groups = choose_groups(Plan(), samples, steps=2)
    assert groups[0] == [[1], [3]] and len(groups) == 3  # warm-up on the longest, then repeated as needed
    assert group_tokens(groups[0], samples) == 90


def test_preflight_times_real_steps_and_writes_nothing_of_the_run(demo_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny_config(demo_model_dir, tmp_path)
    measured = engine.api.measure_steps(config, steps=2)
    assert measured.fits and measured.proposal is None and measured.device == "cpu"
    assert 1 <= measured.steps_timed <= 2 and measured.step_s > 0 and measured.tokens_per_s > 0
    assert measured.micro_batch == 4 and measured.grad_accum == 2
    assert measured.peak_bytes > 50 * 2**20 and measured.limit_bytes > measured.peak_bytes
    # 48 rows, 4 per micro-batch, 2 micro-batches a step: 6 steps an epoch, 2 epochs
    assert measured.total_steps == 12
    assert measured.predicted_s > measured.startup_s > 0
    assert not (tmp_path / "out").exists() and not (tmp_path / "lf_runs").exists()
    assert json.loads(json.dumps(measured.to_dict()))["total_steps"] == 12  # plain data: stored in state.json


def test_preflight_failure_says_why(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = engine.load_config({"model_name_or_path": str(tmp_path), "dataset": "identity",
                                 "dataset_dir": str(REPO / "data"), "template": "qwen"})
    with pytest.raises(engine.errors.EngineError, match="pre-flight could not run"):
        engine.api.measure_steps(config, steps=1)
