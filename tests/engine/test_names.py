"""Names are names (run ids), and `stop` signals only a run's own training process."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from assistant.cli.main import app
from engine.errors import ConfigError
from engine.names import check_name
from engine.runstatus import ProcessIdentity

runner = CliRunner()


@pytest.mark.parametrize("name", ["qwen3-4b_lora_20250101_120000", "a", "A.b-c_9", "x" * 100])
def test_safe_names_pass_unchanged(name):
    assert check_name("run id", name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "a\\b", "-rf", ".hidden", "a..b", "a b", "a\nb",
                                  "$(id)", "`id`", "a;b", "é", "x" * 101, None, 7])
def test_unsafe_names_are_refused_with_the_rule(name):
    with pytest.raises(ConfigError, match="run id .* letters A-Z a-z, digits"):
        check_name("run id", name)


def write_run(folder, process: dict | None, **extra):
    folder.mkdir(parents=True)
    status = {"state": "running", "process": process, "run_id": folder.name, **extra}
    (folder / "status.json").write_text(json.dumps(status))


def test_stop_never_signals_a_process_that_is_not_the_runs_training(tmp_path):
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        me = ProcessIdentity.current()
        write_run(tmp_path / "runs" / "forged", None, pid=stranger.pid)  # an old-style pid alone proves nothing
        # A start time that is not the stranger's: a pid reused since the run ended.
        write_run(tmp_path / "runs" / "stale", {"pid": stranger.pid, "start_time": 1.0, "host": me.host})
        for run_id in ("forged", "stale", str(tmp_path / "runs" / "forged")):
            result = runner.invoke(app, ["stop", run_id, "--force", "--runs-dir", str(tmp_path / "runs")])
            assert result.exit_code == 2, result.output
            assert "Nothing was signalled" in result.output or "not running" in result.output, result.output
        time.sleep(0.2)
        assert stranger.poll() is None  # still running: never signalled
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.parametrize("command", ["status", "stop", "resume-train"])
def test_run_lookups_refuse_names_that_are_paths_or_code(command, tmp_path):
    result = runner.invoke(app, [command, "../../etc", "--runs-dir", str(tmp_path)])
    assert result.exit_code == 2 and "run id" in result.output and "Traceback" not in result.output
