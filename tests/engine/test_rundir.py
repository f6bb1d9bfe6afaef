"""The run directory contract: one typed status, written atomically, read without writing; strict JSONL."""

import json
import subprocess
import sys

import psutil
import pytest

from engine.rundir import CHECKPOINT_MARKER, RunDir, find_complete_checkpoints, new_run_id, read_jsonl
from engine.runstatus import ProcessIdentity, RunState, RunStatus


def test_run_id_shape():
    from datetime import datetime

    assert new_run_id("/x/models/Qwen3-4B/", "lora", datetime(2026, 1, 2, 3, 4, 5)) == "qwen3-4b_lora_20260102_030405"


def test_status_replaced_atomically_and_merged(tmp_path):
    run = RunDir(tmp_path / "r")
    run.update_status(state=RunState.PENDING, model="m")
    run.update_status(step=3)
    status = run.read_status()
    assert isinstance(status, RunStatus) and status.state == "pending" and status.model == "m" and status.step == 3
    assert json.loads(run.status_path.read_text())["state"] == "pending"
    assert not list((tmp_path / "r").glob(".*.tmp"))


def test_unknown_or_mistyped_fields_never_break_readers(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.status_path.write_text(json.dumps({"state": "bogus", "step": "many", "notes": "x", "extra": 1,
                                           "process": {"pid": "1"}, "loss": 1.5}))
    status = run.read_status()
    assert status.state == RunState.PENDING and status.step == 0 and status.notes == [] and status.process is None
    assert status.loss == 1.5


def test_half_written_jsonl_line_is_skipped(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"ste')
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]


def test_metrics_stay_strict_json(tmp_path):
    run = RunDir(tmp_path / "r")
    run.append_metric({"step": 1, "loss": float("nan"), "grad_norm": float("inf")})
    line = run.metrics_path.read_text().strip()
    assert "NaN" not in line and "Infinity" not in line
    assert json.loads(line) == {"step": 1, "loss": None, "grad_norm": None}


def test_relogged_steps_after_a_resume_count_once(tmp_path):
    run = RunDir(tmp_path / "r")
    for step in (1, 2, 3, 4, 2, 3, 4, 5):  # died after step 4, resumed from the checkpoint at step 1
        run.append_metric({"step": step, "loss": float(step)})
    run.append_metric({"step": 4, "eval_loss": 1.0})
    steps = [row["step"] for row in run.read_metrics() if "loss" in row]
    assert steps == [1, 2, 3, 4, 5]


def test_dead_running_process_is_reported_failed_without_writing(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = ProcessIdentity.of(proc.pid)
    proc.wait()
    run = RunDir(tmp_path / "r")
    run.update_status(state=RunState.RUNNING, process=identity)
    status = run.read_status()
    assert status.state == "failed" and "exited without recording" in status.exit_reason
    assert json.loads(run.status_path.read_text())["state"] == "running"  # readers never write


def test_a_reused_pid_is_not_the_trainer(tmp_path):
    """A live process with the recorded pid but another start time is someone else: the run is dead."""
    me = psutil.Process()
    impostor = ProcessIdentity(pid=me.pid, start_time=me.create_time() - 100.0, host=ProcessIdentity.current().host)
    assert impostor.alive() is False and ProcessIdentity.current().alive() is True
    run = RunDir(tmp_path / "r")
    run.update_status(state=RunState.RUNNING, process=impostor)
    assert run.read_status().state == "failed"


def test_pids_one_and_below_are_never_processes(tmp_path):
    host = ProcessIdentity.current().host
    for pid in (-1, 0, 1):
        assert ProcessIdentity.of(pid) is None
        assert ProcessIdentity(pid=pid, start_time=0.0, host=host).alive() is False
    assert ProcessIdentity(pid=4242, start_time=0.0, host="another-host").alive() is None


def test_only_marked_checkpoints_count(tmp_path):
    for step, complete in ((5, True), (10, True), (15, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / CHECKPOINT_MARKER).write_text(str(step))
    assert [p.name for p in find_complete_checkpoints(tmp_path)] == ["checkpoint-5", "checkpoint-10"]


def test_a_status_file_cannot_name_a_path_or_an_impossible_time(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.status_path.write_text(json.dumps({"state": "failed", "stage": "../../victim", "started_at": -99999999999,
                                           "finished_at": 1e300, "elapsed_s": -5.0, "step": -3, "loss": 2.5}))
    status = run.read_status()
    assert status.stage == "sft" and run.config_path == run.path / "sft.yaml"  # never ../../victim.yaml
    assert status.started_at is None and status.finished_at is None and status.elapsed_s is None
    assert status.step == 0 and status.loss == 2.5
    run.status_path.write_text(json.dumps({"state": "failed", "stage": "kto"}))
    assert run.read_status().stage == "kto"


def test_a_half_written_multibyte_character_or_a_foreign_line_is_skipped(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\n[1, 2]\n"text"\n{"step": 2, "note": "caf\xc3')
    assert read_jsonl(path) == [{"step": 1}]
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.status_path.write_text(json.dumps({"state": "failed"}))
    path.replace(run.metrics_path)
    assert run.summary()["final_loss"] is None  # the listing still reads the run


def test_a_metrics_line_too_deep_or_with_a_number_too_long_is_skipped(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.status_path.write_text(json.dumps({"state": "completed"}))
    deep = "[" * 100_000 + "]" * 100_000  # a RecursionError in `runs` once
    run.metrics_path.write_text('{"step": 1, "loss": 2.0}\n' + deep + '\n{"step": 2, "loss": ' + deep + "}\n"
                                '{"step": 3, "loss": ' + "9" * 5000 + "}\n")  # a ValueError (4300 digits) once
    assert read_jsonl(run.metrics_path) == [{"step": 1, "loss": 2.0}]
    assert run.summary()["final_loss"] == 2.0


def test_a_metric_that_is_not_a_number_is_left_out(tmp_path):
    """Charts and summaries do arithmetic on every metric: an edited metrics.jsonl cannot hand them text or lists."""
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.status_path.write_text(json.dumps({"state": "completed"}))
    run.metrics_path.write_text('{"step": 1, "loss": 2.0, "grad_norm": "big"}\n{"step": "2", "loss": 1.0}\n'
                                '{"step": true, "loss": 1.0}\n{"step": 3, "loss": [1.0], "epoch": {}}\n'
                                '{"step": 4, "loss": NaN, "eval_loss": Infinity}\n{"step": 5, "loss": "abc"}\n')
    rows = run.read_metrics()
    assert rows == [{"step": 1, "loss": 2.0}, {"step": 3}, {"step": 4, "loss": None, "eval_loss": None}, {"step": 5}]
    assert run.summary()["final_loss"] == 2.0


def test_status_text_lists_hold_text_and_final_metrics_numbers(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    nested = json.loads("[" * 500 + "]" * 500)
    run.status_path.write_text(json.dumps({"state": "completed", "notes": [nested], "command": ["lfa", 1],
                                           "final_metrics": {"a": nested}, "loss": 1.5}))
    status = run.read_status()
    assert status.notes == [] and status.command is None and status.final_metrics == {} and status.loss == 1.5
    run.status_path.write_text('{"state": "completed", "notes": ["ok"], "final_metrics": {"a": 0.5, "b": NaN}}')
    status = run.read_status()
    assert status.notes == ["ok"] and status.final_metrics == {}
    run.status_path.write_text(json.dumps({"state": "completed", "final_metrics": {"a": 0.5, "b": 2}}))
    assert run.read_status().final_metrics == {"a": 0.5, "b": 2}


def test_acting_on_a_run_takes_its_whole_id(tmp_path):
    from engine.errors import EngineError
    from engine.rundir import find_run

    for run_id in ("base1", "other"):
        run = RunDir(tmp_path / run_id)
        run.path.mkdir()
        run.status_path.write_text(json.dumps({"state": "failed"}))
    assert find_run("ba", tmp_path).run_id == "base1"  # reading (status) may abbreviate
    with pytest.raises(EngineError, match="base1 start.* whole id"):
        find_run("ba", tmp_path, prefix=False)
    assert find_run("base1", tmp_path, prefix=False).run_id == "base1"
    with pytest.raises(EngineError, match="No run"):
        find_run("x" * 300, tmp_path)  # a name too long for the file system is no run, not an OSError


def test_the_log_tail_shows_a_redrawn_progress_bar_once(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.log_path.write_bytes(b"start\r\nLoading:   0%|  | 0/24\rLoading:  70%|# | 17/24\rLoading: 100%|##| 24/24\n"
                             b"step 1/4 loss 2.0\nSaving:  50%|#\r")
    assert run.tail_log(10) == ["start", "Loading: 100%|##| 24/24", "step 1/4 loss 2.0", "Saving:  50%|#"]


@pytest.mark.parametrize("content, problem", [(b"junk", "is not valid JSON"), (b"[1, 2]", "does not hold a JSON object"),
                                              (b"[" * 100_000, "is not valid JSON"),
                                              (b"\xff\xfe", "cannot be read")])
def test_a_damaged_status_file_reads_as_damaged_never_as_pending(tmp_path, content, problem):
    """Missing: a prepared run (pending). Present but unreadable: failed, naming the file and the way on; resuming
    in the folder is refused with the same words (its output_dir and stage are unknown)."""
    import engine
    from engine.errors import EngineError

    run = RunDir(tmp_path / "runs" / "r1")
    run.path.mkdir(parents=True)
    assert run.read_status().state == RunState.PENDING
    (run.path / "dpo.yaml").write_text("stage: dpo\n")
    run.status_path.write_bytes(content)
    status = run.read_status()
    assert status.state == RunState.FAILED and status.stage == "dpo" and status.run_id == "r1"
    assert f"status.json {problem}" in status.exit_reason
    assert f"lf-assistant train {run.path / 'dpo.yaml'} resume_from_checkpoint=auto" in status.exit_reason
    assert [row["state"] for row in engine.runs.list(tmp_path / "runs")] == ["failed"]
    with pytest.raises(EngineError, match="cannot be resumed in its folder: .*status.json"):
        engine.resume("r1", runs_dir=tmp_path / "runs")


def test_a_runs_folder_that_is_a_file_is_named_a_file_and_left_alone(tmp_path):
    from pathlib import Path

    import engine
    from engine.api import prepare_run
    from engine.errors import EngineError
    from engine.rundir import find_run

    runs = tmp_path / "runs.txt"
    runs.write_text("my notes")
    repo = Path(__file__).resolve().parents[2]
    config = engine.load_config({"dataset": "identity", "dataset_dir": str(repo / "data")})
    with pytest.raises(EngineError, match="is a file, not a folder"):
        prepare_run(config, runs_dir=runs)
    with pytest.raises(EngineError, match="It is a file, not a runs folder"):
        find_run("some-run", runs)
    assert runs.read_text() == "my notes"
