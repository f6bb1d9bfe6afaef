"""LoRA targets and ranks, and freeze's module names, checked against the model before it loads (demo model: hidden
128, k/v width 64)."""

import time
from pathlib import Path

import pytest

import engine
from engine.config import warnings

REPO = Path(__file__).resolve().parents[2]


def config(model, **keys):
    return engine.load_config({"dataset": "identity", "dataset_dir": str(REPO / "data"),
                               "model_name_or_path": str(model), **keys})


def test_unknown_target_is_named_with_the_model_linear_modules(demo_model_dir):
    problems = engine.validate(config(demo_model_dir, lora_target="q_proj,bogus"))
    assert len([p for p in problems if "lora_target" in p]) == 1
    problem = next(p for p in problems if "lora_target" in p)
    assert problem.startswith("lora_target 'bogus' matches no module of this model")
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert name in problem
    assert "lm_head" not in problem


def test_targets_that_match_are_accepted(demo_model_dir):
    for target in ("q_proj,v_proj", "self_attn.o_proj", "all", "mlp.down_proj"):
        assert engine.validate(config(demo_model_dir, lora_target=target)) == [], target


def test_rank_as_wide_as_the_layers_is_a_warning_not_a_problem(demo_model_dir):
    huge = config(demo_model_dir, lora_rank=4096)
    assert engine.validate(huge) == []
    assert any("lora_rank 4096" in w and "64" in w for w in warnings(huge))  # k_proj/v_proj are 64 wide
    assert "lora_rank must be >= 1 and <= 65536" in engine.validate(config(demo_model_dir, lora_rank=100_000))[0]
    assert any("(k_proj: 64)" in w for w in warnings(config(demo_model_dir, lora_rank=64, lora_target="k_proj")))
    assert warnings(config(demo_model_dir, lora_rank=64, lora_target="q_proj")) == []  # q_proj is 128 wide
    assert warnings(config(demo_model_dir, lora_rank=8)) == []


def test_all_targets_are_checked_from_config_json_alone(demo_model_dir):
    started = time.perf_counter()
    warnings(config(demo_model_dir, lora_rank=512))
    engine.validate(config(demo_model_dir))
    assert time.perf_counter() - started < 2  # no model is built for lora_target: all


def test_hub_ids_and_full_training_are_not_inspected():
    cfg = engine.load_config({"dataset": "identity", "dataset_dir": str(REPO / "data"),
                              "model_name_or_path": "Qwen/Qwen3-0.6B", "lora_target": "bogus"})
    assert not any("lora_target" in p for p in engine.validate(cfg))


def test_a_continued_adapter_says_which_lora_settings_it_keeps(demo_model_dir, tmp_path):
    import json

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "lora_dropout": 0.0}))
    said = warnings(config(demo_model_dir, adapter_name_or_path=str(adapter), lora_rank=4))
    assert any("lora_rank 4 (the adapter's is 8)" in w and "lora_alpha 8 (the adapter's is 16)" in w
               and "create_new_adapter" in w for w in said), said
    assert warnings(config(demo_model_dir, adapter_name_or_path=str(adapter), lora_rank=8)) == []
    assert warnings(config(demo_model_dir, adapter_name_or_path=str(adapter), lora_rank=4,
                           create_new_adapter=True)) == []  # a new adapter trains with lora_rank 4


def test_freeze_modules_are_checked_against_the_layers(demo_model_dir):
    problems = engine.validate(config(demo_model_dir, finetuning_type="freeze", freeze_trainable_modules="mlp,bogus"))
    assert problems == ["freeze_trainable_modules: bogus is no module of this model's layers; they have: "
                        "input_layernorm, mlp, post_attention_layernorm, self_attn (or all)."]
    assert engine.validate(config(demo_model_dir, finetuning_type="freeze", freeze_trainable_modules="mlp")) == []


def test_all_beside_module_names_is_said_once_with_a_model_at_hand(demo_model_dir):
    problems = engine.validate(config(demo_model_dir, lora_target="all,q_proj"))
    assert problems == ["lora_target: all stands alone and cannot be listed with 'q_proj'; write lora_target: all, "
                        "or only the names."]


def test_freeze_extra_modules_are_checked_before_the_run_as_the_run_checks_them(demo_model_dir):
    from transformers import AutoModelForCausalLM

    from engine.errors import ConfigError
    from engine.methods import get_method

    bogus = config(demo_model_dir, finetuning_type="freeze", freeze_extra_modules="norm,bogus")
    said = ("freeze_extra_modules: bogus matches no module outside the decoder layers; this model has: "
            "embed_tokens, norm.")
    assert engine.validate(bogus) == [said]
    with pytest.raises(ConfigError) as refused:
        get_method("freeze").prepare(AutoModelForCausalLM.from_pretrained(demo_model_dir), bogus)
    assert str(refused.value) == said
    assert engine.validate(config(demo_model_dir, finetuning_type="freeze",
                                  freeze_extra_modules=["embed_tokens", "norm"])) == []
    # A reward model trains with a score head in place of the output head.
    reward = config(demo_model_dir, finetuning_type="freeze", stage="rm", dataset="rm_demo",
                    freeze_extra_modules="score")
    assert not [p for p in engine.validate(reward) if p.startswith("freeze_extra_modules")]


def test_the_module_names_each_key_takes_are_the_ones_its_check_accepts(demo_model_dir):
    from engine.config.model_check import module_names

    model = str(demo_model_dir)
    expected = {"lora_target": ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"],
                "freeze_trainable_modules": ["input_layernorm", "mlp", "post_attention_layernorm", "self_attn"],
                "freeze_extra_modules": ["embed_tokens", "norm"]}  # the head is tied to the embeddings
    for key, names in expected.items():
        assert module_names(model, key) == names, key
    assert module_names(model, "additional_target") == ["embed_tokens", "lm_head", "norm"]
    assert "score" in module_names(model, "freeze_extra_modules", stage="rm")
    picked = {"lora_target": "q_proj,v_proj", "additional_target": "embed_tokens,lm_head",
              "freeze_trainable_modules": "self_attn,mlp", "freeze_extra_modules": "embed_tokens,norm"}
    for key, names in picked.items():
        method = "freeze" if key.startswith("freeze") else "lora"
        assert engine.validate(config(demo_model_dir, finetuning_type=method, **{key: names})) == [], key
    assert module_names("Qwen/Qwen3-0.6B", "lora_target") is None  # a hub id is not inspected
    assert module_names(model, "dataset") is None


@pytest.mark.parametrize("name", ["weights.safetensors", "model.gguf"])
def test_a_model_path_that_is_a_file_is_named_a_file_not_missing(tmp_path, name):
    weights = tmp_path / name
    weights.write_bytes(b"not a folder")
    problems = engine.validate(config(weights))
    assert any(p.startswith(f"model_name_or_path {weights} is a file, not a model folder") for p in problems), \
        problems
    assert not any("does not exist" in p for p in problems), problems
