"""Detached training: survives as its own process, a SIGKILL is reported as failed, and it resumes to completion."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import engine
from engine.rundir import find_complete_checkpoints

REPO = Path(__file__).resolve().parents[2]


def wait_for(predicate, timeout=120.0, poll=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return False


def test_killed_run_is_failed_then_resumes(demo_model_dir, tmp_path):
    config = engine.load_config({
        "model_name_or_path": str(demo_model_dir), "dataset": "identity", "dataset_dir": str(REPO / "data"),
        "template": "qwen", "cutoff_len": 64, "max_samples": 40, "per_device_train_batch_size": 2,
        "learning_rate": 1e-3, "max_steps": 400, "save_steps": 3, "save_total_limit": 2, "logging_steps": 1,
        "output_dir": str(tmp_path / "out")})
    handle = engine.train(config, detach=True, runs_dir=tmp_path / "runs")
    output_dir = Path(handle.status().output_dir)
    assert wait_for(lambda: len(find_complete_checkpoints(output_dir)) >= 1), handle.run.tail_log()
    os.kill(handle.process.pid, signal.SIGKILL)
    handle.process.wait()
    status = handle.status()
    assert status.state == "failed" and "exited without recording" in status.exit_reason
    assert len(find_complete_checkpoints(output_dir)) <= 2  # rotation keeps the newest two
    last = find_complete_checkpoints(output_dir)[-1]
    last_step = int(last.name.split("-")[1])

    # Make the resumed run short: same config, fewer total steps is not allowed (the schedule would change),
    # so resume and then stop it cleanly once it has gone past the checkpoint.
    assert status.eta_s is not None  # the killed attempt's, logged every step
    resumed = engine.resume(handle.run_id, runs_dir=tmp_path / "runs", detach=True)
    assert resumed.status().eta_s is None  # not counted down to 0:00 while the resumed process starts
    assert wait_for(lambda: any(e["event"] == "resumed" for e in resumed.run.read_events()))
    assert wait_for(lambda: (resumed.status().step or 0) > last_step + 2)
    engine.stop(handle.run_id, runs_dir=tmp_path / "runs")
    final = resumed.wait(timeout=120)
    assert final.state == "stopped"
    resumed_event = next(e for e in resumed.run.read_events() if e["event"] == "resumed")
    assert resumed_event["step"] == last_step
    steps = [m["step"] for m in resumed.metrics() if "loss" in m]
    assert steps == sorted(set(steps)) or steps[-1] > last_step  # metrics continue after the checkpoint


def test_detached_run_completes_and_cli_reports(demo_model_dir, tmp_path):
    runs = tmp_path / "runs"
    env = {**os.environ, "LFA_RUNS_DIR": str(runs)}
    cmd = [sys.executable, "-m", "assistant.cli.main", "train", str(REPO / "examples/demo/tiny_lora_sft.yaml"),
           f"model_name_or_path={demo_model_dir}", "max_steps=4", "logging_steps=2",
           f"output_dir={tmp_path / 'out'}", "--detach"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.split("started run ")[1].split()[0]
    run = engine.runs.get(run_id, runs)
    assert wait_for(lambda: run.read_status().state in ("completed", "failed"))
    assert run.read_status().state == "completed", run.tail_log()
    status = subprocess.run([sys.executable, "-m", "assistant.cli.main", "status", run_id], capture_output=True,
                            text=True, env=env, cwd=tmp_path)
    assert "completed" in status.stdout and "step 4/4" in status.stdout
    listing = subprocess.run([sys.executable, "-m", "assistant.cli.main", "runs"], capture_output=True, text=True,
                             env=env, cwd=tmp_path)
    assert run_id in listing.stdout


def test_engine_imports_without_textual_and_cli_without_torch():
    code = ("import sys, engine, engine.api, engine.rundir; "
            "assert 'textual' not in sys.modules and 'rich' not in sys.modules and 'torch' not in sys.modules; "
            "import assistant.cli.main; assert 'torch' not in sys.modules, 'cli imported torch'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
