"""The SFT recipe with each batching strategy on the demo model: packed reproduces padded, all of them learn."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import engine
from engine.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def run(model_dir, tmp_path, name, **over):
    config = {"model_name_or_path": str(model_dir), "dataset": "alpaca_demo", "dataset_dir": str(REPO / "data"),
              "template": "qwen", "cutoff_len": 64, "max_samples": 48, "per_device_train_batch_size": 4,
              "gradient_accumulation_steps": 2, "finetuning_type": "full", "learning_rate": 2e-3, "max_steps": 3,
              "logging_steps": 1, "save_strategy": "no", "plot_loss": False, "seed": 11,
              "lr_scheduler_type": "constant", "output_dir": str(tmp_path / name)}
    config.update(over)
    handle = engine.train(engine.load_config(config), runs_dir=tmp_path / "runs")
    status = handle.status()
    assert status.state == "completed", status
    metrics = [m for m in handle.metrics() if "loss" in m]
    weights = Path(status.output_dir) / ("model.safetensors" if config["finetuning_type"] == "full"
                                            else "adapter_model.safetensors")
    return status, metrics, load_file(weights)


def test_packed_training_reproduces_padded_training(demo_model_dir, tmp_path):
    padded_status, padded_metrics, padded_weights = run(demo_model_dir, tmp_path, "padded")
    packed_status, packed_metrics, packed_weights = run(demo_model_dir, tmp_path, "packed", batching_strategy="packed")
    assert [m["loss"] for m in packed_metrics] == pytest.approx([m["loss"] for m in padded_metrics], abs=1e-5)
    # The same real tokens were seen; only padding is gone.
    assert packed_status.num_input_tokens_seen == padded_status.num_input_tokens_seen
    assert packed_status.num_trained_tokens == padded_status.num_trained_tokens
    base = load_file(Path(demo_model_dir) / "model.safetensors")
    changed = [k for k in base if not torch.equal(base[k], packed_weights[k])]
    assert any("layers.0." in k for k in changed) and any("layers.1." in k for k in changed)
    # Adam divides by sqrt(v): on embedding rows of tokens seen once, rounding-level gradient differences (the
    # attention sums in another order) move a weight by up to ~1e-5 of the 2e-3 step. A real difference moves
    # whole rows by about the learning rate.
    for key in padded_weights:
        torch.testing.assert_close(packed_weights[key], padded_weights[key], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("strategy", ["bucketed", "dynamic"])
def test_other_strategies_learn(demo_model_dir, tmp_path, strategy):
    _, metrics, weights = run(demo_model_dir, tmp_path, strategy, batching_strategy=strategy, max_steps=8,
                              gradient_accumulation_steps=1, logging_steps=2)
    losses = [m["loss"] for m in metrics]
    assert losses[-1] < losses[0] * 0.95, losses
    base = load_file(Path(demo_model_dir) / "model.safetensors")
    assert all(not torch.equal(base[k], weights[k]) for k in base if "mlp" in k or "self_attn" in k)


def remote_code_copy(demo_model_dir, tmp_path) -> Path:
    """The demo model behind a model class of its own code (a subclass of transformers' Qwen3 class, loaded with
    trust_remote_code), as a hub repository with a modeling file ships it."""
    import json
    import shutil

    folder = tmp_path / "custom"
    shutil.copytree(demo_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_custom.py").write_text(
        "from transformers import Qwen3ForCausalLM\n\n\nclass CustomForCausalLM(Qwen3ForCausalLM):\n    pass\n")
    return folder


@pytest.mark.parametrize("packing", [{"batching_strategy": "packed"}, {"batching_strategy": "dynamic"},
                                     {"neat_packing": True}], ids=["packed", "dynamic", "neat_packing"])
def test_per_sample_packing_is_refused_for_a_model_of_its_own_code(demo_model_dir, tmp_path, packing):
    """Packed rows keep attention within each sample only in transformers' own classes (from the restarting
    position ids); a remote-code class may attend across samples, which would train the wrong thing silently."""
    folder = remote_code_copy(demo_model_dir, tmp_path)
    config = {"model_name_or_path": str(folder), "trust_remote_code": True, "dataset": "alpaca_demo",
              "dataset_dir": str(REPO / "data"), "template": "qwen", "cutoff_len": 64, "max_samples": 16,
              "per_device_train_batch_size": 4, "finetuning_type": "lora", "max_steps": 1, "save_strategy": "no",
              "plot_loss": False, "output_dir": str(tmp_path / "out"), **packing}
    with pytest.raises(ConfigError) as refused:
        engine.train(engine.load_config(config), runs_dir=tmp_path / "runs")
    named = "neat_packing" if "neat_packing" in packing else f"batching_strategy: {packing['batching_strategy']}"
    assert str(refused.value).startswith(named) and "modeling_custom" in str(refused.value)
    assert "Use batching_strategy: padded" in str(refused.value)
    # the same model trains with padded batches: the refusal is about packing, not the model
    config.update(batching_strategy="padded", neat_packing=False, output_dir=str(tmp_path / "padded"))
    assert engine.train(engine.load_config(config), runs_dir=tmp_path / "runs").status().state == "completed"
