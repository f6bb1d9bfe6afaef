"""report_to trackers on their own: TensorBoard event files are written and read back; missing packages named."""

import importlib.util
from pathlib import Path

import pytest

import engine
from engine.trackers import Trackers, missing_packages, open_trackers, requested

REPO = Path(__file__).resolve().parents[2]
HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None


def config(report_to):
    return engine.load_config({"dataset": "identity", "dataset_dir": str(REPO / "data"), "report_to": report_to})


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="tensorboard is not installed: pip install tensorboard")
def test_tensorboard_event_files_are_written_and_readable(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trackers = open_trackers(config("tensorboard"), tmp_path)
    for step, loss in enumerate([2.5, 2.0, 1.5], start=1):
        trackers.log(step, {"loss": loss, "learning_rate": 1e-4, "note": "text is skipped", "bad": float("nan")})
    trackers.close()
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    reader = EventAccumulator(str(tmp_path / "tensorboard"))
    reader.Reload()
    assert set(reader.Tags()["scalars"]) == {"train/loss", "train/learning_rate"}
    assert [(e.step, round(e.value, 4)) for e in reader.Scalars("train/loss")] == [(1, 2.5), (2, 2.0), (3, 1.5)]


def test_requested_and_missing_packages():
    assert requested("none") == [] and requested("tensorboard,wandb") == ["tensorboard", "wandb"]
    if importlib.util.find_spec("wandb") is None:
        assert missing_packages("wandb") == ["report_to: wandb needs `pip install wandb` (it is not installed)."]
        assert "wandb" not in requested("all")  # all: every installed tracker
    assert missing_packages("none") == []


def test_report_to_none_opens_nothing(tmp_path):
    trackers = open_trackers(config("none"), tmp_path)
    assert trackers.trackers == []
    trackers.log(1, {"loss": 1.0})
    trackers.close()
    assert list(tmp_path.iterdir()) == []


def test_a_failing_tracker_is_dropped_not_fatal():
    class Broken:
        closed = False

        def log(self, step, metrics):
            raise OSError("disk full")

        def close(self):
            Broken.closed = True

    notes = []
    trackers = Trackers([Broken()], on_error=notes.append)
    trackers.log(1, {"loss": 1.0})
    trackers.log(2, {"loss": 0.5})
    assert len(notes) == 1 and "disk full" in notes[0] and trackers.trackers == []


def test_wandb_logs_offline_and_says_so_unless_wandb_mode_says_otherwise(tmp_path, monkeypatch):
    """W&B itself is optional (not installed here): a stand-in records what wandb.init is asked for."""
    import sys
    import types

    calls = []
    fake = types.SimpleNamespace(init=lambda **kwargs: calls.append(kwargs) or types.SimpleNamespace(
        log=lambda *a, **k: None, finish=lambda: None))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    notes = []
    open_trackers(config("wandb"), tmp_path / "run", on_error=notes.append).close()
    assert calls[-1]["mode"] == "offline" and calls[-1]["project"] == "lf-assistant"
    assert notes and "offline" in notes[0] and "WANDB_MODE=online" in notes[0]
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_PROJECT", "mine")
    notes.clear()
    open_trackers(config("wandb"), tmp_path / "run", on_error=notes.append).close()
    assert (calls[-1]["mode"], calls[-1]["project"]) == ("online", "mine") and notes == []


def test_swanlab_logs_locally_and_says_so(tmp_path, monkeypatch):
    import sys
    import types

    calls = []
    fake = types.SimpleNamespace(init=lambda **kwargs: calls.append(kwargs), log=lambda *a, **k: None,
                                 finish=lambda: None)
    monkeypatch.setitem(sys.modules, "swanlab", fake)
    notes = []
    open_trackers(config("swanlab"), tmp_path / "run", on_error=notes.append).close()
    assert calls[-1]["mode"] == "local" and notes and "locally" in notes[0] and "swanlog" in notes[0]
