"""Fixtures for the headless wizard: a working folder with the project's demo data, fake device reports."""

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def workspace(tmp_path, monkeypatch) -> Path:
    """A fresh working folder (cwd) holding a copy of data/ — the project's files are never touched."""
    shutil.copytree(REPO / "data", tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LFA_RUNS_DIR", raising=False)
    return tmp_path


@pytest.fixture()
def skill():
    from assistant.wizard.skill import load_skill

    return load_skill("sft")


@pytest.fixture()
def fake_devices():
    """(gpu, report) builders for detector output, so busy and free cards can be simulated."""
    return gpu, report


def gpu(index, used_mib=100, total_mib=81920, util=0.0, processes=()):
    from engine.devices import GPU

    return GPU(index=index, name="H100", vendor="nvidia", memory_used_mib=used_mib, memory_total_mib=total_mib,
               utilization_pct=util, processes=list(processes))


def report(*gpus, platform="cuda"):
    from engine.devices import DeviceReport

    return DeviceReport(platform if gpus else "cpu", list(gpus), "nvidia-smi" if gpus else "none")
