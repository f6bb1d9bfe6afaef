"""Stage functions: devices, health hints, models, validation and export configs."""

import math

import pytest

from assistant.wizard.stages import export, gpu, model, train, validate
from assistant.wizard.state import new_state
from engine.runstatus import ProcessIdentity, RunState, RunStatus



@pytest.fixture()
def make_gpu(fake_devices):
    return fake_devices[0]


@pytest.fixture()
def report(fake_devices):
    return fake_devices[1]


def test_no_gpu_means_cpu_with_an_empty_environment(report):
    outcome = gpu.apply(new_state(), report(), {})
    assert outcome.ok and outcome.state.device["platform"] == "cpu"
    assert gpu.device_env(outcome.state.device) == {}


def test_one_free_gpu_is_used_and_pinned(make_gpu, report):
    outcome = gpu.apply(new_state(), report(make_gpu(0, used_mib=60000, util=95), make_gpu(1)), {})
    assert outcome.state.device["indices"] == [1]
    assert gpu.device_env(outcome.state.device) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert gpu.env_prefix(outcome.state.device) == "CUDA_VISIBLE_DEVICES=1 "


def test_several_free_gpus_ask_single_or_multi_and_refuse_a_busy_one(make_gpu, report):
    found = report(make_gpu(0), make_gpu(1), make_gpu(2, used_mib=40000, util=80, processes=["python (pid 7)"]))
    assert gpu.situation(found) == "several_free"
    assert gpu.apply(new_state(), found, {"gpu_mode": "single"}).state.device["indices"] == [0]
    multi = gpu.apply(new_state(), found, {"gpu_mode": "multi"})
    assert multi.state.device["indices"] == [0, 1] and multi.state.device["mode"] == "multi"
    busy = gpu.apply(new_state(), found, {"gpu_mode": "single", "indices": [2]})
    assert not busy.ok and "busy" in busy.problems[0]
    assert not gpu.apply(new_state(), found, {"gpu_mode": "multi", "indices": [0]}).ok
    assert not gpu.apply(new_state(), found, {"indices": [7]}).ok


def test_all_busy_never_chooses_silently(make_gpu, report):
    found = report(make_gpu(0, used_mib=70000, util=99), make_gpu(1, used_mib=30000, util=50))
    waiting = gpu.apply(new_state(), found, {"busy_action": "wait"})
    assert not waiting.ok and waiting.code == "wait"
    assert gpu.apply(new_state(), found, {"busy_action": "share"}).code == "pick"
    shared = gpu.apply(new_state(), found, {"busy_action": "share", "indices": [1]})
    assert shared.ok and shared.state.device["mode"] == "share" and shared.state.device["indices"] == [1]


def test_device_file_records_the_choice_and_its_environment(tmp_path):
    import json

    device = {"platform": "cuda", "indices": [0, 1], "mode": "multi", "reason": "free"}
    path = gpu.write_device_file(tmp_path, device)
    assert json.loads(path.read_text())["env"] == {"CUDA_VISIBLE_DEVICES": "0,1"}
    from engine.devices import load_choice

    assert load_choice(tmp_path).indices == [0, 1]


SETTINGS = {"flat_window": 6, "flat_tolerance": 0.02, "near_zero_loss": 0.05, "small_dataset_rows": 500,
            "stall_s": 300}


def _metrics(losses):
    return [{"step": i + 1, "loss": loss, "grad_norm": 1.0} for i, loss in enumerate(losses)]


def test_health_hints_catch_nan_flat_overfit_and_stall():
    running = RunStatus(state=RunState.RUNNING, process=ProcessIdentity.current())
    hints = train.health_hints(_metrics([2.0, math.nan]), running, SETTINGS, rows=90, last_metric_at=None)
    assert [h.level for h in hints] == ["error"]
    flat = train.health_hints(_metrics([2.0, 2.01, 1.99, 2.0, 2.02, 1.98]), running, SETTINGS, rows=90,
                              last_metric_at=None)
    assert any("not falling" in h.message for h in flat)
    falling = train.health_hints(_metrics([2.0, 1.5, 1.2, 1.0, 0.8, 0.6]), running, SETTINGS, rows=90,
                                 last_metric_at=None)
    assert falling == []
    overfit = train.health_hints(_metrics([2.0, 1.0, 0.01]), running, SETTINGS, rows=90, last_metric_at=None)
    assert any("memorising" in h.message for h in overfit)
    assert train.health_hints(_metrics([2.0, 1.0, 0.01]), running, SETTINGS, rows=50_000, last_metric_at=None) == []
    stalled = train.health_hints(_metrics([2.0, 1.5]), running, SETTINGS, rows=90, last_metric_at=1000.0,
                                 now=1000.0 + 600)
    assert any("stuck" in h.message for h in stalled)
    dead = RunStatus(state=RunState.RUNNING, process=ProcessIdentity(2**22 + 12345, 0.0, running.process.host))
    assert train.health_hints(_metrics([2.0, 1.5]), dead, SETTINGS, rows=90, last_metric_at=1000.0,
                              now=1600.0) == []


def test_models_resolve_or_say_what_to_do(workspace, skill, demo_model_dir):
    state = new_state().replace(method="lora")
    demo = model.resolve(state, skill, str(demo_model_dir))
    assert demo.ok and demo.state.family == "demo" and demo.state.model_path == str(demo_model_dir.resolve())
    assert model.fetch_plan(demo.state, skill).kind == "none"
    missing = model.resolve(state, skill, "./no/such/folder")
    assert missing.code == "missing_path" and "does not exist" in missing.problems[0]
    (workspace / "weights.gguf").write_bytes(b"GGUF")
    a_file = model.resolve(state, skill, str(workspace / "weights.gguf"))
    assert a_file.code == "missing_path" and "is a file, not a model folder" in a_file.problems[0]
    unknown = model.resolve(state, skill, "someone/unheard-of-model")
    assert unknown.code == "unsupported" and "template" in unknown.problems[0]
    custom = model.resolve(state, skill, "someone/unheard-of-model", template="qwen3")
    assert custom.ok and custom.state.template == "qwen3" and "Qwen3" in custom.notes[-1]
    assert model.fetch_plan(custom.state, skill).kind == "download"
    registry = model.resolve(state, skill, "Qwen/Qwen3-0.6B")
    plan = model.fetch_plan(registry.state, skill)
    assert plan.kind == "download" and plan.target == workspace / "models" / "Qwen3-0.6B"
    assert model.resolve(state, skill, "lf-tiny-llama").state.template == "llama3"
    build = model.fetch_plan(model.resolve(state, skill, "lf-tiny-llama").state, skill)
    assert build.kind == "build" and build.target == workspace / "models" / "lf-tiny-llama"
    assert model.recommended_model(skill, offline=True) == "lf-tiny-qwen3"


def test_a_model_downloaded_into_another_projects_models_is_used_and_named(workspace, skill, tmp_path_factory,
                                                                           monkeypatch):
    import json

    from hubserver import make_tiny_repo

    from engine.models.recorded import index_path, record_download

    monkeypatch.setenv("LFA_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    downloaded = make_tiny_repo(tmp_path_factory.mktemp("project") / "models" / "tiny", weight_bytes=2**16)
    (downloaded / ".lfa-download.json").write_text(json.dumps({"model": "acme/tiny", "source": "hf"}))
    record_download("acme/tiny", downloaded)  # as `lf-assistant models download acme/tiny` does once complete
    chosen = model.resolve(new_state().replace(method="lora"), skill, "acme/tiny")  # from the workspace
    assert chosen.ok and chosen.state.model_path == str(downloaded.resolve())
    assert model.fetch_plan(chosen.state, skill).kind == "none"  # not downloaded again into ./models
    assert f"Found where `lf-assistant models download` put it: {downloaded.resolve()} (recorded in {index_path()})." \
        in chosen.notes


def test_the_real_model_is_recommended_only_when_it_can_be_had(skill, workspace):
    from engine.models.availability import Availability

    real = "HuggingFaceTB/SmolLM2-135M-Instruct"
    yes = Availability(real, True, "package", detail="on the package index")
    no = Availability(real, False, "none", detail="no source answered")
    assert model.recommended_model(skill, available=yes) == real
    assert model.recommended_model(skill, available=no) == "lf-tiny-qwen3"
    assert model.recommended_model(skill) == "lf-tiny-qwen3"  # not known yet
    assert model.fetch_source("auto", yes) == "package" and model.fetch_source("hf", yes) == "hf"
    here = model.check_availability(skill, probe_network=False)  # this machine only: nothing cached here
    assert here.model_id == real and not here.obtainable


def test_max_new_tokens_follow_the_training_answers(workspace, demo_model_dir):
    config = {"dataset": "identity", "dataset_dir": str(workspace / "data")}
    lengths = validate.answer_lengths(config, str(demo_model_dir))
    assert len(lengths) == 90 and 5 < max(lengths) < 80
    settings = {"max_new_tokens": 256, "min_new_tokens": 32}
    assert validate.max_new_tokens(lengths, settings) == max(32, -(-max(lengths) * 5 // 4))
    assert validate.max_new_tokens([1000], settings) == 256 and validate.max_new_tokens([], settings) == 256
    assert validate.max_new_tokens([3], settings) == 32


TRAIN = {"model_name_or_path": "/m/base", "output_dir": "/s/out", "template": "qwen", "trust_remote_code": False}


@pytest.mark.parametrize("method, adapter", [("lora", True), ("qlora", True), ("full", False), ("freeze", False)])
def test_infer_and_export_configs_follow_the_method(skill, method, adapter):
    state = new_state().replace(method=method, output_dir="/s/out")
    infer = validate.infer_config(state, TRAIN, max_tokens=48, sampling=skill.stage("validate").settings["sampling"])
    assert ("adapter_name_or_path" in infer) is adapter
    # the generation settings validation uses are written down, so `chat --prompts` elsewhere answers alike
    assert (infer["max_new_tokens"], infer["do_sample"]) == (48, False) and "temperature" in infer
    assert infer["model_name_or_path"] == ("/m/base" if adapter else "/s/out") and infer["template"] == "qwen"
    assert validate.check_infer_config(state, infer, "qwen") == []
    assert validate.check_infer_config(state, dict(infer, template="llama3"), "qwen")
    config = export.export_config(state, TRAIN, "/e/out", skill)
    assert ("adapter_name_or_path" in config) is adapter and config["export_device"] == "cpu"
    assert export.check_export(state, config, "qwen", TRAIN) == []
    assert export.default_dir(state, skill, TRAIN).endswith("base-merged" if adapter else "base-sft")


def test_export_refuses_a_quantized_base_and_a_used_folder(tmp_path, skill):
    import json

    base = tmp_path / "base-gptq"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "gptq"}}))
    state = new_state().replace(method="qlora", output_dir=str(tmp_path / "out"))
    problem = export.quantized_base_problem(state, dict(TRAIN, model_name_or_path=str(base)))
    assert problem and "gptq" in problem
    assert export.quantized_base_problem(state.replace(method="full"), dict(TRAIN, model_name_or_path=str(base))) \
        is None
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    assert not export.set_export_dir(state, str(tmp_path / "used")).ok
    assert not export.set_export_dir(state, str(tmp_path / "out")).ok
    assert export.set_export_dir(state, str(tmp_path / "new")).state.export_dir == str(tmp_path / "new")
    assert export.parse_line("progress 2/5 merging") == ("progress", (2, 5))
    # an earlier run's export is never suggested again: the next free name is
    (tmp_path / "models" / "base-merged").mkdir(parents=True)
    (tmp_path / "models" / "base-merged" / "w").write_text("x")
    import os

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert export.default_dir(state, skill, TRAIN).endswith("models/base-merged-2")
    finally:
        os.chdir(here)
    assert export.parse_line("exported to /x/y") == ("exported", "/x/y")


def test_held_out_rows_are_asked_with_their_answer_beside(tmp_path):
    import json

    from engine.inference.prompts import read_prompt_rows

    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}],
             "system": None, "source": f"identity_custom:{i}"} for i in range(5)]
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    held = validate.held_out_rows(tmp_path, 3)
    assert [row["source"] for row in held] == ["identity_custom:0", "identity_custom:1", "identity_custom:2"]
    assert validate.held_out_rows(tmp_path, 0) == []
    path = validate.write_prompts(tmp_path, ["Who are you?"], held)
    read = read_prompt_rows(path)
    assert [(c[-1]["content"], reference) for c, reference in read] == [
        ("Who are you?", None), ("q0", "a0"), ("q1", "a1"), ("q2", "a2")]
    assert "--completion" in validate.validate_command(tmp_path, completion=True)
    assert validate.mode({"scores": True}) == "scores" and validate.mode({"completion": True}) == "completion"


def test_a_measurement_belongs_to_the_config_it_measured():
    from engine.measurement import Measurement
    from assistant.wizard.stages import preflight

    config = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "cutoff_len": 512,
              "logging_steps": 5}
    found = Measurement(device="cuda:0", micro_batch=4, grad_accum=2, steps_timed=3, step_s=0.5, tokens_per_s=9e3,
                        startup_s=20.0, peak_bytes=30 * 2**30, limit_bytes=40 * 2**30, total_steps=100,
                        predicted_s=70.0, fits=True,
                        proposal={"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2},
                        reason="micro-batch 8 does not fit (CUDA out of memory); 4 fits")
    state = preflight.record(new_state(), config, found)
    assert state.fit["per_device_train_batch_size"] == 4 and "out of memory" in state.fit["reason"]
    fitted = dict(config, per_device_train_batch_size=4, gradient_accumulation_steps=2)
    assert preflight.current(state, config) is None  # the asked config is not what fits
    assert preflight.current(state, fitted).predicted_s == 70.0
    assert preflight.current(state, dict(fitted, logging_steps=1)) is not None  # logging changes no step
    assert preflight.current(state, dict(fitted, cutoff_len=1024)) is None
    lines = [line for _level, line in preflight.describe(found)]
    assert "4.0 GiB" not in lines[0] and "30.0 GiB of 40.0 GiB" in lines[0] and "1:10" in lines[1]


def test_a_stored_measurement_says_how_old_it_is():
    import time

    from engine.measurement import Measurement
    from assistant.wizard.stages import preflight

    now = time.time()
    found = Measurement(device="cpu", micro_batch=1, grad_accum=1, steps_timed=3, step_s=1.28, tokens_per_s=90.0,
                        startup_s=6.0, peak_bytes=2**30, limit_bytes=2**33, total_steps=20, predicted_s=32.0,
                        fits=True, measured_at=now - 3 * 3600 - 60)
    assert preflight.describe(found, now=now)[0][1].endswith("(measured 3 h ago)")  # --resume a day later
    found.measured_at = now - 20
    assert "measured" not in preflight.describe(found, now=now)[0][1]  # the one just taken: no age
    found.measured_at = None  # kept before the time was
    assert preflight.describe(found, now=now)[0][1].endswith("(when it was measured was not recorded)")
    from assistant.formatting import fmt_age

    assert [fmt_age(s) for s in (5, 90, 11000, 200000)] == ["5 s", "1 min", "3 h", "2 d"]


def test_the_summary_says_where_a_run_was_interrupted_and_counts_every_attempt(workspace):
    from assistant.wizard.stages.summary import summarize
    from engine.rundir import RunDir
    from engine.runstatus import Resumed

    state = new_state().replace(method="lora")
    run = RunDir(workspace / "lf_runs" / state.run_id)
    run.path.mkdir(parents=True)
    run.update_status(state="completed", step=40, total_steps=40, runtime_s=300.0, attempt_elapsed_s=120.0,
                      elapsed_s=300.0, resumes=[Resumed(from_step=20, reached_step=39, at=1000.0)])
    info = summarize(state, run.path)
    assert info.resumed == "after step 39, resumed from checkpoint 20: 19 step(s) trained again"
    assert info.runtime == "5:00 over 2 attempts (the last 2:00)"  # not the last attempt's 2:00 alone
    run.update_status(resumes=[Resumed(from_step=20, reached_step=39, at=1000.0),
                               Resumed(from_step=30, reached_step=None, at=2000.0)])
    info = summarize(state, run.path)
    assert info.resumed.endswith("; resumed from checkpoint 30 (how far the interrupted run had got is not known)")
    assert info.runtime.startswith("5:00 over 3 attempts")
    run.update_status(resumes=[])
    info = summarize(state, run.path)
    assert info.resumed is None and info.runtime == "5:00"  # in one go: nothing more to say
