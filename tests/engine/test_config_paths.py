"""Output folders never overlap the inputs: the model, adapter and dataset folders, for train and export."""

import hashlib
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import engine
from assistant.cli.main import app
from engine.config.paths import dataset_dir_of, output_overlap_problems
from engine.errors import ConfigError
from engine.export import load_export_config

REPO = Path(__file__).resolve().parents[2]


def test_relations(tmp_path):
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    sources = [("model_name_or_path", model), ("adapter_name_or_path", "org/hub-id")]
    assert "is the model_name_or_path folder" in output_overlap_problems("output_dir", model, sources)[0]
    assert "is inside" in output_overlap_problems("output_dir", model / "ckpt", sources)[0]
    assert "contains" in output_overlap_problems("output_dir", tmp_path, sources)[0]
    assert output_overlap_problems("output_dir", tmp_path / "saves" / "run", sources) == []
    assert output_overlap_problems("output_dir", None, sources) == []


@pytest.fixture()
def local_model(tmp_path, demo_model_dir):
    """A copy of the demo model in a folder of its own (the test may point outputs at it)."""
    copy = tmp_path / "base"
    shutil.copytree(demo_model_dir, copy)
    return copy


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_train_refuses_output_over_the_model(local_model, where):
    out = {"same": local_model, "inside": local_model / "out", "around": local_model.parent}[where]
    cfg = engine.load_config({"dataset": "identity", "dataset_dir": str(REPO / "data"), "finetuning_type": "full",
                              "model_name_or_path": str(local_model), "output_dir": str(out),
                              "overwrite_output_dir": True})
    assert any("model_name_or_path folder" in p and "overwrite it" in p for p in engine.validate(cfg))


def test_train_refuses_output_over_the_dataset_folder(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(REPO / "data", data)
    cfg = engine.load_config({"dataset": "identity", "dataset_dir": str(data), "output_dir": str(data / "out")})
    assert dataset_dir_of(cfg) == data.resolve()
    assert any("is inside the dataset_dir folder" in p for p in engine.validate(cfg))


def test_cli_never_rewrites_the_base_weights(local_model, tmp_path):
    weights = local_model / "model.safetensors"
    before = hashlib.sha256(weights.read_bytes()).hexdigest()
    config = tmp_path / "base.yaml"
    config.write_text(f"dataset: identity\ndataset_dir: {REPO / 'data'}\nmax_steps: 1\n")
    result = CliRunner().invoke(app, ["train", str(config), f"model_name_or_path={local_model}",
                                      f"output_dir={local_model}", "finetuning_type=full", "overwrite_output_dir=true",
                                      "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "model_name_or_path folder" in " ".join(result.output.split())
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == before
    assert not (tmp_path / "runs").exists()


def test_export_refuses_export_dir_over_its_inputs(local_model):
    for out in (local_model, local_model / "merged", local_model.parent):
        with pytest.raises(ConfigError, match="export_dir .* the model_name_or_path folder"):
            load_export_config({"model_name_or_path": str(local_model), "export_dir": str(out)})
