"""Model and tokenizer loading: what loads, and every refusal made before weights are read."""

import json
import shutil
import time
from pathlib import Path

import pytest
import torch

from engine.errors import ConfigError, DeviceError, ModelError
from engine.models import loading
from engine.models.loading import load_model, load_tokenizer


def _copy(src: Path, dst: Path, *, drop: tuple[str, ...] = ()) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*drop) if drop else None)
    return dst


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data))


def test_load_demo_model_fp32_on_cpu_and_forward(demo_model_dir):
    model = load_model(str(demo_model_dir))
    assert model.dtype == torch.float32 and model.device.type == "cpu"
    ids = torch.tensor([[5, 6, 7, 8]])
    loss = model(input_ids=ids, labels=ids).loss
    assert torch.isfinite(loss) and loss.item() > 5.0  # random weights over 4096 tokens: ln(4096) = 8.3
    assert load_model(demo_model_dir, dtype="bfloat16").dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="float32"):
        load_model(demo_model_dir, dtype="fp32")


def test_load_tokenizer_sets_missing_pad_to_eos(demo_model_dir, tmp_path):
    assert load_tokenizer(demo_model_dir).pad_token == "<|endoftext|>"
    folder = _copy(demo_model_dir, tmp_path / "nopad")
    _edit_json(folder / "tokenizer_config.json", pad_token=None)
    tokenizer = load_tokenizer(str(folder), padding_side="left")
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.padding_side == "left"
    batch = tokenizer(["a", "a longer text"], padding=True)
    assert batch["input_ids"][0][0] == tokenizer.pad_token_id  # left padding really applied


def test_qlora_refused_on_cpu_before_anything_loads():
    start = time.perf_counter()
    # The path does not exist: a DeviceError (not a ModelError) proves the check comes before any lookup.
    with pytest.raises(DeviceError, match="finetuning_type: lora without quantization_bit"):
        load_model("/no/such/model", quantization_bit=4)
    assert time.perf_counter() - start < 2.0
    with pytest.raises(ConfigError, match="4 or 8"):
        load_model("/no/such/model", quantization_bit=3)


def test_qlora_without_bitsandbytes_says_how_to_install(monkeypatch):
    real_find_spec = loading.importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    def find_spec(name, *args):
        return None if name == "bitsandbytes" else real_find_spec(name, *args)

    monkeypatch.setattr(loading.importlib.util, "find_spec", find_spec)
    with pytest.raises(DeviceError, match=r"pip install lf-assistant\[bnb\]"):
        load_model("/no/such/model", device="cuda", quantization_bit=8)


def test_custom_code_needs_consent(demo_model_dir, tmp_path):
    folder = _copy(demo_model_dir, tmp_path / "custom")
    _edit_json(folder / "config.json", model_type="acme_lm", auto_map={"AutoModelForCausalLM": "modeling_acme.AcmeLM"})
    with pytest.raises(ModelError, match="trust_remote_code: true"):
        load_model(folder)
    with pytest.raises(ModelError, match="trust_remote_code: true"):
        load_tokenizer(folder)


def test_auto_map_on_a_native_architecture_loads_without_consent(demo_model_dir, tmp_path):
    folder = _copy(demo_model_dir, tmp_path / "native")
    _edit_json(folder / "config.json", auto_map={"AutoModelForCausalLM": "modeling_qwen3.Qwen3ForCausalLM"})
    assert type(load_model(folder)).__name__ == "Qwen3ForCausalLM"


def test_offline_hub_id_fails_fast_with_two_ways_forward():
    start = time.perf_counter()
    with pytest.raises(ModelError) as info:
        load_model("acme-org/never-downloaded-7b")
    assert time.perf_counter() - start < 2.0
    message = str(info.value)
    assert "HF_HUB_OFFLINE" in message and "(1)" in message and "(2)" in message
    assert "lf-assistant models download acme-org/never-downloaded-7b" in message


def test_demo_name_resolves_once_built(tmp_path, monkeypatch):
    from engine.models.demo import build_demo_model

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError, match="lf-assistant demo-model lf-tiny-llama"):
        load_tokenizer("lf-tiny-llama")
    build_demo_model("lf-tiny-llama")
    assert load_tokenizer("lf-tiny-llama").eos_token == "<|eot_id|>"


def test_missing_paths_explain_themselves(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError, match="No model folder"):
        load_tokenizer(str(tmp_path / "nope" / "deeper" / "model"))
    with pytest.raises(ModelError, match="lf-assistant demo-model lf-tiny-llama"):
        load_model("lf-tiny-llama")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelError, match="is a file"):
        load_model(tmp_path / "weights.bin")


def test_cached_hub_snapshot_loads_offline(demo_model_dir):
    from huggingface_hub import constants

    repo = Path(constants.HF_HUB_CACHE) / "models--lfa-test--tiny-cached"
    commit = "0" * 40
    _copy(demo_model_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    assert type(load_model("lfa-test/tiny-cached")).__name__ == "Qwen3ForCausalLM"
    assert load_tokenizer("lfa-test/tiny-cached").eos_token == "<|im_end|>"


@pytest.mark.parametrize(
    ("drop", "expected"),
    [
        (("model.safetensors",), "missing: the weights"),
        (("config.json",), "no config.json"),
    ],
)
def test_empty_shell_lists_what_is_missing(demo_model_dir, tmp_path, drop, expected):
    folder = _copy(demo_model_dir, tmp_path / "shell", drop=drop)
    (folder / "model.safetensors.incomplete").write_bytes(b"")
    with pytest.raises(ModelError, match=expected):
        load_model(folder)


def test_missing_shards_and_tokenizer_are_named(demo_model_dir, tmp_path):
    folder = _copy(demo_model_dir, tmp_path / "sharded", drop=("model.safetensors", "tokenizer.json"))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    shutil.copy(demo_model_dir / "model.safetensors", folder / "model-00001-of-00002.safetensors")
    with pytest.raises(ModelError, match=r"1 of 2 weight shards \(model-00002-of-00002.safetensors\)"):
        load_model(folder)
    with pytest.raises(ModelError, match="tokenizer files"):
        load_tokenizer(folder)


def test_adapter_folder_points_at_its_base(demo_model_dir, tmp_path):
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen3-0.6B"}))
    (folder / "adapter_model.safetensors").write_bytes(b"x")
    with pytest.raises(ModelError, match="LoRA adapter.*Qwen/Qwen3-0.6B.*adapter_name_or_path"):
        load_model(folder)
    # A tokenizer saved next to an adapter loads without config.json.
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(demo_model_dir / name, folder / name)
    assert load_tokenizer(folder).eos_token == "<|im_end|>"


def test_a_fresh_score_head_is_not_reported_as_a_fault_but_a_missing_weight_is(demo_model_dir, tmp_path):
    """transformers prints a load report table for any weight missing from the checkpoint. A reward model's score
    head is missing by design: that report is dropped. A weight of the body missing still shows."""
    import logging

    from safetensors.torch import load_file, save_file

    class Kept(logging.Handler):  # what transformers' logger lets through to its handlers
        def emit(self, record):
            reports.append(record.getMessage())

    reports: list[str] = []
    logger = logging.getLogger("transformers.modeling_utils")
    logger.addHandler(handler := Kept())
    model = load_model(str(demo_model_dir), device="cpu", head="score")
    assert model.score.weight.shape[0] == 1
    assert not any("LOAD REPORT" in r for r in reports)
    # an untied checkpoint also holds lm_head.weight, which a reward model does not use (UNEXPECTED): by design too
    untied = _copy(demo_model_dir, tmp_path / "untied")
    weights = next(untied.glob("*.safetensors"))
    tensors = load_file(weights)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, weights, metadata={"format": "pt"})
    _edit_json(untied / "config.json", tie_word_embeddings=False)
    load_model(str(untied), device="cpu", head="score")
    assert not any("LOAD REPORT" in r for r in reports)

    damaged = _copy(demo_model_dir, tmp_path / "damaged")
    weights = next(damaged.glob("*.safetensors"))
    tensors = load_file(weights)
    tensors.pop("model.norm.weight")
    save_file(tensors, weights, metadata={"format": "pt"})
    load_model(str(damaged), device="cpu", head="score")
    logger.removeHandler(handler)
    assert any("LOAD REPORT" in r and "model.norm.weight" in r for r in reports)
