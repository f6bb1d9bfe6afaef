"""Comma-separated keys take a YAML list too, as LLaMA-Factory's do, and both forms reach the run as one text."""

from pathlib import Path

import pytest

import engine
from engine.config import config_to_dict, dump_yaml, load, parse_overrides
from engine.config.fields import public_fields
from engine.config.train import TrainConfig
from engine.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
DATA = {"dataset": "identity", "dataset_dir": str(REPO / "data")}
NAME_LISTS = {"adapter_name_or_path", "dataset", "eval_dataset", "lora_target", "additional_target",
              "freeze_trainable_modules", "freeze_extra_modules", "report_to", "fsdp"}


def test_every_comma_separated_key_is_declared_as_a_list():
    """LLaMA-Factory splits these keys and takes lists for them; a key left out here would refuse a list."""
    declared = {f.name: f.metadata.get("multi") for f in public_fields(TrainConfig) if f.metadata.get("multi")}
    assert declared == {**dict.fromkeys(NAME_LISTS, "names"), "interleave_probs": "numbers"}


@pytest.mark.parametrize("key,items", [
    ("dataset", ["alpaca_demo", "identity"]), ("eval_dataset", ["identity"]), ("lora_target", ["q_proj", "v_proj"]),
    ("additional_target", ["norm"]), ("freeze_trainable_modules", ["mlp", "self_attn"]),
    ("freeze_extra_modules", ["embed_tokens", "norm"]), ("adapter_name_or_path", ["saves/a", "saves/b"]),
    ("report_to", ["tensorboard", "none"]), ("fsdp", ["full_shard", "auto_wrap"]),
])
def test_a_yaml_list_reads_as_the_comma_text(tmp_path, key, items):
    path = tmp_path / "c.yaml"
    path.write_text(f"dataset_dir: data\n{key}: [{', '.join(items)}]\n")
    assert getattr(engine.load_config(path), key) == ",".join(items)
    assert getattr(engine.load_config(DATA, **{key: tuple(items)}), key) == ",".join(items)


def test_the_run_yaml_written_from_lists_reloads(tmp_path):
    lists = {"dataset": ["alpaca_demo", "identity"], "lora_target": ["q_proj", "v_proj"],
             "additional_target": ["norm"], "interleave_probs": [0.5, 0.5], "mix_strategy": "interleave_under"}
    cfg = engine.load_config({**DATA, **lists})
    dump_yaml(config_to_dict(cfg), tmp_path / "sft.yaml")
    again = engine.load_config(tmp_path / "sft.yaml")
    assert config_to_dict(again) == config_to_dict(cfg)
    assert (again.dataset, again.interleave_probs) == ("alpaca_demo,identity", "0.5,0.5")
    assert not engine.validate(again)


@pytest.mark.parametrize("purpose,extra", [("infer", {}), ("export", {"export_dir": "out"})])
def test_infer_and_export_adapters_take_a_list(purpose, extra):
    cfg = load(purpose, {"model_name_or_path": "m", "adapter_name_or_path": ["saves/a", "saves/b"], **extra})
    assert (cfg.adapter_name_or_path, cfg.adapters()) == ("saves/a,saves/b", ["saves/a", "saves/b"])


@pytest.mark.parametrize("value,match", [
    (["q_proj", 3], "lora_target: the list must hold names .*: 3 is not a name"),
    (["q_proj", ["v_proj"]], r"\['v_proj'\] is not a name"),
    (["q_proj,v_proj"], "'q_proj,v_proj' holds a comma"),
    (["q_proj", " "], "an empty item"),
])
def test_a_list_that_is_not_names_is_refused_by_key(value, match):
    with pytest.raises(ConfigError, match=match):
        engine.load_config({**DATA, "lora_target": value})


def test_interleave_probs_list_holds_numbers():
    with pytest.raises(ConfigError, match="interleave_probs: the list must hold numbers only, got None"):
        engine.load_config({**DATA, "interleave_probs": [0.5, None]})


def test_an_override_written_as_a_list_is_a_list():
    assert parse_overrides(["report_to=[wandb,tensorboard]", "dataset=a,b"]) == {
        "report_to": ["wandb", "tensorboard"], "dataset": "a,b"}
    cfg = engine.load_config(DATA, "report_to=[tensorboard]", "dataset=[identity, alpaca_demo]")
    assert (cfg.report_to, cfg.dataset) == ("tensorboard", "identity,alpaca_demo")
    assert not [p for p in engine.validate(cfg) if p.startswith("report_to")]


@pytest.mark.parametrize("key, value, alone", [("report_to", "tensorboard,none", "none"),
                                               ("report_to", "all,wandb", "all"),
                                               ("lora_target", "all,q_proj", "all"),
                                               ("freeze_trainable_modules", "self_attn,all", "all")])
def test_a_name_that_stands_alone_is_refused_beside_others(key, value, alone):
    """None of these is what it reads as: the Trainer raises on "none" among trackers, LLaMA-Factory adapts only
    q_proj for "all,q_proj" and trains every module for "self_attn,all"."""
    problems = engine.validate(engine.load_config(DATA, f"{key}={value}"))
    assert [p for p in problems if p.startswith(key)] == [p for p in problems if f"{alone} stands alone" in p]
    assert len([p for p in problems if p.startswith(key)]) == 1, problems  # said once
    with pytest.raises(ConfigError, match=r"max_steps: expected int, got \[1, 2\]"):
        engine.load_config(DATA, "max_steps=[1,2]")


def test_a_dataset_named_twice_is_refused():
    """LF keys datasets by name (loader._get_merged_dataset): alp,alp trains alp once there; here it would twice."""
    problems = engine.validate(engine.load_config(DATA, "dataset=identity,alpaca_demo,identity"))
    assert any(p.startswith("dataset names identity more than once") for p in problems), problems
