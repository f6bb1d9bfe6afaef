"""The offline demo models: loadable with plain Auto classes, deterministic, cached, never half-written."""

import json
import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList

from engine.errors import ModelError
from engine.models import demo
from engine.models.demo import BUILD_MARKER, DEMO_MODELS, build_demo_model, demo_model_path, is_demo_model

QWEN_PROMPT = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
)
LLAMA_PROMPT = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)


def _file_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize(
    ("fixture", "arch", "n_params"),
    [("demo_model_dir", "Qwen3ForCausalLM", 819_968), ("demo_llama_dir", "LlamaForCausalLM", 819_840)],
)
def test_loads_with_plain_auto_classes(request, fixture, arch, n_params):
    folder = request.getfixturevalue(fixture)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(model).__name__ == arch
    cfg = model.config
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (128, 256, 2)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (4, 2, 32)
    assert cfg.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert model.num_parameters() == n_params
    assert len(tokenizer) == cfg.vocab_size == 4096
    assert model.dtype == torch.float32


def test_qwen_chat_template_and_special_ids(demo_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(demo_model_dir)
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi there"}], tokenize=False, add_generation_prompt=True
    )
    assert text == QWEN_PROMPT
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
    # A special token in text is one id, not split into pieces.
    assert tokenizer("<|im_start|>user", add_special_tokens=False).input_ids[0] == 1


def test_llama_chat_template_has_one_bos(demo_llama_dir):
    tokenizer = AutoTokenizer.from_pretrained(demo_llama_dir)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == LLAMA_PROMPT
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"]
    bos = tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
    assert ids[0] == bos and ids.count(bos) == 1
    assert tokenizer("Hello").input_ids[0] == bos  # plain encoding adds BOS, like Llama 3
    assert tokenizer.eos_token == "<|eot_id|>" and tokenizer.pad_token == "<|end_of_text|>"


class _ForceTokenAt(LogitsProcessor):
    """Greedy decoding picks `token_id` at generation step `step` (0-based)."""

    def __init__(self, prompt_len: int, step: int, token_id: int):
        self.prompt_len, self.step, self.token_id = prompt_len, step, token_id

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] - self.prompt_len == self.step:
            scores[:, self.token_id] = scores.max() + 100.0
        return scores


@pytest.mark.parametrize(
    ("fixture", "end_of_turn"), [("demo_model_dir", "<|im_end|>"), ("demo_llama_dir", "<|eot_id|>")]
)
def test_generate_stops_at_end_of_turn(request, fixture, end_of_turn):
    folder = request.getfixturevalue(fixture)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    prompt_len = batch["input_ids"].shape[1]
    eot = tokenizer.convert_tokens_to_ids(end_of_turn)
    force = LogitsProcessorList([_ForceTokenAt(prompt_len, 3, eot)])
    # No eos passed here: the saved generation_config alone must stop generation.
    out = model.generate(**batch, max_new_tokens=20, do_sample=False, logits_processor=force)
    assert out.shape[1] == prompt_len + 4 and out[0, -1].item() == eot


def test_tokenizer_round_trips_and_covers_everyday_english(demo_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(demo_model_dir)
    text = "Café au lait, 你好, 🙂 and tabs\tand\nnew lines."
    assert tokenizer.decode(tokenizer(text).input_ids) == text
    sentence = "Could you please tell me how to plan a short family trip to the mountains this summer?"
    n_tokens = len(tokenizer(sentence).input_ids)
    # Byte-level BPE with no training text would need ~5 tokens per word; 4096 merges on English get near 1.2.
    assert n_tokens <= 1.5 * len(sentence.split()), n_tokens


def test_build_is_byte_identical(demo_model_dir, demo_llama_dir, tmp_path):
    for name, first in (("lf-tiny-qwen3", demo_model_dir), ("lf-tiny-llama", demo_llama_dir)):
        second = build_demo_model(name, tmp_path / name)
        assert _file_bytes(second) == _file_bytes(first)
    assert _file_bytes(demo_model_dir)["model.safetensors"] != _file_bytes(demo_llama_dir)["model.safetensors"]


def test_cached_build_is_reused_and_force_rebuilds(tmp_path, monkeypatch):
    target = build_demo_model("lf-tiny-qwen3", tmp_path / "m")
    monkeypatch.setattr(demo, "_write_build", lambda *a: pytest.fail("a complete build was rebuilt"))
    assert build_demo_model("lf-tiny-qwen3", target) == target
    monkeypatch.undo()
    os.utime(target / "model.safetensors", ns=(0, 0))
    build_demo_model("lf-tiny-qwen3", target, force=True)
    assert (target / "model.safetensors").stat().st_mtime_ns != 0  # rewritten, not reused


@pytest.mark.parametrize("damage", ["stale_hash", "truncated_weights", "no_marker"])
def test_damaged_build_is_rebuilt(tmp_path, damage):
    target = build_demo_model("lf-tiny-llama", tmp_path / "m")
    good = _file_bytes(target)
    marker_path = target / BUILD_MARKER
    if damage == "stale_hash":
        marker = json.loads(marker_path.read_text())
        marker_path.write_text(json.dumps({**marker, "spec_hash": "0" * 64}))
    elif damage == "truncated_weights":
        (target / "model.safetensors").write_bytes(b"\0" * 10)
    else:
        # A build interrupted before its marker: files present, marker missing.
        marker_path.unlink()
    if damage == "no_marker":
        # Without a marker the folder could be anyone's: it is refused, not overwritten.
        with pytest.raises(ModelError, match="not a demo model build"):
            build_demo_model("lf-tiny-llama", target)
        return
    build_demo_model("lf-tiny-llama", target)
    assert _file_bytes(target) == good


@pytest.mark.parametrize("marker", ["[1]", '{"name": ["lf-tiny-qwen3"]}', '{"name": "lf-tiny-qwen3", "files": [1]}',
                                    "[" * 100 + "]" * 100], ids=["list", "name-list", "files-list", "deep"])
def test_a_damaged_build_marker_is_no_demo_build_and_is_named(tmp_path, marker):
    from engine.models.resolve import _demo_entry

    target = tmp_path / "m"
    target.mkdir()
    (target / BUILD_MARKER).write_text(marker)
    (target / "notes.txt").write_text("my work")
    assert not is_demo_model(target) and _demo_entry(str(target)) is None
    with pytest.raises(ModelError, match="its build marker is damaged: .*lf_demo_build.json.*--out"):
        build_demo_model("lf-tiny-qwen3", target)
    assert (target / "notes.txt").read_text() == "my work"


def test_foreign_folder_is_never_overwritten(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("my work")
    with pytest.raises(ModelError, match="--out"):
        build_demo_model("lf-tiny-qwen3", target, force=True)
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_crash_leaves_nothing_behind(tmp_path, monkeypatch):
    def boom(*_args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(demo, "_init_model", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        build_demo_model("lf-tiny-qwen3", tmp_path / "m")
    assert not (tmp_path / "m").exists()
    assert [p.name for p in tmp_path.iterdir() if "building" in p.name] == []


def test_names_paths_and_recognition(demo_model_dir, tmp_path, monkeypatch):
    assert set(DEMO_MODELS) == {"lf-tiny-qwen3", "lf-tiny-llama"}
    assert DEMO_MODELS["lf-tiny-qwen3"].template == "qwen" and DEMO_MODELS["lf-tiny-llama"].template == "llama3"
    monkeypatch.chdir(tmp_path)
    assert demo_model_path() == tmp_path / "models" / "lf-tiny-qwen3"
    assert is_demo_model("lf-tiny-llama") and is_demo_model(demo_model_dir) and is_demo_model(str(demo_model_dir))
    assert not is_demo_model("Qwen/Qwen3-0.6B") and not is_demo_model(tmp_path)
    with pytest.raises(ModelError, match="lf-tiny-qwen3, lf-tiny-llama"):
        build_demo_model("lf-huge")


def test_cli_demo_model_builds_then_reuses(tmp_path):
    import typer
    from typer.testing import CliRunner

    from assistant.cli.demo import demo_model

    app = typer.Typer()
    app.command()(demo_model)
    target = tmp_path / "cli-llama"
    first = CliRunner().invoke(app, ["lf-tiny-llama", "--out", str(target)], terminal_width=200)
    assert first.exit_code == 0, first.output
    assert "Built lf-tiny-llama" in first.output and str(target) in first.output and "llama3" in first.output
    second = CliRunner().invoke(app, ["lf-tiny-llama", "--out", str(target)], terminal_width=200)
    assert "Already built" in second.output
    assert is_demo_model(target)
