"""The local-cache check: complete folders pass; shells, missing or truncated shards and partial downloads do not."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hubserver import make_tiny_repo

from engine.models.cache import check_model_dir, find_local_model, safetensors_problem


@pytest.fixture()
def sharded(tmp_path: Path) -> Path:
    return make_tiny_repo(tmp_path / "sharded", weight_bytes=2**20, shards=3)


def test_complete_single_file_model(tmp_path: Path) -> None:
    folder = make_tiny_repo(tmp_path / "m", weight_bytes=2**20)
    check = check_model_dir(folder)
    assert check.complete, check.problems
    assert check.size_bytes > 2**20
    assert check.expected_bytes is not None and abs(check.expected_bytes - (folder / "model.safetensors").stat().st_size) == 0
    assert check.summary().startswith("complete:")


def test_complete_sharded_model_uses_index_total(sharded: Path) -> None:
    check = check_model_dir(sharded)
    assert check.complete, check.problems
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert check.expected_bytes == index["metadata"]["total_size"]


def test_missing_shard_is_named(sharded: Path) -> None:
    (sharded / "model-00002-of-00003.safetensors").unlink()
    check = check_model_dir(sharded)
    assert not check.complete
    assert any("1 of 3 weight shards missing" in p and "model-00002-of-00003" in p for p in check.problems)


def test_truncated_shard_is_detected_from_its_header(sharded: Path) -> None:
    shard = sharded / "model-00003-of-00003.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    check = check_model_dir(sharded)
    assert not check.complete
    assert any("model-00003-of-00003.safetensors" in p and "truncated" in p for p in check.problems)
    assert safetensors_problem(shard)[1] == len(data)  # the header still tells the full size


def test_lfs_pointer_instead_of_weights(tmp_path: Path) -> None:
    folder = make_tiny_repo(tmp_path / "m", weight_bytes=2**16)
    (folder / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n")
    check = check_model_dir(folder)
    assert any("Git LFS pointer" in p for p in check.problems)


def test_incomplete_file_blocks_completeness(tmp_path: Path) -> None:
    folder = make_tiny_repo(tmp_path / "m", weight_bytes=2**16)
    partial = folder / ".cache" / "huggingface" / "download" / "x.incomplete"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\0" * 10)
    check = check_model_dir(folder)
    assert not check.complete
    assert any("unfinished download" in p for p in check.problems)


def test_empty_shell_reports_what_is_missing(tmp_path: Path) -> None:
    shell = tmp_path / "Qwen3-4B"
    shell.mkdir()
    (shell / "config.json").write_text('{"model_type": "qwen3"}')
    check = check_model_dir(shell)
    assert check.empty_shell and not check.complete
    text = check.summary()
    assert text.startswith("empty shell") and "no weight files" in text and "no tokenizer files" in text


def test_size_inconsistent_with_parameter_count(tmp_path: Path) -> None:
    folder = make_tiny_repo(tmp_path / "m", weight_bytes=2**20)  # 1 MiB of float32 = 0.26 M parameters
    assert check_model_dir(folder, params_b=0.0002).complete
    check = check_model_dir(folder, params_b=0.001)  # 1 M float32 parameters would need 4 MB
    assert not check.complete
    assert any("0.001B-parameter model needs about 4.0 MB" in p for p in check.problems)


def test_adapter_folder_is_not_a_base_model(tmp_path: Path) -> None:
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    (folder / "config.json").write_text("{}")
    assert any("LoRA adapter" in p for p in check_model_dir(folder).problems)


def _hf_snapshot(cache: Path, repo_id: str, source: Path, *, rev: str = "abc123") -> Path:
    """Lay a model out the way huggingface_hub does: blobs/ with content, snapshots/<rev>/ with links to them."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / rev
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for i, f in enumerate(sorted(source.iterdir())):
        blob = repo / "blobs" / f"blob{i}"
        shutil.copyfile(f, blob)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / f.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    return snapshot


def test_finds_model_in_hf_cache_honouring_hf_hub_cache(tmp_path: Path, monkeypatch) -> None:
    cache = tmp_path / "custom-hub-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    source = make_tiny_repo(tmp_path / "src", weight_bytes=2**16)
    snapshot = _hf_snapshot(cache, "acme/tiny", source)
    check = find_local_model("acme/tiny", models_dir=tmp_path / "models")
    assert check.complete and check.where == "hf_cache" and check.path == snapshot


def test_hf_cache_dangling_blob_and_partial_blob(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    source = make_tiny_repo(tmp_path / "src", weight_bytes=2**16)
    snapshot = _hf_snapshot(tmp_path / "hfhome" / "hub", "acme/tiny", source)
    weights = (snapshot / "model.safetensors").resolve()
    weights.rename(weights.with_name(weights.name + ".incomplete"))  # the blob is still being written
    check = find_local_model("acme/tiny", models_dir=tmp_path / "models")
    assert check.where == "hf_cache" and not check.complete
    assert any("model.safetensors is missing" in p for p in check.problems)
    assert any("unfinished download" in p for p in check.problems)


def test_finds_model_in_modelscope_cache_both_layouts(tmp_path: Path, monkeypatch) -> None:
    ms = tmp_path / "ms"
    monkeypatch.setenv("MODELSCOPE_CACHE", str(ms))
    # Older SDKs: models/<org>/<name> with dots written as ___
    legacy = make_tiny_repo(ms / "models" / "Qwen" / "Qwen2___5-0___5B-Instruct", weight_bytes=2**16)
    check = find_local_model("Qwen/Qwen2.5-0.5B-Instruct", models_dir=tmp_path / "models")
    assert check.where == "modelscope_cache" and check.path == legacy
    # Current layout: models/<org>--<name>/snapshots/<rev>; registry entry maps the HF id to the ModelScope one
    current = make_tiny_repo(ms / "models" / "LLM-Research--Llama-3.2-1B-Instruct" / "snapshots" / "master",
                             weight_bytes=2**16)
    check = find_local_model("meta-llama/Llama-3.2-1B-Instruct", models_dir=tmp_path / "models")
    assert check.where == "modelscope_cache" and check.path == current
    # The registry's size check applies: 64 KB cannot be a 1.24B model
    assert not check.complete and any("1.24B-parameter" in p for p in check.problems)


def test_models_dir_and_not_found(tmp_path: Path) -> None:
    models = tmp_path / "models"
    make_tiny_repo(models / "tiny", weight_bytes=2**16)
    found = find_local_model("acme/tiny", models_dir=models)
    assert found.complete and found.where == "models_dir" and found.path == models / "tiny"
    missing = find_local_model("acme/absent", models_dir=models)
    assert missing.path is None and not missing.complete
    assert models / "absent" in missing.searched and "not found locally" in missing.summary()
    assert find_local_model("./no/such/folder").problems == ["./no/such/folder does not exist"]


def test_a_file_given_as_the_model_is_named_a_file(tmp_path: Path) -> None:
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF")
    found = find_local_model(str(weights))
    assert found.path is None and not found.complete
    assert found.summary() == f"{weights} is a file, not a model folder (a folder with config.json and the weights)"
    assert found.problem_messages[0].code == "models.cache.is_a_file"


def test_prefers_a_complete_copy_over_a_partial_one(tmp_path: Path, monkeypatch) -> None:
    models = tmp_path / "models"
    shell = models / "tiny"
    shell.mkdir(parents=True)
    (shell / "config.json").write_text("{}")
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    _hf_snapshot(cache, "acme/tiny", make_tiny_repo(tmp_path / "src", weight_bytes=2**16))
    check = find_local_model("acme/tiny", models_dir=models)
    assert check.complete and check.where == "hf_cache"


def test_hf_cache_repo_with_only_partial_blobs_is_an_empty_shell(tmp_path: Path, monkeypatch) -> None:
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    blobs = cache / "models--acme--tiny" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "0f3a.incomplete").write_bytes(b"\0" * 1000)  # killed before the first file finished
    check = find_local_model("acme/tiny", models_dir=tmp_path / "models")
    assert check.where == "hf_cache" and check.empty_shell
    assert any("unfinished download" in p for p in check.problems)


def test_cli_check_reports_an_empty_shell(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from assistant.cli.models import app

    shell = tmp_path / "Qwen3-0.6B"
    shell.mkdir()
    (shell / "config.json").write_text('{"model_type": "qwen3"}')
    result = CliRunner().invoke(app, ["check", str(shell)])
    assert result.exit_code == 1
    assert "empty shell" in result.output and "no weight files" in result.output
    assert "template qwen3" in result.output and "rule: registry" in result.output
    complete = make_tiny_repo(tmp_path / "tiny", weight_bytes=2**16)
    result = CliRunner().invoke(app, ["check", str(complete)])
    assert result.exit_code == 0 and "complete:" in result.output and "rule: config.json" in result.output


@pytest.mark.parametrize("model", ["b" * 300, "a/" + "b" * 300])
def test_a_name_too_long_for_the_file_system_is_not_found_not_a_crash(tmp_path: Path, model: str) -> None:
    found = find_local_model(model, models_dir=tmp_path / "models")
    assert found.path is None and not found.complete and "not found locally" in found.summary()


def test_an_unknown_model_is_quoted_short_however_long_it_was_typed() -> None:
    from engine.errors import ModelError
    from engine.models.registry import get_model
    from engine.models.resolve import resolve_model

    with pytest.raises(ModelError) as refused:
        get_model("a" * 100_000)
    assert len(str(refused.value)) < 1000
    with pytest.raises(ModelError) as refused:  # 250: still a file name the file system takes
        resolve_model("a" * 250)
    assert "a" * 200 not in str(refused.value)
