"""The one loader, for train, infer and export: aliases, typed choices, overrides, LLaMA-Factory keys, whole files."""

import dataclasses
import re
from pathlib import Path

import pytest

import engine
from engine.api import ignored_keys
from engine.config import default_differences, load
from engine.config.model_source import ModelSource
from engine.errors import ConfigError
from engine.export import ExportConfig, load_export_config
from engine.inference import InferConfig, load_infer_config

REPO = Path(__file__).resolve().parents[2]
DATA = {"dataset": "identity", "dataset_dir": str(REPO / "data")}


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("key,word", [("save_strategy", "no"), ("eval_strategy", "no")])
def test_yaml_booleans_read_as_the_string_choice(tmp_path, key, word):
    cfg = engine.load_config(write(tmp_path, f"dataset: identity\n{key}: {word}\n"))
    assert getattr(cfg, key) == "no"
    assert not [p for p in engine.validate(cfg) if key in p]
    # The same through an override and through a keyword argument holding the boolean YAML produced.
    assert getattr(engine.load_config(DATA, f"{key}=no"), key) == "no"
    assert getattr(engine.load_config(DATA, **{key: False}), key) == "no"


def test_yaml_boolean_with_no_matching_choice_is_a_choice_problem():
    cfg = engine.load_config({**DATA, "lr_scheduler_type": True})
    assert any(p.startswith("lr_scheduler_type: 'true' is not one of") for p in engine.validate(cfg))


def test_overrides_and_keywords_apply_in_order(tmp_path):
    path = write(tmp_path, "dataset: identity\nmax_steps: 5\nlearning_rate: 1.0e-4\n")
    cfg = engine.load_config(path, "max_steps=7", "learning_rate=3e-4", max_steps=9)
    assert (cfg.max_steps, cfg.learning_rate) == (9, 3e-4)
    assert cfg.config_dir == str(tmp_path.resolve())
    assert set(cfg.given_keys) == {"dataset", "max_steps", "learning_rate"}


def test_an_unknown_key_is_blamed_on_where_it_was_written(tmp_path):
    path = write(tmp_path, "dataset: identity\nlearnign_rate: 1\n")
    with pytest.raises(ConfigError, match=f"Unknown key 'learnign_rate' in {re.escape(str(path))}"):
        engine.load_config(path)
    clean = write(tmp_path, "dataset: identity\n")
    with pytest.raises(ConfigError, match="Unknown key 'learnign_rate' in the key=value overrides. Did you mean"):
        engine.load_config(clean, "learnign_rate=1")
    with pytest.raises(ConfigError, match="Unknown key 'export_sise' in the key=value overrides"):
        load_export_config(write(tmp_path, "model_name_or_path: m\nexport_dir: out\n"), "export_sise=2")


@pytest.mark.parametrize("key,hint", [
    ("lora_bogus_thing", "Keys with a word in common: lora_alpha, lora_dropout, lora_rank, lora_target."),
    ("zzz_unheard_of", "Check its spelling against the configs in examples/."),
])
def test_an_unknown_key_without_a_near_match_gets_a_hint_that_exists(tmp_path, key, hint):
    with pytest.raises(ConfigError) as refused:
        engine.load_config(write(tmp_path, f"dataset: identity\n{key}: 1\n"))
    assert str(refused.value).endswith(hint) and "--help" not in str(refused.value)


@pytest.mark.parametrize("alias,value,key,expected", [
    ("ulysses_size", 2, "cp_size", 2),
    ("context_parallel_size", 4, "cp_size", 4),
    ("evaluation_strategy", "no", "eval_strategy", "no"),
    ("disable_gradient_checkpointing", True, "gradient_checkpointing", False),
    ("disable_gradient_checkpointing", False, "gradient_checkpointing", True),
])
def test_aliases(alias, value, key, expected):
    assert getattr(engine.load_config({**DATA, alias: value}), key) == expected


def test_alias_that_disagrees_with_its_key_is_refused():
    with pytest.raises(ConfigError, match="ulysses_size: 2 and cp_size: 4 disagree"):
        engine.load_config({**DATA, "ulysses_size": 2, "cp_size": 4})
    assert engine.load_config({**DATA, "ulysses_size": 2, "cp_size": 2}).cp_size == 2
    # an alias that inverts its key says what it means
    with pytest.raises(ConfigError, match=r"disable_gradient_checkpointing: True \(that is gradient_checkpointing: "
                                          r"False\) and gradient_checkpointing: True disagree"):
        engine.load_config({**DATA, "disable_gradient_checkpointing": True, "gradient_checkpointing": True})


def test_every_problem_of_a_file_is_listed_at_once():
    with pytest.raises(ConfigError) as refused:
        engine.load_config({**DATA, "learnig_rate": 1, "per_device_train_batch_size": "two", "use_galore": True})
    lines = str(refused.value).splitlines()
    assert len(lines) == 3
    assert any("Did you mean 'learning_rate'" in line for line in lines)
    assert any("per_device_train_batch_size: expected int" in line for line in lines)
    assert any("GaLore" in line for line in lines)


@pytest.mark.parametrize("data,match", [
    ({"stage": "ppo"}, "stage: 'ppo' is LLaMA-Factory's PPO .* use stage: dpo or kto"),
    ({"stage": "dpo", "pref_loss": "kto_pair"}, "kto_pair.* removed .* stage: kto"),
    ({"finetuning_type": "oft"}, "LLaMA-Factory's OFT method"),
    ({"optim": "galore_adamw"}, "GaLore/APOLLO low-rank optimizer, which lf-assistant does not support"),
    ({"report_to": "none,comet_ml"}, "'comet_ml' is not one of"),
])
def test_choices_refused_by_name(data, match):
    problems = engine.validate(engine.load_config({**DATA, **data}))
    assert any(re.search(match, p) for p in problems), problems


def test_new_keys_take_llamafactory_defaults():
    cfg = engine.load_config(DATA)
    assert (cfg.kto_chosen_weight, cfg.kto_rejected_weight, cfg.packing) == (1.0, 1.0, None)
    assert cfg.optim == "adamw_torch_fused"
    assert not cfg.packing_enabled and dataclasses.replace(cfg, stage="pt").packing_enabled
    assert dataclasses.replace(cfg, neat_packing=True).packing_enabled


def test_llamafactory_keys_refused_by_feature_or_named_as_unused():
    with pytest.raises(ConfigError, match="`galore_rank: 32` belongs to LLaMA-Factory's GaLore optimizer, which "
                       "lf-assistant does not support; use finetuning_type: lora"):
        engine.load_config({**DATA, "galore_rank": 32})
    # At LLaMA-Factory's default value the feature is off there too: accepted, named as unused.
    cfg = engine.load_config({**DATA, "use_galore": False, "dataloader_num_workers": 16, "use_apollo": False})
    assert set(cfg.unused_keys) == {"use_galore", "dataloader_num_workers", "use_apollo"}
    # preprocessing_num_workers bounds LLaMA-Factory's preprocessing batches (engine.data.chunks): used
    assert engine.load_config({**DATA, "preprocessing_num_workers": 16}).preprocessing_num_workers == 16
    assert ignored_keys(cfg) == list(cfg.unused_keys)


@pytest.mark.parametrize("key,value,match", [
    ("streaming", True, "dataset streaming"),
    ("do_predict", True, "lf-assistant chat"),
    ("image_max_pixels", 262144, "multimodal"),
    ("ray_num_workers", 4, "Ray launcher"),
    ("use_kt", True, "KTransformers"),
    ("tensor_model_parallel_size", 2, "Megatron"),
])
def test_keys_that_change_training_are_refused(key, value, match):
    with pytest.raises(ConfigError, match=match) as refused:
        engine.load_config({**DATA, key: value})
    assert f"`{key}" in str(refused.value) and "lf-assistant does not support" in str(refused.value)


@pytest.mark.parametrize("text,match", [
    ("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\n", "Accelerate launcher config"),
    ("model: Qwen/Qwen3-4B\nmodel_class: llm\nmicro_batch_size: 1\n", "LLaMA-Factory v1 config"),
    ('"<|a|>": one\n"<|b|>": two\n"<|c|>": three\n', "does not look like a config"),
    ("model_name_or_path: m\ninfer_backend: huggingface\n", "inference config .*`lf-assistant chat"),
    ("model_name_or_path: m\nexport_dir: out\n", "export config .*`lf-assistant export"),
])
def test_whole_files_of_other_kinds_are_named(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        engine.load_config(write(tmp_path, text), "model_name_or_path=x", "dataset_dir=data")


def test_infer_and_export_share_the_model_fields():
    shared = {f.name for f in dataclasses.fields(ModelSource)}
    assert shared <= {f.name for f in dataclasses.fields(InferConfig)}
    assert shared <= {f.name for f in dataclasses.fields(ExportConfig)}
    for name in shared:  # one declaration: the same help, choices and ranges in both
        infer_field = next(f for f in dataclasses.fields(InferConfig) if f.name == name)
        export_field = next(f for f in dataclasses.fields(ExportConfig) if f.name == name)
        assert infer_field.metadata == export_field.metadata


def test_infer_loader(tmp_path):
    path = write(tmp_path, "model_name_or_path: m\ninfer_dtype: float16\ndo_sample: no\nstage: sft\n"
                           "learning_rate: 1.0e-4\npreprocessing_num_workers: 4\n")
    cfg = load_infer_config(path, "max_new_tokens=32", top_k=5)
    assert (cfg.infer_dtype, cfg.do_sample, cfg.max_new_tokens, cfg.top_k) == ("float16", False, 32, 5)
    assert set(cfg.unused_keys) == {"stage", "learning_rate", "preprocessing_num_workers"}
    with pytest.raises(ConfigError, match="Did you mean 'temperature'"):
        load_infer_config({"model_name_or_path": "m", "temprature": 0.5})
    with pytest.raises(ConfigError, match="`vllm_config: .*extra vLLM engine arguments"):
        load_infer_config({"model_name_or_path": "m", "vllm_config": {"max_num_seqs": 4}})
    with pytest.raises(ConfigError, match="top_p must be a finite number \\(> 0 and <= 1\\), got nan"):
        load_infer_config({"model_name_or_path": "m", "top_p": float("nan")})


def test_export_loader(tmp_path):
    cfg = load_export_config(write(tmp_path, "model_name_or_path: m\nexport_dir: out\nexport_size: 2\n"
                                             "export_device: auto\nlearning_rate: 1.0\n"), "export_legacy_format=true")
    assert (cfg.export_size, cfg.export_device, cfg.export_legacy_format) == (2, "auto", True)
    assert cfg.unused_keys == ("learning_rate",)
    with pytest.raises(ConfigError, match="GPTQ export quantization"):
        load_export_config({"model_name_or_path": "m", "export_dir": "o", "export_quantization_dataset": "c4"})
    # The template settings training used travel into the export's chat template.
    assert load_export_config({"model_name_or_path": "m", "export_dir": "o", "default_system": "Be terse."}
                              ).default_system == "Be terse."


def test_the_one_loader_serves_all_three():
    assert isinstance(load("infer", {"model_name_or_path": "m"}), InferConfig)
    assert isinstance(load("export", {"model_name_or_path": "m"}), ExportConfig)
    assert load("train", DATA).dataset == "identity"


def test_default_differences_cover_only_omitted_keys():
    keys = {row.key for row in default_differences({"logging_steps": 5, "disable_gradient_checkpointing": True})}
    assert "logging_steps" not in keys and "gradient_checkpointing" not in keys
    assert {"per_device_train_batch_size", "lr_scheduler_type", "do_train"} <= keys
    cfg = engine.load_config({**DATA, "per_device_train_batch_size": 4})
    rows = {row.key: row for row in default_differences(cfg)}
    assert "per_device_train_batch_size" not in rows and rows["logging_steps"].lf_default == 500
    assert all(row.reason for row in rows.values())
