"""Nothing lost, nothing run: one live writer per folder, verified processes, safe checkpoints, loud divergence."""

import json
import os
import pickle
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import engine
from engine.errors import EngineError
from engine.ownership import LOCK_NAME, FolderInUse, acquire, is_held
from engine.rundir import RunDir, find_complete_checkpoints

REPO = Path(__file__).resolve().parents[2]


def config(model_dir, out: Path, **over):
    values = {"model_name_or_path": str(model_dir), "dataset": "identity", "dataset_dir": str(REPO / "data"),
              "template": "qwen", "cutoff_len": 64, "max_samples": 16, "per_device_train_batch_size": 2,
              "learning_rate": 5e-3, "max_steps": 4, "logging_steps": 1, "save_steps": 2, "plot_loss": False,
              "output_dir": str(out)}
    values.update(over)
    return engine.load_config(values)


def wait_for(predicate, timeout=120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_a_lock_names_its_live_owner_and_dies_with_it(tmp_path):
    lock = acquire(tmp_path / "f", run_id="first", what="output_dir")
    with pytest.raises(FolderInUse, match="run first"):
        acquire(tmp_path / "f", run_id="second", what="output_dir")
    assert is_held(tmp_path / "f")
    lock.release()
    assert not is_held(tmp_path / "f")
    acquire(tmp_path / "f", run_id="second", what="output_dir").release()
    # A holder that dies (kill -9) never leaves a stale lock: the kernel drops it.
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); from engine.ownership import acquire; "
            "acquire(sys.argv[2], run_id='doomed', what='output_dir'); print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(REPO), str(tmp_path / "g")], stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline().strip() == "held" and is_held(tmp_path / "g")
    child.kill()
    child.wait()
    assert not is_held(tmp_path / "g")


@pytest.mark.parametrize("junk", ["[" * 100000 + "]" * 100000, '{"run_id": ["x"], "pid": "1", "since": "now"}',
                                  '{"run_id": "../../x; rm -rf", "pid": true, "host": 5}', "[1]", "\u0000"],
                         ids=["deep", "types", "odd", "list", "nul"])
def test_a_junk_lock_file_is_never_repeated_as_its_owner(tmp_path, junk):
    lock = acquire(tmp_path / "f", run_id="first", what="output_dir")
    (tmp_path / "f" / LOCK_NAME).write_text(junk)
    with pytest.raises(FolderInUse) as refused:
        acquire(tmp_path / "f", run_id="second", what="output_dir")
    lock.release()
    assert "is in use by run an unknown run." in str(refused.value)
    assert "`lf-assistant stop RUN_ID`" in str(refused.value)


def test_two_trainings_never_share_an_output_dir(demo_model_dir, tmp_path):
    out = tmp_path / "out"
    first = engine.train(config(demo_model_dir, out, max_steps=400, save_steps=1000), detach=True,
                         runs_dir=tmp_path / "runs", run_id="first")
    try:
        assert wait_for(lambda: first.status().state == "running")
        for overwrite in (False, True):
            with pytest.raises(FolderInUse, match="first"):
                engine.train(config(demo_model_dir, out, overwrite_output_dir=overwrite), runs_dir=tmp_path / "runs")
        # A second resume of the live run is refused too, and its status is left alone.
        with pytest.raises(FolderInUse):
            engine.resume("first", runs_dir=tmp_path / "runs")
        assert first.status().state == "running"
    finally:
        engine.stop("first", runs_dir=tmp_path / "runs")
    assert first.wait(timeout=120).state == "stopped"
    first.process.wait(timeout=60)  # the locks go with the process, a moment after its last status write
    # Once it has ended, overwrite_output_dir replaces its results (the folder is ours) ...
    second = engine.train(config(demo_model_dir, out, overwrite_output_dir=True), runs_dir=tmp_path / "runs")
    assert second.status().state == "completed"
    assert [p.name for p in find_complete_checkpoints(out)] == ["checkpoint-2", "checkpoint-4"]
    # ... and the first run can no longer resume from checkpoints another run wrote.
    with pytest.raises(EngineError, match="now holds the results of run"):
        engine.resume("first", runs_dir=tmp_path / "runs")


def test_folders_that_are_not_ours_are_never_written_or_cleared(demo_model_dir, tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me")
    for overwrite in (False, True):
        problems = engine.validate(config(demo_model_dir, user, overwrite_output_dir=overwrite))
        assert any("did not write" in p for p in problems), problems
    assert (user / "notes.txt").read_text() == "keep me"
    # The model folder itself as output_dir (full fine-tuning would overwrite the base weights).
    before = (demo_model_dir / "model.safetensors").stat().st_mtime_ns
    problems = engine.validate(config(demo_model_dir, demo_model_dir, finetuning_type="full",
                                      overwrite_output_dir=True))
    assert problems and (demo_model_dir / "model.safetensors").stat().st_mtime_ns == before


def test_overwrite_removes_only_what_the_earlier_run_wrote(demo_model_dir, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    engine.train(config(demo_model_dir, out, max_steps=2), runs_dir=runs, run_id="first")
    written = sorted(p.name for p in out.iterdir())
    assert "checkpoint-2" in written and "adapter_model.safetensors" in written
    (out / "my_notes.txt").write_text("keep me")
    (out / "my_eval").mkdir()
    again = config(demo_model_dir, out, max_steps=2, overwrite_output_dir=True)
    problems = engine.validate(again)  # train --check sees it, before anything loads
    assert any("did not write (my_eval, my_notes.txt)" in p for p in problems), problems
    with pytest.raises(EngineError, match="my_eval, my_notes.txt"):
        engine.train(again, runs_dir=runs, run_id="second")
    assert sorted(p.name for p in out.iterdir()) == sorted(written + ["my_eval", "my_notes.txt"])
    # Moved out, the overwrite goes ahead: everything first wrote is replaced by the second run's results.
    (out / "my_notes.txt").unlink()
    (out / "my_eval").rmdir()
    before = (out / "adapter_model.safetensors").stat().st_mtime_ns
    assert engine.train(again, runs_dir=runs, run_id="second").status().state == "completed"
    assert (out / "adapter_model.safetensors").stat().st_mtime_ns != before
    assert json.loads((out / ".lfa-output.json").read_text())["run_id"] == "second"


def test_a_start_that_never_trains_leaves_the_earlier_results(demo_model_dir, tmp_path, monkeypatch):
    """overwrite_output_dir clears an earlier run's results only when training starts: a start that is only
    prepared for another machine (launch --print), refused, or fails while loading changes nothing."""
    from engine.api import prepare_run
    from engine.training.session import Session

    runs, out = tmp_path / "runs", tmp_path / "out"
    engine.train(config(demo_model_dir, out, max_steps=2), runs_dir=runs, run_id="first")
    written = sorted(p.name for p in out.iterdir())
    # launch --print prepares a run folder and starts nothing
    prepare_run(config(demo_model_dir, out, overwrite_output_dir=True), runs_dir=runs, run_id="printed")
    with pytest.raises(EngineError, match="learning_rate"):
        engine.train(config(demo_model_dir, out, overwrite_output_dir=True, learning_rate=-1), runs_dir=runs)

    def fails_to_load(*args, **kwargs):
        raise EngineError("the model could not be loaded")

    monkeypatch.setattr(Session, "open", fails_to_load)
    with pytest.raises(EngineError, match="could not be loaded"):
        engine.train(config(demo_model_dir, out, overwrite_output_dir=True), runs_dir=runs, run_id="bad")
    assert sorted(p.name for p in out.iterdir()) == written
    assert json.loads((out / ".lfa-output.json").read_text())["run_id"] == "first"
    assert [p.name for p in find_complete_checkpoints(out)] == ["checkpoint-2"]


def test_run_ids_are_names_not_paths(demo_model_dir, tmp_path):
    for bad in ("../../x", "", "a/b", ".hidden", "x" * 101, "$(touch y)"):
        with pytest.raises(EngineError, match="run id"):
            engine.train(config(demo_model_dir, tmp_path / "o"), runs_dir=tmp_path / "runs", run_id=bad)
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob("**/y"))


def test_problems_with_the_output_folder_are_found_before_the_model_loads(demo_model_dir, tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(EngineError, match="is a file"):
        engine.train(config(demo_model_dir, afile), runs_dir=tmp_path / "runs")
    with pytest.raises(EngineError, match="Cannot write"):
        engine.train(config(demo_model_dir, afile / "sub"), runs_dir=tmp_path / "runs")
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(EngineError, match="free, but the result and one checkpoint need"):
        engine.train(config(demo_model_dir, tmp_path / "full", finetuning_type="full"), runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no half-made run left


def test_a_failed_checkpoint_write_keeps_the_last_complete_one(demo_model_dir, tmp_path, monkeypatch):
    import torch

    real_save = torch.save
    calls = {"n": 0}

    def failing_save(obj, path, *args, **kwargs):
        if "checkpoint-4" in str(path):
            raise OSError(28, "No space left on device")
        calls["n"] += 1
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", failing_save)
    out = tmp_path / "out"
    with pytest.raises(EngineError, match="No space left"):
        engine.train(config(demo_model_dir, out, max_steps=6), runs_dir=tmp_path / "runs", run_id="full-disk")
    status = RunDir(tmp_path / "runs" / "full-disk").read_status()
    assert status.state == "failed" and "checkpoint-2" in status.exit_reason
    assert [p.name for p in find_complete_checkpoints(out)] == ["checkpoint-2"]
    assert not list(out.glob(".checkpoint-*")) and calls["n"] == 3


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {Path(os.environ['LFA_TEST_MARKER'])}",))


def test_a_checkpoint_that_would_run_code_is_refused(demo_model_dir, tmp_path, monkeypatch):
    out = tmp_path / "out"
    first = engine.train(config(demo_model_dir, out), runs_dir=tmp_path / "runs", run_id="victim")
    assert first.status().state == "completed"
    marker = tmp_path / "pwned"
    monkeypatch.setenv("LFA_TEST_MARKER", str(marker))
    with open(out / "checkpoint-4" / "optimizer.pt", "wb") as handle:
        pickle.dump(_Payload(), handle)
    with pytest.raises(EngineError, match="optimizer.pt holds objects"):
        engine.train(config(demo_model_dir, out, max_steps=6, resume_from_checkpoint="auto"),
                     runs_dir=tmp_path / "runs")
    assert not marker.exists()


def test_a_damaged_checkpoint_is_named_and_an_earlier_one_resumes(demo_model_dir, tmp_path):
    import torch

    runs, out = tmp_path / "runs", tmp_path / "out"
    handle = engine.train(config(demo_model_dir, out, max_steps=6), runs_dir=runs, run_id="pk")
    handle.run.update_status(state="failed")  # as a run killed after its checkpoint-6 would read
    newest = out / "checkpoint-6"
    good = (newest / "rng_state.pt").read_bytes()
    for name, wrong in (("rng_state.pt", {"a": 1}), ("optimizer.pt", {"state": {}, "param_groups": []}),
                        ("scheduler.pt", [1, 2])):
        saved = (newest / name).read_bytes()
        torch.save(wrong, newest / name)  # well-formed tensors and numbers, not this run's state
        with pytest.raises(EngineError, match=f"{name} cannot be used .* complete ones: checkpoint-2, checkpoint-4"):
            engine.resume("pk", runs_dir=runs, detach=False)
        (newest / name).write_bytes(saved)
    for text, said in ((json.dumps({"step": -5, "epoch": 0, "group": 99}), "no step"),
                       ("[" * 100_000 + "]" * 100_000, r"not valid JSON: nested more than 64 levels deep"),
                       ('{"step": ' + "9" * 5000 + "}", r"not valid JSON: a number is too long")):  # tracebacks once
        (newest / "trainer_state.json").write_text(text)
        with pytest.raises(EngineError, match=rf"trainer_state.json cannot be used \({said}.*complete ones"):
            engine.resume("pk", runs_dir=runs, detach=False)
    assert (newest / "rng_state.pt").read_bytes() == good
    for outside in ("../x", str(newest), "checkpoint-5"):  # only a complete checkpoint of this output_dir
        with pytest.raises(EngineError, match="not a complete checkpoint"):
            engine.resume("pk", runs_dir=runs, detach=False, checkpoint=outside)
    resumed = engine.resume("pk", runs_dir=runs, detach=False, checkpoint="4")
    assert resumed.status().state == "completed" and resumed.status().step == 6
    assert resumed.status().epoch is not None
    notes = resumed.status().notes
    assert len(notes) == len(set(notes))  # a resumed run does not list its notes again
    events = [e for e in handle.run.read_events() if e.get("event") == "resumed"]
    assert events and events[-1]["checkpoint"].endswith("checkpoint-4")


def test_a_run_that_was_only_prepared_is_not_resumed(demo_model_dir, tmp_path):
    from engine.api import prepare_run

    prepare_run(config(demo_model_dir, tmp_path / "out"), runs_dir=tmp_path / "runs", run_id="printed")
    refusals = []
    for act in (lambda: engine.resume("printed", runs_dir=tmp_path / "runs", detach=False),
                lambda: engine.stop("printed", runs_dir=tmp_path / "runs")):
        with pytest.raises(EngineError, match="prepared but never started") as refused:
            act()
        refusals.append(str(refused.value))
    # the command resume names trains in the prepared folder; no second run folder appears
    command = shlex.split(refusals[0].rsplit("`", 2)[-2])
    assert command[:2] == ["lf-assistant", "train"] and command[command.index("--run-id") + 1] == "printed"
    handle = engine.train(command[2], run_id="printed", runs_dir=command[command.index("--runs-dir") + 1])
    assert handle.run.run_id == "printed" and handle.status().state == "completed"
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["printed"]


def test_a_diverging_run_fails_loudly_and_saves_nothing(demo_model_dir, tmp_path, monkeypatch):
    """From step 3 on the loss turns NaN (what an exploding run does): the run fails, naming the step, the weights
    never take a non-finite update, and no result is written."""
    import torch
    from safetensors.torch import load_file

    from engine.recipes import sft

    real_loss, calls = sft.causal_lm_loss_sum, {"n": 0}

    def exploding(model, batch, **kwargs):
        loss, tokens = real_loss(model, batch, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] >= 5 else loss), tokens  # 2 micro-batches a step

    monkeypatch.setattr(sft, "causal_lm_loss_sum", exploding)
    out = tmp_path / "out"
    with pytest.raises(EngineError, match="diverged at step 3"):
        engine.train(config(demo_model_dir, out, max_steps=8, save_steps=1, gradient_accumulation_steps=2),
                     runs_dir=tmp_path / "runs", run_id="boom")
    run = RunDir(tmp_path / "runs" / "boom")
    status = run.read_status()
    assert status.state == "failed" and "diverged at step 3" in status.exit_reason
    assert "checkpoint-2" in status.exit_reason  # where to go back to
    assert not (out / "adapter_model.safetensors").exists()  # no non-finite result
    for line in run.metrics_path.read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"non-strict JSON constant {name}"))
    assert [p.name for p in find_complete_checkpoints(out)] == ["checkpoint-1", "checkpoint-2"]
    for checkpoint in find_complete_checkpoints(out):
        assert all(torch.isfinite(t).all() for t in load_file(checkpoint / "adapter_model.safetensors").values())


def test_stop_asks_through_the_run_folder_and_never_signals_a_stranger(demo_model_dir, tmp_path):
    handle = engine.train(config(demo_model_dir, tmp_path / "out", max_steps=400, save_steps=1000), detach=True,
                          runs_dir=tmp_path / "runs", run_id="long")
    assert wait_for(lambda: handle.status().state == "running" and handle.status().step >= 1)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # Forge the status so it names the stranger's pid with another start time (a reused pid).
        from engine.runstatus import ProcessIdentity

        real = handle.status().process
        forged = ProcessIdentity(pid=stranger.pid, start_time=real.start_time, host=real.host)
        # The trainer rewrites status.json every step: pause it while the test (a third writer, which never exists
        # outside tests) forges and restores the record, so neither write is lost to the other.
        os.kill(real.pid, signal.SIGSTOP)
        try:
            handle.run.update_status(process=forged)
            assert handle.status().state == "failed"  # the recorded process is gone as far as readers can tell
            with pytest.raises(EngineError, match="not running"):
                engine.stop("long", runs_dir=tmp_path / "runs", force=True)
            assert stranger.poll() is None
            # Its true start time too (anyone can read that): still not the trainer, which holds the run's lock.
            handle.run.update_status(process=ProcessIdentity.of(stranger.pid))
            assert handle.status().state == "running"
            with pytest.raises(EngineError, match="does not hold the run folder's lock"):
                engine.stop("long", runs_dir=tmp_path / "runs", force=True)
            assert stranger.poll() is None
            handle.run.update_status(process=real)
        finally:
            os.kill(real.pid, signal.SIGCONT)
        engine.stop("long", runs_dir=tmp_path / "runs")
        status = handle.wait(timeout=120)
        assert status.state == "stopped" and status.last_checkpoint
        assert not handle.run.stop_request_path.exists()
    finally:
        stranger.kill()


def test_force_stop_signals_the_verified_trainer(demo_model_dir, tmp_path):
    handle = engine.train(config(demo_model_dir, tmp_path / "out", max_steps=400, save_steps=1000), detach=True,
                          runs_dir=tmp_path / "runs", run_id="forced")
    assert wait_for(lambda: handle.status().state == "running" and handle.status().step >= 1)
    engine.stop("forced", runs_dir=tmp_path / "runs", force=True)
    assert handle.process.wait(timeout=120) is not None
    assert handle.status().state in ("stopped", "failed") and handle.status().step < 400


def test_a_run_refused_before_training_leaves_no_folders(demo_model_dir, tmp_path, monkeypatch):
    """The pre-flight refuses after the locks are taken: neither the run folder nor the new output_dir stays."""
    import engine.preflight
    from engine.api import prepare_run

    def refuse(*args, **kwargs):
        raise EngineError("not enough disk for the checkpoints")

    monkeypatch.setattr(engine.preflight, "check_before_training", refuse)
    out = tmp_path / "saves" / "new"
    with pytest.raises(EngineError, match="not enough disk"):
        prepare_run(config(demo_model_dir, out), runs_dir=tmp_path / "runs", run_id="refused")
    assert not out.exists() and not (tmp_path / "runs" / "refused").exists()
    out.mkdir()  # a folder that was there before stays, with at most our (hidden) lock file in it
    with pytest.raises(EngineError, match="not enough disk"):
        prepare_run(config(demo_model_dir, out), runs_dir=tmp_path / "runs", run_id="refused")
    assert out.is_dir() and {p.name for p in out.iterdir()} <= {LOCK_NAME}


def test_a_checkpoint_resumes_only_onto_its_own_samples_and_batches(demo_model_dir, tmp_path):
    """Its data position means something only for the same samples in the same steps: other data, or the same data
    in other batches, is refused before a step trains; a changed step count is named and goes on."""
    runs, out = tmp_path / "runs", tmp_path / "out"
    assert engine.train(config(demo_model_dir, out), runs_dir=runs).status().state == "completed"
    for change, message in (({"max_samples": 12}, r"saved while training on other samples \(16 then, 12 now\)"),
                            ({"cutoff_len": 32}, "saved while training on other samples"),
                            ({"per_device_train_batch_size": 4}, "grouped the same samples into other steps"),
                            ({"seed": 7}, "grouped the same samples into other steps"),
                            ({"batching_strategy": "bucketed"}, "grouped the same samples into other steps")):
        with pytest.raises(EngineError, match=message):
            engine.train(config(demo_model_dir, out, max_steps=6, resume_from_checkpoint="auto", **change),
                         runs_dir=runs)
    resumed = engine.train(config(demo_model_dir, out, max_steps=6, resume_from_checkpoint="auto"), runs_dir=runs)
    assert resumed.status().state == "completed" and resumed.status().step == 6
    assert "now has 6 steps where checkpoint-4 was saved in a run of 4" in resumed.run.log_path.read_text()


def test_a_run_with_a_dated_tool_prompt_resumes_the_next_day(demo_llama_dir, tmp_path, monkeypatch):
    """Llama 3's tool prompt states today's date, so the same rows encode to other tokens after midnight: the
    resume compares the rows and the settings that encode them, not the tokens, and goes on."""
    import engine.data.tools as tools

    data = tmp_path / "data"
    data.mkdir()
    call = json.dumps({"name": "weather", "arguments": {"city": "Paris"}})
    rows = [{"conversations": [{"from": "human", "value": f"weather {i}?"}, {"from": "function_call", "value": call},
                               {"from": "observation", "value": "sunny"}, {"from": "gpt", "value": f"Sunny {i}."}],
             "tools": json.dumps([{"name": "weather", "description": "w", "parameters": {}}])} for i in range(8)]
    (data / "calls.json").write_text(json.dumps(rows))
    (data / "dataset_info.json").write_text(json.dumps({"calls": {
        "file_name": "calls.json", "formatting": "sharegpt", "columns": {"messages": "conversations", "tools": "tools"}}}))
    runs, out = tmp_path / "runs", tmp_path / "out"
    over = {"dataset": "calls", "dataset_dir": str(data), "template": "llama3", "cutoff_len": 256}
    monkeypatch.setattr(tools, "today", lambda: "01 Dec 2026")
    assert engine.train(config(demo_llama_dir, out, **over), runs_dir=runs).status().state == "completed"
    monkeypatch.setattr(tools, "today", lambda: "02 Dec 2026")
    resumed = engine.train(config(demo_llama_dir, out, max_steps=6, resume_from_checkpoint="auto", **over),
                           runs_dir=runs)
    assert resumed.status().state == "completed" and resumed.status().step == 6
    with pytest.raises(EngineError, match="saved while training on other samples"):  # a setting that encodes
        engine.train(config(demo_llama_dir, out, max_steps=8, resume_from_checkpoint="auto", **over,
                            train_on_prompt=True), runs_dir=runs)


def test_a_checkpoint_asked_of_a_run_that_saved_none_is_refused_with_what_to_do(demo_model_dir, tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    handle = engine.train(config(demo_model_dir, out, max_steps=2, save_steps=100), runs_dir=runs, run_id="pk")
    assert not list(out.glob("checkpoint-*"))
    handle.run.update_status(state="failed")  # as a run killed before its first checkpoint would read
    with pytest.raises(EngineError) as refused:
        engine.resume("pk", runs_dir=runs, detach=False, checkpoint="1")
    assert "holds no complete checkpoint, so there is nothing to resume from" in str(refused.value)
    assert "one of" not in str(refused.value)
