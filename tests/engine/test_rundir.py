"""The run directory contract: atomic status, append-only JSONL, dead processes reported as failed."""

import json
import subprocess
import sys

from engine.rundir import RunDir, find_complete_checkpoints, new_run_id, read_jsonl, CHECKPOINT_MARKER


def test_run_id_shape():
    from datetime import datetime

    assert new_run_id("/x/models/Qwen3-4B/", "lora", datetime(2026, 1, 2, 3, 4, 5)) == "qwen3-4b_lora_20260102_030405"


def test_status_replaced_atomically_and_merged(tmp_path):
    run = RunDir(tmp_path / "r")
    run.update_status(state="pending", model="m")
    run.update_status(step=3)
    status = json.loads((tmp_path / "r" / "status.json").read_text())
    assert status["state"] == "pending" and status["model"] == "m" and status["step"] == 3
    assert not list((tmp_path / "r").glob(".*.tmp"))


def test_half_written_jsonl_line_is_skipped(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"ste')
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]


def test_dead_running_process_is_reported_failed(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    run = RunDir(tmp_path / "r")
    run.update_status(state="running", pid=proc.pid)
    status = run.read_status()
    assert status["state"] == "failed" and "exited without recording" in status["exit_reason"]
    assert json.loads(run.status_path.read_text())["state"] == "failed"


def test_only_marked_checkpoints_count(tmp_path):
    for step, complete in ((5, True), (10, True), (15, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / CHECKPOINT_MARKER).write_text(str(step))
    assert [p.name for p in find_complete_checkpoints(tmp_path)] == ["checkpoint-5", "checkpoint-10"]
