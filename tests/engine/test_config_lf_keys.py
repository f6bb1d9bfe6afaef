"""Every key LLaMA-Factory accepts is an lf-assistant field, an alias, or in the key table: none gets the generic
unknown-key refusal, and every refusal names the LLaMA-Factory feature."""

from pathlib import Path

import pytest

import engine
from engine.config.lf_keys import ALL, TRAIN
from engine.config.lf_table import LF_KEYS
from engine.config.loader import schemas
from engine.errors import ConfigError, EngineError
from tests.engine.lf_declared_keys import frozen_keys, hparams_keys, training_arguments_keys

REPO = Path(__file__).resolve().parents[2]
DATA = {"dataset": "identity", "dataset_dir": str(REPO / "data")}
LF_CHECKOUTS = [Path("/work/lf-ref"), REPO.parent / "shared" / "reference" / "llamafactory"]


def handled_keys() -> set[str]:
    keys = set(LF_KEYS)
    for schema in schemas().values():
        keys |= set(schema.fields) | set(schema.aliases)
    return keys


def test_every_frozen_llamafactory_key_is_handled():
    keys = frozen_keys()
    assert len(keys) > 350
    assert sorted(keys - handled_keys()) == []


def test_live_llamafactory_source_keys_are_handled():
    root = next((path for path in LF_CHECKOUTS if (path / "src/llamafactory/hparams").is_dir()), None)
    if root is None:
        pytest.skip("no LLaMA-Factory source checkout (/work/lf-ref); the frozen list covered the keys")
    live = hparams_keys(root) | training_arguments_keys()
    assert sorted(live - handled_keys()) == []


def test_table_keys_are_not_fields_of_the_config_they_refuse_in():
    for key, rule in LF_KEYS.items():
        for purpose in rule.scope if rule.feature else ():
            assert key not in schemas()[purpose].fields, f"{key} is a {purpose} field and a refused key"


@pytest.mark.parametrize("key", sorted(k for k, rule in LF_KEYS.items() if rule.feature and TRAIN in rule.scope))
def test_each_refusal_names_the_feature(key):
    value = "something-else" if LF_KEYS[key].defaults != ("something-else",) else "x"
    with pytest.raises(ConfigError) as refused:
        engine.load_config({**DATA, key: value})
    message = str(refused.value)
    assert message.startswith(f"`{key}") and "which lf-assistant does not support" in message
    assert "Unknown key" not in message


def test_unused_keys_are_accepted_and_named():
    fields = schemas()["train"].fields
    unused = sorted(key for key, rule in LF_KEYS.items() if rule.feature is None and key not in fields)
    cfg = engine.load_config({**DATA, **{key: 1 for key in unused}})
    assert list(cfg.unused_keys) == unused


def test_refused_keys_at_their_llamafactory_default_are_accepted():
    defaults = {key: rule.defaults[0] for key, rule in LF_KEYS.items()
                if rule.feature and not rule.always and TRAIN in rule.scope}
    cfg = engine.load_config({**DATA, **defaults})
    assert set(defaults) <= set(cfg.unused_keys)


def test_former_refusals_are_fields_now():
    cfg = engine.load_config({**DATA, "double_quantization": False, "fsdp": ["full_shard", "auto_wrap"],
                              "mix_strategy": "interleave_over", "use_dora": True, "rope_scaling": "yarn"})
    assert not cfg.double_quantization and cfg.mix_strategy == "interleave_over" and cfg.use_dora
    from engine.parallel import fsdp_mode

    assert fsdp_mode(cfg) == "full_shard"  # the list form LLaMA-Factory / HF YAMLs write
    with pytest.raises(ConfigError, match="`streaming: true` belongs to LLaMA-Factory's dataset streaming"):
        engine.load_config({**DATA, "streaming": True})


def test_model_features_are_refused_for_chat_too():
    from engine.inference import load_infer_config

    for key, value in (("rope_scaling", "linear"), ("adapter_folder", "sub"), ("image_max_pixels", 1024),
                       ("train_from_scratch", True), ("quantization_method", "hqq")):
        assert {"infer", "export"} <= LF_KEYS[key].scope
        with pytest.raises(ConfigError, match=f"`{key}"):
            load_infer_config({"model_name_or_path": "m", key: value})
    assert load_infer_config({"model_name_or_path": "m", "quantization_method": "bnb"}).unused_keys == \
        ("quantization_method",)  # bitsandbytes: what quantization_bit loads through here
    # A training-only feature in an inference YAML changes nothing there: accepted, named as unused.
    assert load_infer_config({"model_name_or_path": "m", "use_galore": True}).unused_keys == ("use_galore",)


def examples_root() -> Path | None:
    return next((root for root in LF_CHECKOUTS if (root / "examples").is_dir() and (root / "data").is_dir()), None)


@pytest.mark.skipif(examples_root() is None, reason="no LLaMA-Factory examples (/work/lf-ref or ../shared)")
def test_llamafactory_examples_get_no_generic_refusal(demo_model_dir):
    root = examples_root()
    accepted = refused = 0
    for path in sorted((root / "examples").rglob("*.yaml")):
        try:
            cfg = engine.load_config(path, f"model_name_or_path={demo_model_dir}", f"dataset_dir={root / 'data'}")
            problems = engine.validate(cfg)
        except EngineError as exc:
            problems = [str(exc)]
        assert not any("Unknown key" in problem for problem in problems), (path, problems)
        accepted += not problems
        refused += bool(problems)
    assert accepted >= 2 and refused >= 1


def test_token_keys_are_refused_for_what_they_are():
    """split_special_tokens is a tokenizer option (its true is the default here), not LF's added tokens;
    new_special_tokens, LF's earlier name for added tokens, is refused as such, not as a typo."""
    with pytest.raises(ConfigError, match="split_special_tokens tokenizer option.*already stays text here"):
        engine.load_config({**DATA, "split_special_tokens": True})
    with pytest.raises(ConfigError, match="new_special_tokens: <x>` belongs to LLaMA-Factory's new tokens"):
        engine.load_config({**DATA, "new_special_tokens": "<x>"})
