"""Fixtures for the data-pipeline tests: the demo tokenizers (loaded once) and small dataset folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO_DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.fixture(scope="session")
def qwen_tokenizer(demo_model_dir):
    """The tiny Qwen3 demo model's tokenizer (ChatML chat template, default system prompt)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_model_dir)


@pytest.fixture(scope="session")
def llama_tokenizer(demo_llama_dir):
    """The tiny Llama demo model's tokenizer (Llama 3 chat template, BOS token)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_llama_dir)


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


@pytest.fixture()
def make_dataset(tmp_path):
    """make_dataset(name, rows, entry=None, file_name=None) -> dataset_dir with the file registered."""

    def make(name: str, rows, entry: dict | None = None, file_name: str | None = None) -> Path:
        file_name = file_name or f"{name}.json"
        write_json(tmp_path / file_name, rows)
        info_path = tmp_path / "dataset_info.json"
        info = json.loads(info_path.read_text()) if info_path.exists() else {}
        info[name] = {"file_name": file_name, **(entry or {})}
        write_json(info_path, info)
        return tmp_path

    return make
