"""Config loading: LLaMA-Factory keys, overrides, types, unknown keys, every problem listed."""

from pathlib import Path

import pytest

import engine
from engine.config import parse_overrides
from engine.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_overrides_parse_yaml_scalars():
    got = parse_overrides(["max_steps=20", "bf16=false", "learning_rate=1e-4", "dataset=a,b", "template="])
    assert got == {"max_steps": 20, "bf16": False, "learning_rate": 1e-4, "dataset": "a,b", "template": None}


def test_unknown_key_suggests_nearest(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("learnig_rate: 1.0e-4\ndataset: identity\n")
    with pytest.raises(ConfigError, match="'learnig_rate'.*'learning_rate'"):
        engine.load_config(path)


def test_wrong_type_names_key(tmp_path):
    with pytest.raises(ConfigError, match="per_device_train_batch_size: expected int"):
        engine.load_config({"per_device_train_batch_size": "four"})


def test_bad_yaml_says_where(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("dataset: identity\n  bad: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        engine.load_config(path)


@pytest.mark.parametrize("text,match", [("", "is empty"), ("- a\n- b\n", "mapping")])
def test_empty_or_list_yaml(tmp_path, text, match):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        engine.load_config(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        engine.load_config(tmp_path / "nope.yaml")


def test_validate_lists_every_problem():
    cfg = engine.load_config({"dataset": "identity", "dataset_dir": str(REPO / "data"), "learning_rate": -1,
                              "finetuning_type": "lorra", "per_device_train_batch_size": 0, "bf16": True,
                              "fp16": True, "template": "qwen99"})
    problems = engine.validate(cfg)
    joined = "\n".join(problems)
    for expected in ("learning_rate", "finetuning_type", "per_device_train_batch_size", "bf16 and fp16",
                     "template 'qwen99'"):
        assert expected in joined
    assert len(problems) >= 5


def test_qlora_refused_on_cpu():
    cfg = engine.load_config({"dataset": "identity", "dataset_dir": str(REPO / "data"), "quantization_bit": 4})
    assert any("QLoRA" in p and "GPU" in p for p in engine.validate(cfg))


def test_llamafactory_example_loads_with_overrides(lf_reference, demo_model_dir):
    example = lf_reference / "examples" / "train_lora" / "qwen3_lora_sft.yaml"
    cfg = engine.load_config(example, f"model_name_or_path={demo_model_dir}",
                             f"dataset_dir={lf_reference / 'data'}", "max_steps=3")
    assert cfg.finetuning_type == "lora" and cfg.max_steps == 3 and cfg.template == "qwen3_nothink"
    assert engine.validate(cfg) == []


def test_demo_examples_validate():
    for path in sorted((REPO / "examples" / "demo").glob("*.yaml")):
        cfg = engine.load_config(path)
        assert engine.validate(cfg) == [], path
