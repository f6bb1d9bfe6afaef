"""The command hints print to run lf-assistant again must work in a fresh shell, venv activated or not."""

import os
import subprocess
import sys
from pathlib import Path

from assistant import command


def _script(folder: Path, name: str = "lf-assistant") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m assistant.cli.main "$@"\n')
    path.chmod(0o755)
    return path


def test_a_script_outside_path_is_named_by_its_absolute_path(tmp_path, monkeypatch):
    script = _script(tmp_path / "venv with space" / "bin")
    monkeypatch.setattr(sys, "argv", [str(script), "--resume", "x"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    hint = command.self_command()
    assert hint == f"'{script}'"
    # The hint runs in a shell that has neither the venv nor the checkout on its paths.
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = subprocess.run(f"{hint} --help", shell=True, env=env, capture_output=True, text=True)
    assert result.returncode == 0 and "Usage" in result.stdout, result.stderr


def test_the_bare_name_when_path_finds_this_very_script(tmp_path, monkeypatch):
    script = _script(tmp_path / "bin")
    monkeypatch.setattr(sys, "argv", ["lf-assistant"])
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}/usr/bin")
    assert command.self_command() == "lf-assistant"
    other = _script(tmp_path / "other")  # another installation first on PATH: the hint must not reach it
    monkeypatch.setattr(sys, "argv", [str(other)])
    assert command.self_command() == str(other)


def test_python_m_falls_back_to_the_interpreter(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/somewhere/assistant/cli/main.py"])
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))  # no console script beside it
    assert command.self_command() == f"{tmp_path / 'python3'} -m assistant.cli.main"

