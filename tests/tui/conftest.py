"""Fixtures for driving the real TUI with Pilot: a working folder holding the demo data and the demo model."""

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def workspace(tmp_path, monkeypatch, demo_model_dir) -> Path:
    """cwd with data/ (a copy) and models/lf-tiny-qwen3 (a copy of the session's demo build)."""
    shutil.copytree(REPO / "data", tmp_path / "data")
    shutil.copytree(demo_model_dir, tmp_path / "models" / "lf-tiny-qwen3")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LFA_LANG", "en")
    monkeypatch.delenv("LFA_RUNS_DIR", raising=False)
    return tmp_path


