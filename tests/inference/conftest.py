"""Runs trained once per session on the tiny demo model: a LoRA adapter and a full fine-tune (a few seconds each)."""

from pathlib import Path

import pytest

import engine

REPO = Path(__file__).resolve().parents[2]


def _train(model_dir: Path, root: Path, method: str) -> Path:
    config = engine.load_config({
        "model_name_or_path": str(model_dir), "dataset": "identity", "dataset_dir": str(REPO / "data"),
        "template": "qwen", "finetuning_type": method, "cutoff_len": 96, "max_samples": 32,
        "per_device_train_batch_size": 4, "learning_rate": 5e-3 if method == "lora" else 2e-3, "max_steps": 12,
        "logging_steps": 4, "save_strategy": "no", "seed": 7, "output_dir": str(root / f"out_{method}"),
        "lr_scheduler_type": "constant", "plot_loss": False})
    handle = engine.train(config, runs_dir=root / "runs")
    status = handle.status()
    assert status.state == "completed", status
    losses = [m["loss"] for m in handle.metrics() if "loss" in m]
    assert losses[-1] < losses[0], losses  # the fixtures are only useful if training moved the weights
    return Path(status.output_dir)


@pytest.fixture(scope="session")
def lora_run(demo_model_dir, tmp_path_factory) -> Path:
    """The output_dir of a 12-step LoRA run (template qwen) on the demo model."""
    return _train(demo_model_dir, tmp_path_factory.mktemp("lora_run"), "lora")


@pytest.fixture(scope="session")
def full_run(demo_model_dir, tmp_path_factory) -> Path:
    """The output_dir of a 12-step full fine-tune (template qwen) on the demo model."""
    return _train(demo_model_dir, tmp_path_factory.mktemp("full_run"), "full")
