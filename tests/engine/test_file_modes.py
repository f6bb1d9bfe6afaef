"""Files and folders the tool writes follow the umask (022 and 002), and a rewritten file keeps its mode."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from engine.data.registry import register_dataset
from engine.filemodes import current_umask, follow_umask
from engine.jsonio import write_text_atomic

REPO = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o002], ids=["umask022", "umask002"])
def umask(request):
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def test_atomic_writes_follow_the_umask_and_keep_an_existing_mode(tmp_path, umask):
    assert current_umask() == umask
    new = tmp_path / "new.json"
    write_text_atomic(new, "{}")
    assert mode(new) == 0o666 & ~umask
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    kept.chmod(0o640)
    write_text_atomic(kept, '{"a": 1}')
    assert mode(kept) == 0o640 and json.loads(kept.read_text()) == {"a": 1}


def test_registering_a_dataset_keeps_the_mode_of_dataset_info(tmp_path, umask):
    info = tmp_path / "dataset_info.json"
    info.write_text("{}")
    info.chmod(0o644)
    (tmp_path / "a.json").write_text('[{"instruction": "a", "output": "b"}]')
    register_dataset(tmp_path, "a", {"file_name": "a.json"})
    assert mode(info) == 0o644 and "a" in json.loads(info.read_text())
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "a.json").write_text("[]")
    register_dataset(fresh, "a", {"file_name": "a.json"})
    assert mode(fresh / "dataset_info.json") == 0o666 & ~umask


def test_run_folder_files_follow_the_umask(tmp_path, umask, demo_model_dir):
    import engine
    from engine.api import prepare_run

    config = engine.load_config({"model_name_or_path": str(demo_model_dir), "dataset": "identity",
                                 "dataset_dir": str(REPO / "data"), "template": "qwen",
                                 "output_dir": str(tmp_path / "out")})
    _resolved, run = prepare_run(config, runs_dir=tmp_path / "runs", run_id="modes")
    assert mode(run.path) == 0o777 & ~umask
    assert {mode(path) for path in run.path.iterdir()} == {0o666 & ~umask}


def test_trees_made_in_private_temp_folders_get_umask_modes(tmp_path, umask):
    import tempfile

    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    (folder / "sub").mkdir(mode=0o700)
    (folder / "sub" / "weights").write_bytes(b"x")
    (folder / "sub" / "weights").chmod(0o600)
    (folder / "run.sh").write_text("#!/bin/sh\n")
    (folder / "run.sh").chmod(0o700)
    follow_umask(folder)
    assert mode(folder) == mode(folder / "sub") == 0o777 & ~umask
    assert mode(folder / "sub" / "weights") == 0o666 & ~umask and mode(folder / "run.sh") == 0o777 & ~umask


def test_a_built_demo_model_is_readable_as_the_umask_says(tmp_path):
    from engine.models.demo import build_demo_model

    previous = os.umask(0o002)
    try:
        folder = build_demo_model("lf-tiny-qwen3", tmp_path / "models" / "demo")
    finally:
        os.umask(previous)
    assert mode(folder) == 0o775
    assert {mode(path) for path in folder.iterdir() if path.is_file()} == {0o664}
