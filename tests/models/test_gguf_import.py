"""`models import FILE.gguf` on GGUFs written from the demo models: the folder equals the source, resolves to a
template, and every bad input is refused with a sentence, no traceback, and nothing written or changed."""

import hashlib
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from assistant.cli.main import app
from engine.errors import ModelError
from engine.models.gguf_file import IMPORT_RECORD, read_gguf_info
from engine.models.gguf_import import import_gguf

runner = CliRunner()


def _gguf(source: Path, out: Path, quantization: str) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.export.gguf import write_gguf

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(source)
    write_gguf(model, tokenizer, out, quantization=quantization, name=source.name,
               chat_template=tokenizer.chat_template)
    return out


@pytest.fixture(scope="module")
def llama_gguf(demo_llama_dir, tmp_path_factory) -> Path:
    return _gguf(demo_llama_dir, tmp_path_factory.mktemp("gguf") / "tiny-llama.Q8_0.gguf", "q8_0")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_import_of_an_exact_gguf_gives_back_the_source(demo_model_dir, tmp_path):
    """An f32 GGUF holds the same numbers, so the imported Qwen3 folder equals the demo model tensor for tensor."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    gguf = _gguf(demo_model_dir, tmp_path / "tiny-qwen3-f32.gguf", "f32")
    steps, coded = [], []
    result = import_gguf(gguf, tmp_path / "imported", on_progress=lambda s, n, text: steps.append((s, n, text)),
                         on_message=lambda s, n, message: coded.append((s, n, message)))
    folder = result.folder
    assert [s for s, _, _ in steps][0] == 1 and steps[-1][:2] == (5, 5)
    assert any("tensor 24 of 24" in text for _, _, text in steps)  # per-tensor progress while dequantizing
    assert [(s, n, message.text) for s, n, message in coded] == steps  # the same steps, each with its code
    assert {message.code for _, _, message in coded} >= {"gguf.reading_header", "gguf.dequantizing_tensor",
                                                         "gguf.writing_weights", "gguf.checking"}
    source, imported = load_file(demo_model_dir / "model.safetensors"), load_file(folder / "model.safetensors")
    assert source.keys() == imported.keys() and all(torch.equal(source[k], imported[k]) for k in source)
    config = json.loads((folder / "config.json").read_text())
    assert config["head_dim"] == 32  # the file's key_length, which transformers' Qwen3 reader alone would drop
    a, b = AutoTokenizer.from_pretrained(demo_model_dir), AutoTokenizer.from_pretrained(folder)
    text = "Hello <|im_start|>user\nWhat is 2 + 2? ünïcödé"
    assert a(text)["input_ids"] == b(text)["input_ids"] and b.chat_template == a.chat_template
    record = json.loads((folder / IMPORT_RECORD).read_text())
    assert record["architecture"] == "qwen3" and all(c["passed"] for c in record["checks"])
    assert not list(tmp_path.glob(".*partial"))


def test_import_of_a_quantized_gguf_resolves_and_answers_like_it(llama_gguf, tmp_path):
    from engine.models.gguf_file import load_gguf_model
    from engine.models.resolve import resolve_model

    result = import_gguf(llama_gguf, tmp_path / "llama")
    names = [c.name for c in result.checks]
    assert names == ["folder holds the GGUF's weights", "folder answers like the GGUF"]
    assert all(c.passed for c in result.checks)
    res = resolve_model(str(result.folder))
    assert res.template == "llama3" and res.local_complete
    # Dequantized values, not the source's: q8_0 moved the weights a little.
    reference = load_gguf_model(llama_gguf).state_dict()
    from safetensors.torch import load_file

    saved = load_file(result.folder / "model.safetensors")
    assert all(torch.equal(saved[k], reference[k]) for k in saved)


def test_default_folder_and_registry_match(llama_gguf, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = import_gguf(llama_gguf)
    assert result.folder == (tmp_path / "models" / "tiny-llama").resolve()  # the .Q8_0 suffix dropped
    assert result.registry_id is None  # named like no registry model


def _unsupported_gguf(path: Path) -> Path:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(path, "bert")
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("case", ["not_gguf", "truncated", "unsupported", "out_exists", "out_inside", "missing"])
def test_bad_inputs_are_refused_without_traceback_or_writes(case, llama_gguf, tmp_path):
    source, out = llama_gguf, tmp_path / "out"
    expected = {"not_gguf": "is not a GGUF file", "truncated": "truncated", "unsupported": "is a bert model",
                "out_exists": "already exists and is not empty", "out_inside": "inside it",
                "missing": "is not a file"}[case]
    if case == "not_gguf":
        source = tmp_path / "model.gguf"
        source.write_text("just text, not weights")
    elif case == "truncated":
        source = tmp_path / "cut.gguf"
        source.write_bytes(llama_gguf.read_bytes()[: llama_gguf.stat().st_size // 2])
    elif case == "unsupported":
        source = _unsupported_gguf(tmp_path / "bert.gguf")
    elif case == "out_exists":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    elif case == "out_inside":
        out = llama_gguf / "sub"
    elif case == "missing":
        source = tmp_path / "nothing.gguf"
    before = _digest(source) if source.exists() else None
    listing = sorted(p.name for p in tmp_path.iterdir())
    result = runner.invoke(app, ["models", "import", str(source), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Traceback" not in result.output
    assert (_digest(source) if source.exists() else None) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing  # no staging or output folder left
    if case == "out_exists":
        assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


def test_truncated_header_is_named(tmp_path, llama_gguf):
    cut = tmp_path / "header.gguf"
    cut.write_bytes(llama_gguf.read_bytes()[:200])
    with pytest.raises(ModelError, match="truncated or corrupt"):
        read_gguf_info(cut)
