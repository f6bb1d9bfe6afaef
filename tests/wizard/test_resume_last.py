"""`--resume-last`: the newest wizard session that has not reached its summary (what a browser tab reopens)."""

import json

from assistant.wizard.resume import latest_unfinished
from assistant.wizard.state import new_state, save_state


def _session(runs, run_id: str, stage: str, saved_at: float) -> None:
    state = new_state().replace(run_id=run_id, stage=stage)
    path = save_state(state, runs)
    data = json.loads(path.read_text())
    data["updated_at"] = saved_at  # save_state stamps the time; the test orders the sessions itself
    path.write_text(json.dumps(data))


def test_newest_unfinished_session_is_chosen(tmp_path):
    runs = tmp_path / "lf_runs"
    assert latest_unfinished(runs) is None
    _session(runs, "wizard_run_20260101_000001", "data", 100.0)
    _session(runs, "a_lora_20260101_000002", "config", 300.0)
    _session(runs, "b_lora_20260101_000003", "summary", 500.0)  # finished: never reopened
    assert latest_unfinished(runs) == "a_lora_20260101_000002"
    (runs / "broken").mkdir()
    (runs / "broken" / "state.json").write_text("{not json")  # skipped, and left as it is
    (runs / "plain_run").mkdir()
    (runs / "plain_run" / "status.json").write_text('{"state": "completed"}')  # not a wizard session
    assert latest_unfinished(runs) == "a_lora_20260101_000002"
    assert (runs / "broken" / "state.json").read_text() == "{not json"


def test_resume_last_opens_a_new_session_when_none_is_unfinished(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from assistant.cli import tui
    from assistant.cli.main import app

    opened = {}
    monkeypatch.setattr(tui, "launch_tui", lambda **kwargs: opened.update(kwargs))
    runs = tmp_path / "lf_runs"
    assert CliRunner().invoke(app, ["--resume-last", "--runs-dir", str(runs)]).exit_code == 0
    assert opened["resume"] is None
    _session(runs, "a_lora_20260101_000002", "model", 300.0)
    assert CliRunner().invoke(app, ["--resume-last", "--runs-dir", str(runs)]).exit_code == 0
    assert opened["resume"] == "a_lora_20260101_000002"
