"""The whole pipeline proves itself: after SFT on identity data, the model says the name it was taught."""

import shutil
from pathlib import Path

import torch

import engine
from engine.data import fill_placeholders, register_dataset
from engine.data.templates import get_template

REPO = Path(__file__).resolve().parents[2]


def test_identity_is_learned(demo_model_dir, tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    shutil.copy(REPO / "data" / "dataset_info.json", data_dir / "dataset_info.json")
    fill_placeholders(REPO / "data" / "identity.json", {"name": "Zorblax", "author": "Quillfeather Labs"},
                      data_dir / "identity_custom.json")
    register_dataset(data_dir, "identity_custom", {"file_name": "identity_custom.json"})

    config = engine.load_config({
        "model_name_or_path": str(demo_model_dir), "dataset": "identity_custom", "dataset_dir": str(data_dir),
        "template": "qwen", "finetuning_type": "full", "cutoff_len": 96, "per_device_train_batch_size": 8,
        "learning_rate": 3e-3, "num_train_epochs": 8, "lr_scheduler_type": "cosine", "warmup_ratio": 0.05,
        "logging_steps": 10, "save_strategy": "no", "plot_loss": False, "output_dir": str(tmp_path / "out")})
    handle = engine.train(config, runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed"

    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = handle.status().output_dir
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    prompt = get_template("qwen", tokenizer).encode_prompt(tokenizer, [{"role": "user", "content": "Who are you?"}])
    with torch.no_grad():
        generated = model.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False)
    answer = tokenizer.decode(generated[0, len(prompt):], skip_special_tokens=True)
    assert "Zorblax" in answer, answer
