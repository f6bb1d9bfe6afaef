"""The DPO recipe end to end on the tiny demo model: margins rise, the right weights change, results land on disk."""

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import engine
from engine.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
LOGGED = ("loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
          "logps/rejected")


def dpo_config(model_dir, tmp_path, **over):
    # 8 pairs, 2 micro-batches of 4 per epoch: 16 steps revisit every pair 8 times, so the margin must grow.
    base = {"model_name_or_path": str(model_dir), "stage": "dpo", "dataset": "dpo_demo",
            "dataset_dir": str(REPO / "data"), "template": "qwen", "cutoff_len": 64, "max_samples": 8,
            "per_device_train_batch_size": 4, "learning_rate": 5e-3, "max_steps": 16, "logging_steps": 1,
            "save_steps": 100, "seed": 7, "pref_beta": 0.1, "output_dir": str(tmp_path / "out"),
            "lr_scheduler_type": "constant"}
    base.update(over)
    return engine.load_config(base)


def train_rows(handle) -> list[dict]:
    return [m for m in handle.metrics() if "loss" in m]


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def test_lora_dpo_raises_the_margin(demo_model_dir, tmp_path):
    handle = engine.train(dpo_config(demo_model_dir, tmp_path), runs_dir=tmp_path / "runs")
    status = handle.status()
    assert status.state == "completed", status
    rows = train_rows(handle)
    assert len(rows) == 16 and all(key in row for row in rows for key in LOGGED)
    # Step 1 is scored before any update: the policy IS the reference (adapter B = 0).
    assert rows[0]["loss"] == pytest.approx(math.log(2), abs=1e-5) and rows[0]["rewards/margins"] == 0
    assert mean(r["rewards/margins"] for r in rows[-4:]) > 0.05
    assert mean(r["loss"] for r in rows[-4:]) < 0.6
    assert mean(r["rewards/accuracies"] for r in rows[-4:]) > 0.8
    assert status.final_metrics["rewards/accuracies"] == rows[-1]["rewards/accuracies"]
    out = Path(status.output_dir)
    adapter = load_file(out / "adapter_model.safetensors")
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)  # lora_B started at zero
    assert json.loads((out / "lfa_training.json").read_text())["stage"] == "dpo"
    assert (handle.path / "dpo.yaml").is_file()
    assert "reference: the base model with the LoRA adapter disabled" in (handle.path / "train.log").read_text()


def test_full_dpo_measures_against_a_frozen_copy(demo_model_dir, tmp_path):
    before = load_file(Path(demo_model_dir) / "model.safetensors")
    handle = engine.train(dpo_config(demo_model_dir, tmp_path, finetuning_type="full", learning_rate=1e-3,
                                     max_steps=8), runs_dir=tmp_path / "runs")
    status = handle.status()
    assert status.state == "completed", status
    rows = train_rows(handle)
    assert rows[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert mean(r["rewards/margins"] for r in rows[-3:]) > rows[0]["rewards/margins"]
    assert mean(r["loss"] for r in rows[-3:]) < rows[0]["loss"]
    after = load_file(Path(status.output_dir) / "model.safetensors")
    assert [k for k in before if not torch.equal(before[k], after[k])]
    assert torch.equal(before["model.norm.weight"], load_file(Path(demo_model_dir) / "model.safetensors")[
        "model.norm.weight"])  # the base folder itself is never written


@pytest.mark.parametrize("loss", ["orpo", "simpo"])
def test_reference_free_losses_train(demo_model_dir, tmp_path, loss):
    handle = engine.train(dpo_config(demo_model_dir, tmp_path, pref_loss=loss, max_steps=8,
                                     pref_beta=2.0 if loss == "simpo" else 0.1),
                          runs_dir=tmp_path / "runs")
    status = handle.status()
    assert status.state == "completed", status
    rows = train_rows(handle)
    assert all(math.isfinite(r["loss"]) for r in rows)
    assert mean(r["loss"] for r in rows[-2:]) < rows[0]["loss"]
    assert mean(r["rewards/margins"] for r in rows[-2:]) > rows[0]["rewards/margins"]
    log = (handle.path / "train.log").read_text()
    assert f"loss {loss}" in log and "reference:" not in log  # no reference forward for ORPO / SimPO


def test_resume_continues_where_the_checkpoint_stopped(demo_model_dir, tmp_path):
    first = engine.train(dpo_config(demo_model_dir, tmp_path, max_steps=2, save_steps=2), runs_dir=tmp_path / "runs")
    assert first.status().state == "completed"
    assert (tmp_path / "out" / "checkpoint-2" / "CHECKPOINT_COMPLETE").exists()
    again = engine.train(dpo_config(demo_model_dir, tmp_path, max_steps=4, resume_from_checkpoint="auto"),
                         runs_dir=tmp_path / "runs", run_id="resumed")
    # steps 3-4 trained here; 1-2 are the rows the checkpoint kept, carried into the new run folder
    assert [r["step"] for r in train_rows(again)] == [1, 2, 3, 4]
    assert train_rows(again)[:2] == train_rows(first)
    assert [e["rows"] for e in again.run.read_events() if e["event"] == "metrics_carried"] == [2]


def test_identical_answers_are_reported_and_eval_pairs_are_scored(demo_model_dir, tmp_path):
    rows = [{"instruction": f"Name colour {i}.", "chosen": f"Colour {i} is blue.", "rejected": f"Colour {i} is red."}
            for i in range(6)]
    rows[0]["rejected"] = rows[0]["chosen"]
    data = tmp_path / "data"
    data.mkdir()
    (data / "pairs.json").write_text(json.dumps(rows))
    (data / "dataset_info.json").write_text(json.dumps({"pairs": {
        "file_name": "pairs.json", "ranking": True,
        "columns": {"prompt": "instruction", "chosen": "chosen", "rejected": "rejected"}}}))
    handle = engine.train(dpo_config(demo_model_dir, tmp_path, dataset="pairs", dataset_dir=str(data), val_size=2,
                                     max_steps=2, per_device_train_batch_size=2, max_samples=None),
                          runs_dir=tmp_path / "runs")
    status = handle.status()
    assert status.state == "completed", status
    assert any("1 pair(s) have the same chosen and rejected answer" in note for note in status.notes)
    evals = [m for m in handle.metrics() if "eval_loss" in m]
    assert len(evals) == 1 and evals[0]["step"] == 2 and math.isfinite(evals[0]["eval_loss"])
    assert "data: 6 rows (2 held out) -> 4 train / 2 eval pairs" in (handle.path / "train.log").read_text()


def test_sft_data_is_refused_before_anything_loads(tmp_path):
    config = engine.load_config({"stage": "dpo", "dataset": "identity", "dataset_dir": str(REPO / "data"),
                                 "output_dir": str(tmp_path / "out")})
    with pytest.raises(ConfigError, match="preference"):
        engine.train(config, runs_dir=tmp_path / "runs")


def test_detached_run_writes_reward_metrics(demo_model_dir, tmp_path):
    """`python -m engine.recipes.dpo RUN/dpo.yaml` — what the CLI and the TUI start."""
    handle = engine.train(dpo_config(demo_model_dir, tmp_path, max_steps=2), detach=True, runs_dir=tmp_path / "runs")
    status = handle.wait(timeout=240)
    assert status.state == "completed", (handle.path / "train.log").read_text()[-2000:]
    assert "rewards/accuracies" in train_rows(handle)[-1]


def test_llamafactory_dpo_example_runs_on_the_demo_model(lf_reference, demo_model_dir, tmp_path, monkeypatch):
    """LF's own qwen3_lora_dpo.yaml on its sharegpt dpo_en_demo, shortened: on a CPU without bf16 units its bf16
    falls back to fp32 with a note."""
    monkeypatch.setattr("engine.training.setup.cpu_bf16_units", lambda: None)
    example = lf_reference / "examples" / "train_lora" / "qwen3_lora_dpo.yaml"
    config = engine.load_config(example, f"model_name_or_path={demo_model_dir}",
                                f"dataset_dir={lf_reference / 'data'}", "max_steps=2", "gradient_accumulation_steps=2",
                                "cutoff_len=256", "max_samples=16", "logging_steps=1",
                                f"output_dir={tmp_path / 'out'}")
    assert engine.validate(config) == []
    handle = engine.train(config, runs_dir=tmp_path / "runs")
    status = handle.status()
    assert status.state == "completed", status
    assert any("fp32" in note for note in (status.notes or []))
    rows = train_rows(handle)
    assert [r["step"] for r in rows] == [1, 2] and all("rewards/accuracies" in r for r in rows)


@pytest.mark.slow
def test_llamafactory_dpo_example_full_length(lf_reference, demo_model_dir, tmp_path):
    """The acceptance run: cutoff_len 2048, 8-pair steps, 6 steps."""
    example = lf_reference / "examples" / "train_lora" / "qwen3_lora_dpo.yaml"
    config = engine.load_config(example, f"model_name_or_path={demo_model_dir}",
                                f"dataset_dir={lf_reference / 'data'}", "max_steps=6",
                                f"output_dir={tmp_path / 'out'}")
    handle = engine.train(config, runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed"
    assert "rewards/accuracies" in train_rows(handle)[-1]


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("train_lora/*_dpo.yaml"))
                         + [REPO / "examples" / "demo" / "tiny_lora_dpo.yaml"],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_dpo_examples_validate(path, demo_model_dir, monkeypatch):
    import yaml

    monkeypatch.chdir(REPO)  # dataset_dir: data is relative to the project root in examples/train_lora
    raw = yaml.safe_load(path.read_text())
    assert raw["stage"] == "dpo" and raw["pref_loss"] in ("sigmoid", "orpo", "simpo")
    # Offline tests cannot fetch the real model: validate everything else against the local demo model.
    model = raw.get("model_name_or_path") or None
    config = engine.load_config(path, **({"model_name_or_path": str(demo_model_dir)} if model else {}))
    assert engine.validate(config) == []
