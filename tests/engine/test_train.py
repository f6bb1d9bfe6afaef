"""SFT end to end on the tiny demo model: the loss falls, the right parameters change, results land on disk."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import engine

REPO = Path(__file__).resolve().parents[2]


def tiny_config(model_dir, tmp_path, **over):
    base = {"model_name_or_path": str(model_dir), "dataset": "identity", "dataset_dir": str(REPO / "data"),
            "template": "qwen", "cutoff_len": 96, "max_samples": 32, "per_device_train_batch_size": 4,
            "learning_rate": 5e-3, "max_steps": 12, "logging_steps": 2, "save_steps": 100, "seed": 7,
            "output_dir": str(tmp_path / "out"), "lr_scheduler_type": "constant"}
    base.update(over)
    return engine.load_config(base)


def losses(handle):
    return [m["loss"] for m in handle.metrics() if "loss" in m]


def test_lora_trains_only_adapters(demo_model_dir, tmp_path):
    handle = engine.train(tiny_config(demo_model_dir, tmp_path), runs_dir=tmp_path / "runs")
    status = handle.status()
    assert status.state == "completed", status
    curve = losses(handle)
    assert curve[-1] < curve[0] * 0.9, curve
    out = Path(status.output_dir)
    adapter = load_file(out / "adapter_model.safetensors")
    assert adapter and all("lora_" in k for k in adapter)
    # lora_B starts at zero; training moved it.
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)
    assert (out / "training_loss.png").stat().st_size > 1000
    assert json.loads((out / "lfa_training.json").read_text())["template"] == "qwen"
    assert "chat_template" in (out / "tokenizer_config.json").read_text() or (out / "chat_template.jinja").exists()
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(demo_model_dir)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    tuned = PeftModel.from_pretrained(base, out)
    merged = tuned.merge_and_unload().state_dict()
    changed = [k for k in before if not torch.equal(before[k], merged[k])]
    assert changed and all("proj" in k for k in changed)  # only adapted linear layers differ after merging


def test_full_and_freeze_change_the_right_weights(demo_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    base = load_file(Path(demo_model_dir) / "model.safetensors")
    for method in ("full", "freeze"):
        handle = engine.train(tiny_config(demo_model_dir, tmp_path / method, finetuning_type=method,
                                          learning_rate=2e-3, freeze_trainable_layers=1),
                              runs_dir=tmp_path / "runs")
        assert handle.status().state == "completed"
        curve = losses(handle)
        assert curve[-1] < curve[0], (method, curve)
        tuned = AutoModelForCausalLM.from_pretrained(handle.status().output_dir).state_dict()
        changed = {k for k in base if not torch.equal(base[k], tuned[k])}
        if method == "full":
            assert any("layers.0." in k for k in changed) and any("layers.1." in k for k in changed)
        else:
            assert changed and all("layers.1." in k for k in changed), sorted(changed)


@pytest.mark.parametrize("batching", ["padded", "packed"])
def test_gradient_accumulation_normalises_by_tokens(demo_model_dir, tmp_path, batching):
    """One step of batch 4 equals one step of 2 micro-batches of 2: the loss is per trained token of the step
    (what lets the wizard fold a packed run's accumulation into one micro-batch on a CPU)."""
    results = []
    for bs, ga in ((4, 1), (2, 2)):
        handle = engine.train(tiny_config(demo_model_dir, tmp_path / f"{bs}x{ga}", finetuning_type="full",
                                          batching_strategy=batching,
                                          per_device_train_batch_size=bs, gradient_accumulation_steps=ga,
                                          max_steps=1, logging_steps=1, learning_rate=1e-3),
                              runs_dir=tmp_path / "runs")
        first = [m for m in handle.metrics() if "loss" in m][0]
        results.append((first["loss"], first["grad_norm"], load_file(Path(handle.status().output_dir) /
                                                                      "model.safetensors")))
    (loss_a, norm_a, weights_a), (loss_b, norm_b, weights_b) = results
    assert loss_a == pytest.approx(loss_b, abs=1e-5)
    assert norm_a == pytest.approx(norm_b, rel=1e-5)  # the same gradient: its norm before clipping
    # Adam's first step is lr * g/|g|: a gradient entry near zero turns fp32 noise into up to lr of difference,
    # so the weights are compared at a fraction of lr (1e-3) rather than at fp32 precision.
    for key in weights_a:
        torch.testing.assert_close(weights_a[key], weights_b[key], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("method", ["lora", "full"])
def test_resume_matches_uninterrupted_run(demo_model_dir, tmp_path, method):
    common = dict(max_steps=8, save_steps=4, logging_steps=1, lr_scheduler_type="cosine", warmup_ratio=0.2,
                  lora_dropout=0.1, finetuning_type=method, learning_rate=5e-3 if method == "lora" else 1e-3)
    straight = engine.train(tiny_config(demo_model_dir, tmp_path / "a", **common), runs_dir=tmp_path / "runs")
    # The same run stopped after step 4 (it saves checkpoint-4), then resumed with resume_from_checkpoint: auto.
    from engine.training.loop import StopFlag

    stop = StopFlag()
    first = engine.train(tiny_config(demo_model_dir, tmp_path / "b", **common), runs_dir=tmp_path / "runs",
                         stop=stop, on_log=lambda row: row.get("step") == 4 and stop.request("test"))
    assert first.status().state == "stopped" and first.status().step == 4
    resumed = engine.train(tiny_config(demo_model_dir, tmp_path / "b", **common, resume_from_checkpoint="auto",
                                       overwrite_output_dir=True), runs_dir=tmp_path / "runs")
    assert any(e["event"] == "resumed" for e in resumed.run.read_events())
    assert losses(resumed)[-1] == pytest.approx(losses(straight)[-1], abs=1e-5)
    weights = "adapter_model.safetensors" if method == "lora" else "model.safetensors"
    a = load_file(Path(straight.status().output_dir) / weights)
    b = load_file(Path(resumed.status().output_dir) / weights)
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-6, rtol=1e-5)


@pytest.mark.skipif(__import__("platform").libc_ver()[0] != "glibc", reason="glibc malloc's thresholds")
def test_a_cpu_run_keeps_large_freed_blocks_for_its_next_steps_and_says_so(demo_model_dir, tmp_path, monkeypatch):
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES", "LD_PRELOAD"):
        monkeypatch.delenv(name, raising=False)
    handle = engine.train(tiny_config(demo_model_dir, tmp_path, max_steps=1), runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed"
    assert "freed blocks up to 1 GiB are kept for reuse" in handle.run.log_path.read_text()


def test_bf16_on_a_cpu_without_bf16_units_trains_fp32_and_says_so(demo_model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr("engine.training.setup.cpu_bf16_units", lambda: None)
    handle = engine.train(tiny_config(demo_model_dir, tmp_path, bf16=True, max_steps=2), runs_dir=tmp_path / "runs")
    status = handle.status()
    assert status.state == "completed"
    assert any("fp32" in note and "no bf16 units" in note for note in (status.notes or []))
    assert "NOTE" in handle.run.log_path.read_text()
    assert "precision torch.float32" in handle.run.log_path.read_text()


def test_bf16_on_a_cpu_with_bf16_units_trains_in_bf16_close_to_fp32(demo_model_dir, tmp_path, monkeypatch):
    """With AMX-BF16 (stood in for: oneDNN emulates bf16 on a CPU without it) bf16: true trains under bf16
    autocast, the adapters in fp32: it learns, and its losses stay near the fp32 run's without equalling them."""
    monkeypatch.setattr("engine.training.setup.cpu_bf16_units", lambda: "AMX-BF16")
    runs = {}
    for bf16 in (False, True):
        handle = engine.train(tiny_config(demo_model_dir, tmp_path / str(bf16), bf16=bf16), runs_dir=tmp_path / "runs")
        assert handle.status().state == "completed", handle.status()
        runs[bf16] = handle
    log = runs[True].run.log_path.read_text()
    assert "precision torch.bfloat16" in log and not any("fp32" in note for note in runs[True].status().notes)
    half, full = losses(runs[True]), losses(runs[False])
    assert half[-1] < half[0] * 0.9, half
    assert half != full and half == pytest.approx(full, rel=0.05), (half, full)
    adapter = load_file(Path(runs[True].status().output_dir) / "adapter_model.safetensors")
    assert all(tensor.dtype == torch.float32 for tensor in adapter.values())
    assert any("lora_B" in key and tensor.abs().sum() > 0 for key, tensor in adapter.items())  # B starts at zero


def test_head_on_trained_positions_gives_the_full_loss_and_gradients(demo_model_dir):
    """Skipping the LM head on prompt/padding positions changes neither the loss nor any gradient."""
    from transformers import AutoModelForCausalLM

    from engine.training import loss as loss_module

    model = AutoModelForCausalLM.from_pretrained(demo_model_dir)
    torch.manual_seed(0)
    input_ids = torch.randint(3, 500, (2, 12))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 9:] = 0
    labels = input_ids.clone()
    labels[:, :5] = -100
    labels[1, 9:] = -100
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    results = []
    for selective in (True, False):
        assert loss_module.head_only_where_trained(model)
        original = loss_module.head_only_where_trained
        loss_module.head_only_where_trained = lambda _model, flag=selective: flag
        try:
            model.zero_grad()
            loss, tokens = loss_module.causal_lm_loss_sum(model, batch)
            loss.backward()
        finally:
            loss_module.head_only_where_trained = original
        results.append((loss.detach(), tokens, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_a, tokens_a, grads_a), (loss_b, tokens_b, grads_b) = results
    assert tokens_a == tokens_b == int((labels[:, 1:] != -100).sum())
    torch.testing.assert_close(loss_a, loss_b, atol=1e-5, rtol=1e-6)
    for name in grads_a:
        # fp32 sums in another order (the head on 14 rows instead of 24): ~1e-6 relative.
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=1e-5, rtol=1e-4)


def test_rows_cut_at_cutoff_len_are_named_before_training(demo_model_dir, tmp_path):
    """An answer longer than cutoff_len is trained cut off mid-text: the run says how many rows that is."""
    handle = engine.train(tiny_config(demo_model_dir, tmp_path, cutoff_len=24, max_steps=1),
                          runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed"
    notes = " ".join(handle.status().notes)
    assert "of 32 row(s) are longer than 24 tokens and were cut" in notes, notes
    short = engine.train(tiny_config(demo_model_dir, tmp_path, output_dir=str(tmp_path / "b"), max_steps=1,
                                     cutoff_len=512), runs_dir=tmp_path / "runs")
    assert "longer than cutoff_len" not in " ".join(short.status().notes)


def test_a_run_stopped_between_two_logs_and_resumed_counts_all_its_training_time(demo_model_dir, tmp_path):
    """Stopped after step 5 with a log every 4 steps: the time after the step-4 log is counted on resuming."""
    from engine.rundir import iter_runs
    from engine.training.loop import StopFlag

    class StopAfterFive(StopFlag):
        checks = 0

        @property
        def requested(self) -> bool:  # read once per step, after the step
            self.checks += 1
            return self.checks >= 5

        @requested.setter
        def requested(self, value: bool) -> None:
            pass

    config = tiny_config(demo_model_dir, tmp_path, max_steps=8, save_steps=100, logging_steps=4)
    engine.train(config, runs_dir=tmp_path / "runs", stop=StopAfterFive())
    run = next(iter_runs(tmp_path / "runs"))
    stopped = run.read_status()
    assert stopped.state == "stopped" and stopped.step == 5 and stopped.elapsed_s == stopped.runtime_s
    engine.resume(run.run_id, runs_dir=tmp_path / "runs", detach=False)
    status = run.read_status()
    assert status.state == "completed" and status.step == 8
    assert status.runtime_s == pytest.approx(stopped.runtime_s + status.attempt_elapsed_s, abs=1e-3)


def test_a_crashed_run_resumed_in_its_folder_records_the_redone_steps_and_counts_every_attempts_time(
        demo_model_dir, tmp_path):
    from engine.runstatus import Resumed

    config = tiny_config(demo_model_dir, tmp_path, max_steps=8, save_steps=3, logging_steps=1)

    def crash(row):
        if row.get("step") == 5:  # two steps past checkpoint-3
            raise RuntimeError("the machine went away")

    with pytest.raises(RuntimeError):
        engine.train(config, runs_dir=tmp_path / "runs", on_log=crash)
    from engine.rundir import iter_runs

    run = next(iter_runs(tmp_path / "runs"))
    crashed = run.read_status()
    assert crashed.state == "failed" and crashed.step == 5 and crashed.elapsed_s > 0
    engine.resume(run.run_id, runs_dir=tmp_path / "runs", detach=False)
    status = run.read_status()
    assert status.state == "completed" and status.step == 8
    assert status.resumes == [Resumed(from_step=3, reached_step=5, at=status.resumes[0].at)]
    assert status.resumes[0].redone == 2
    # the elapsed time goes on from the crashed attempt's; the last attempt's own is kept beside it
    assert 0 < status.attempt_elapsed_s < status.runtime_s
    assert status.runtime_s == pytest.approx(crashed.elapsed_s + status.attempt_elapsed_s, abs=0.05)
    assert all(row["elapsed_s"] > crashed.elapsed_s for row in run.read_metrics() if row["step"] > 3
               and "loss" in row)
    resumed = next(e for e in run.read_events() if e["event"] == "resumed")
    assert resumed["step"] == 3 and resumed["redone"] == 2
    assert "steps 4-5 are trained again" in "\n".join(run.tail_log(200))


def _crash_after_step(monkeypatch, at: int):
    """RunLogger.step raises after recording step ``at`` (between two logs): the machine went away there."""
    from engine.training import loop

    original = loop.RunLogger.step

    def step(self, step, *args, **kwargs):
        original(self, step, *args, **kwargs)
        if step == at:
            raise RuntimeError("the machine went away")

    monkeypatch.setattr(loop.RunLogger, "step", step)
    monkeypatch.setattr(loop, "PROGRESS_EVERY_S", 0.0)


def _crashed_run(config, tmp_path, monkeypatch, at: int):
    """(run folder, its status) of a run of ``config`` whose machine went away after step ``at``."""
    from engine.rundir import RunDir

    with monkeypatch.context() as patched:
        _crash_after_step(patched, at)
        with pytest.raises(RuntimeError):
            engine.train(config, runs_dir=tmp_path / "runs", run_id="first")
    run = RunDir(tmp_path / "runs" / "first")
    return run, run.read_status()


def test_a_run_killed_between_two_logs_knows_how_far_it_got(demo_model_dir, tmp_path, monkeypatch):
    """Logged every 4 steps, saved every 3, killed after step 6: steps 4-6 are trained again, not 4 alone."""
    from engine.runstatus import Resumed
    from engine.training import loop

    config = tiny_config(demo_model_dir, tmp_path, max_steps=8, save_steps=3, logging_steps=4)
    run, crashed = _crashed_run(config, tmp_path, monkeypatch, 6)
    assert crashed.state == "failed" and crashed.step == 6 and crashed.elapsed_s > 0
    assert max(row["step"] for row in run.read_metrics()) == 4  # the last log: it alone would say 4
    assert loop.PROGRESS_EVERY_S == 2.0
    engine.resume(run.run_id, runs_dir=tmp_path / "runs", detach=False)
    status = run.read_status()
    assert status.state == "completed" and status.step == 8
    assert status.resumes == [Resumed(from_step=3, reached_step=6, at=status.resumes[0].at)]
    assert status.resumes[0].redone == 3


def test_a_resume_into_a_new_run_folder_knows_the_other_runs_progress_and_time(demo_model_dir, tmp_path,
                                                                               monkeypatch):
    from engine.runstatus import Resumed

    config = tiny_config(demo_model_dir, tmp_path, max_steps=8, save_steps=3, logging_steps=1)
    first, crashed = _crashed_run(config, tmp_path, monkeypatch, 5)
    checkpoint = Path(crashed.output_dir) / "checkpoint-3"
    saved_at = json.loads((checkpoint / "trainer_state.json").read_text())["elapsed_s"]
    assert 0 < saved_at <= crashed.elapsed_s

    again = engine.train(tiny_config(demo_model_dir, tmp_path, max_steps=8, save_steps=3, logging_steps=1,
                                     output_dir=str(tmp_path / "second"), resume_from_checkpoint=str(checkpoint)),
                         runs_dir=tmp_path / "runs", run_id="second")
    status = again.status()
    assert again.run.run_id != first.run_id and status.state == "completed" and status.step == 8
    assert status.resumes == [Resumed(from_step=3, reached_step=5, at=status.resumes[0].at)]
    assert status.resumes[0].redone == 2
    assert status.runtime_s == pytest.approx(crashed.elapsed_s + status.attempt_elapsed_s, abs=0.05)
    # its chart starts at step 1: the checkpoint kept the rows logged up to it, and they come first
    kept = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    first_rows = [row for row in first.read_metrics() if row["step"] <= 3]
    assert kept == first_rows and [row["step"] for row in kept] == [1, 2, 3]
    rows = again.run.read_metrics()
    assert [row["step"] for row in rows if "loss" in row] == list(range(1, 9)) and rows[:3] == first_rows
    assert [e["rows"] for e in again.run.read_events() if e["event"] == "metrics_carried"] == [3]

    # before its model has loaded, a run that starts from a checkpoint is already at that checkpoint's step
    from engine.api import prepare_run

    _, pending = prepare_run(tiny_config(demo_model_dir, tmp_path, max_steps=8, save_steps=3, output_dir=str(
        tmp_path / "pending"), resume_from_checkpoint=str(checkpoint)), runs_dir=tmp_path / "runs", run_id="pending")
    assert (pending.read_status().state, pending.read_status().step, pending.read_status().total_steps) == (
        "pending", 3, 8)

    # the other run's folder gone: how far it got is unknown, its training time up to the checkpoint is carried
    import shutil

    shutil.rmtree(first.path)
    third = engine.train(tiny_config(demo_model_dir, tmp_path, max_steps=8, save_steps=3, logging_steps=1,
                                     output_dir=str(tmp_path / "third"), resume_from_checkpoint=str(checkpoint)),
                         runs_dir=tmp_path / "runs", run_id="third")
    status = third.status()
    assert status.resumes == [Resumed(from_step=3, reached_step=None, at=status.resumes[0].at)]
    assert status.runtime_s == pytest.approx(saved_at + status.attempt_elapsed_s, abs=0.05)
    assert third.run.read_metrics()[:3] == first_rows  # from the checkpoint itself


@pytest.mark.parametrize("text, progress", [
    ('{"step": 3, "total_steps": 8}', (3, 8)), ('{"step": 3, "total_steps": 2}', (3, None)),
    ('{"step": 3, "total_steps": "8"}', (3, None)), ('{"step": true}', None), ('{"step": 0}', None),
    ('[3]', None), ('{"step": 3', None), (None, None)])
def test_a_checkpoints_progress_is_read_as_untrusted(tmp_path, text, progress):
    from engine.rundir import checkpoint_progress

    if text is not None:
        (tmp_path / "trainer_state.json").write_text(text)
    assert checkpoint_progress(tmp_path) == progress


def test_a_checkpoints_log_history_is_read_as_untrusted_rows(tmp_path):
    """Rows carried from a checkpoint into a new run folder are cleaned as the metrics file's rows are; a folder
    that already has rows (the same run resumed) gets none."""
    from engine.rundir import RunDir
    from engine.training.shell import carry_log_history

    run = RunDir(tmp_path / "run")
    history = [{"step": 1, "loss": 2.5, "note": "text is no metric"}, {"step": True, "loss": 1.0},
               {"step": "2", "loss": 1.0}, ["not", "a", "row"], {"step": 2, "loss": float("nan"), 3: 1},
               {"step": 0, "loss": 9.0}, {"step": 5, "loss": 1.0}]
    assert carry_log_history(run, {"log_history": "rows"}, 4) == 0
    assert carry_log_history(run, {"log_history": history}, 4) == 2
    assert run.read_metrics() == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": None}]
    assert carry_log_history(run, {"log_history": history}, 4) == 0  # it has rows now
