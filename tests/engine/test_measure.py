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
    import os
    import time

    from engine.measurement import usable_cpus

    monkeypatch.chdir(tmp_path)
    config = tiny_config(demo_model_dir, tmp_path)
    # Other work on every CPU before measuring: the measurement says so, with the load it saw.
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0 * usable_cpus(), 0.0, 0.0))
    began = time.time()
    measured = engine.api.measure_steps(config, steps=2)
    assert began <= measured.measured_at <= time.time() and measured.load_per_cpu == 3.0
    assert measured.cpu_share is not None and measured.cpu_share > 0  # the CPU time its timed steps got
    assert "measured on a busy machine (load" in measured.notes[-1] and "may be far off" in measured.notes[-1]
    assert measured.note_messages[-1]["code"] == "measure.busy"
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


def test_a_busy_machine_is_named_from_the_load_or_the_cpu_time_the_steps_got():
    from engine.measurement import Measurement, busy_note, usable_cpus, with_busy_note

    def measured(**over):
        return Measurement(**{**dict(device="cpu", micro_batch=1, grad_accum=1, steps_timed=3, step_s=1.3,
                                     tokens_per_s=90.0, startup_s=6.0, peak_bytes=2**30, limit_bytes=2**33,
                                     total_steps=20, predicted_s=32.0, fits=True), **over})

    assert busy_note(measured(load_per_cpu=0.1, cpu_share=1.6)) is None  # a quiet machine: nothing to say
    assert busy_note(measured()) is None  # nothing measured tells (a stored pre-flight from before)
    loaded = busy_note(measured(load_per_cpu=1.5, cpu_share=1.2))
    assert loaded.fields["why"].code == "measure.busy_load"
    assert f"load {1.5 * usable_cpus():.1f} on {usable_cpus()} CPUs before measuring" in loaded.text
    starved = busy_note(measured(load_per_cpu=0.2, cpu_share=0.04))  # 51 s/step where 1.28 was measured idle
    assert "the measuring process got 0.04 CPU-seconds a second" in starved.text and "far off" in starved.text
    assert busy_note(measured(load_per_cpu=2.0, cpu_share=0.1)).fields["why"].code == "measure.busy_both"
    assert busy_note(measured(device="cuda:0", load_per_cpu=2.0)) is None  # the GPU sets the pace there
    noted = with_busy_note(measured(cpu_share=0.1, notes=["earlier"], note_messages=[{"code": "x", "text": "earlier"}]))
    assert noted.notes[0] == "earlier" and noted.notes[1] == starved.text.replace("0.04", "0.10")
    assert [m["code"] for m in noted.note_messages] == ["x", "measure.busy"]
