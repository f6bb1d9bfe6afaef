"""GGUF export on the demo models: written with the gguf package, read back by transformers, compared with the
model it came from; a wrong layout is caught; the export config and the Modelfile point at the file."""

import json

import pytest
import torch

from engine.errors import ConfigError
from engine.export import load_export_config, make_export_config
from engine.export.gguf import gguf_support_problem, gguf_tokenizer, write_gguf
from engine.export.gguf_check import LOGITS_TOLERANCE, PROBE_TEXTS, verify_gguf
from engine.models.gguf_file import read_gguf_info

DEMOS = ("demo_model_dir", "demo_llama_dir")


def _load(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(folder)


def _prompts(tokenizer):
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"] for t in PROBE_TEXTS]


def _write_and_verify(request, fixture, quantization, tmp_path):
    model, tokenizer = _load(request.getfixturevalue(fixture))
    path = tmp_path / f"{fixture}-{quantization}.gguf"
    write_gguf(model, tokenizer, path, quantization=quantization, name="demo", chat_template=tokenizer.chat_template)
    checks = verify_gguf(path, model, tokenizer, _prompts(tokenizer), list(PROBE_TEXTS),
                         quantization=quantization, stop_ids=[tokenizer.eos_token_id])
    return path, {c.name.split(" ")[1] if c.name.startswith("GGUF (") else c.name: c for c in checks}


@pytest.mark.parametrize("quantization", ["f16", "q8_0"])
@pytest.mark.parametrize("fixture", DEMOS)
def test_gguf_round_trip_matches_the_model(request, fixture, quantization, tmp_path):
    path, checks = _write_and_verify(request, fixture, quantization, tmp_path)
    assert all(c.passed for c in checks.values()), [c.as_dict() for c in checks.values()]
    logits = checks[f"({quantization})"]
    assert 0 < logits.measured <= logits.tolerance
    info = read_gguf_info(path)
    arch = "qwen3" if fixture == "demo_model_dir" else "llama"
    assert info.architecture == arch and info.metadata["tokenizer.chat_template"]
    # Matrices are stored quantized, norms stay float32; the tied output projection is not stored twice.
    assert info.tensor_types["F32"] > 0 and info.tensor_types[quantization.upper()] > 0
    assert "token_embd.weight" in info.tensor_names and "output.weight" not in info.tensor_names
    assert info.size_bytes < {"f16": 0.6, "q8_0": 0.4}[quantization] * info.parameters * 4  # float32 would be 1.0


def test_f32_gguf_is_exact_for_llama(request, tmp_path):
    """Same numbers, only renamed and reordered: the rotary interleave of Q and K is undone exactly."""
    _, checks = _write_and_verify(request, "demo_llama_dir", "f32", tmp_path)
    assert checks["(f32)"].passed and checks["(f32)"].measured < 1e-5
    greedy = checks["GGUF greedy answers match the exported model"]
    assert greedy.passed and "3 of 3" in greedy.detail


def test_a_wrong_layout_is_refused(request, tmp_path, monkeypatch):
    """Without llama.cpp's rotary interleave the file loads but answers differently: the check must fail."""
    import engine.export.gguf as gguf_module

    monkeypatch.setattr(gguf_module, "_interleave_rotary_halves", lambda weight, heads: weight)
    _, checks = _write_and_verify(request, "demo_llama_dir", "f32", tmp_path)
    assert not checks["(f32)"].passed
    assert checks["(f32)"].measured > 100 * checks["(f32)"].tolerance


@pytest.mark.parametrize("arch", ["qwen2", "mistral"])
def test_qwen2_and_mistral_round_trip(arch, demo_model_dir, tmp_path):
    """Qwen2 carries q/k/v biases; Mistral is written as llama (llama.cpp has no mistral architecture) and reads
    back as a Llama model, which computes the same thing."""
    from transformers import (AutoTokenizer, MistralConfig, MistralForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM)

    tokenizer = AutoTokenizer.from_pretrained(demo_model_dir)
    config_cls, model_cls = {"qwen2": (Qwen2Config, Qwen2ForCausalLM),
                             "mistral": (MistralConfig, MistralForCausalLM)}[arch]
    torch.manual_seed(0)
    model = model_cls(config_cls(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=256, tie_word_embeddings=arch == "qwen2",
                                 eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)).eval()
    if arch == "qwen2":  # biases start at zero; give them values so that a lost bias shows
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.data.normal_(0, 0.5)
    path = tmp_path / f"{arch}.gguf"
    write_gguf(model, tokenizer, path, quantization="f32", name=arch, chat_template=tokenizer.chat_template)
    checks = verify_gguf(path, model, tokenizer, _prompts(tokenizer), list(PROBE_TEXTS), quantization="f32",
                         stop_ids=[tokenizer.eos_token_id])
    assert all(c.passed for c in checks), [c.as_dict() for c in checks]
    assert checks[1].measured < 1e-4
    info = read_gguf_info(path)
    assert info.architecture == {"qwen2": "qwen2", "mistral": "llama"}[arch]
    assert ("blk.0.attn_q.bias" in info.tensor_names) == (arch == "qwen2")
    assert ("output.weight" in info.tensor_names) == (arch == "mistral")  # untied: stored


def test_gguf_tokenizer_metadata(demo_llama_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(demo_llama_dir)
    tok = gguf_tokenizer(tokenizer, vocab_size=len(tokenizer) + 3)
    assert tok.model == "gpt2" and tok.pre == "gpt-2" and tok.merges
    assert tok.tokens[-3:] == [f"[PAD{len(tokenizer) + i}]" for i in range(3)] and tok.token_types[-1] == 5
    assert tok.token_types[tokenizer.eos_token_id] == 3  # control
    assert tok.special_ids["eos"] == tokenizer.eos_token_id and tok.add_bos == (tokenizer.bos_token_id is not None)
    with pytest.raises(ConfigError, match="embedding rows"):
        gguf_tokenizer(tokenizer, vocab_size=10)


def test_unsupported_models_are_refused_by_name():
    assert gguf_support_problem({"model_type": "qwen3"}) is None
    assert "phi3" in gguf_support_problem({"model_type": "phi3"})
    rope = {"model_type": "llama", "rope_parameters": {"rope_type": "llama3", "factor": 8.0}}
    assert "rope scaling 'llama3'" in gguf_support_problem(rope)


def test_export_config_keys(lora_run, demo_model_dir, tmp_path):
    base = make_export_config(lora_run, base_model=str(demo_model_dir), method="lora", template="qwen",
                              export_dir=tmp_path / "out")
    assert load_export_config(base).gguf_quantization() is None
    assert load_export_config(base, export_format="gguf").gguf_quantization() == "q8_0"
    assert load_export_config(base, export_format="gguf", export_quantization="f16").gguf_quantization() == "f16"
    with pytest.raises(ConfigError, match="export_quantization applies to GGUF files only"):
        load_export_config(base, export_quantization="q8_0")
    with pytest.raises(ConfigError, match="export_quantization: 'q4_k' is not one of f32, f16, q8_0"):
        load_export_config(base, export_format="gguf", export_quantization="q4_k")


def test_export_writes_a_checked_gguf_and_a_modelfile_pointing_at_it(lora_run, demo_model_dir, tmp_path):
    from engine.export.run import export_model

    target = tmp_path / "tiny-gguf"
    config = load_export_config(make_export_config(lora_run, base_model=str(demo_model_dir), method="lora",
                                                   template="qwen", export_dir=target, export_device="cpu"),
                                export_format="gguf", export_quantization="q8_0")
    steps = []
    result = export_model(config, on_progress=lambda step, total, text: steps.append((step, total)))
    assert result.gguf == "tiny-gguf-q8_0.gguf" and (target / result.gguf).stat().st_size > 0
    assert steps[-1] == (8, 8)
    names = [c.name for c in result.checks]
    assert "GGUF (q8_0) logits match the exported model" in names and all(c.passed for c in result.checks)
    assert "FROM ./tiny-gguf-q8_0.gguf" in (target / "Modelfile").read_text()
    record = json.loads((target / "lfa_export.json").read_text())
    assert record["gguf"] == {"file": "tiny-gguf-q8_0.gguf", "quantization": "q8_0"}
    assert (target / "model.safetensors").is_file()  # the folder is still there beside the file
