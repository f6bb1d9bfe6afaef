"""Every numeric key of every config, fed finite, non-finite, negative, huge and wrongly typed values: each ends in
a config that can run or in a short, clear error naming the key, never in another exception."""

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import engine
from assistant.cli.main import app
from engine.config import warnings
from engine.config.fields import numeric_fields, public_fields
from engine.config.loader import schemas
from engine.errors import ConfigError
from engine.export import load_export_config
from engine.inference import load_infer_config

REPO = Path(__file__).resolve().parents[2]
BASE = {"train": {"dataset": "identity", "dataset_dir": str(REPO / "data")},
        "infer": {"model_name_or_path": "m"},
        "export": {"model_name_or_path": "m", "export_dir": "out"}}
LOADERS = {"train": engine.load_config, "infer": load_infer_config, "export": load_export_config}
NUMERIC = [(purpose, name) for purpose in ("train", "infer", "export")
           for name in sorted(numeric_fields(schemas()[purpose].cls))]
EDGES = [float("nan"), float("inf"), float("-inf"), -1, -5, 0, 0.5, 1, 2, 2**32, 10**30, 1e300, -1e300, 10**5000,
         "abc", "1e999", "nan", "7" * 5000, True, None, [1], {"a": 1}]
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-10**40, max_value=10**40),
    st.booleans(), st.none(), st.text(max_size=12), st.lists(st.integers(), max_size=2),
    st.sampled_from(["1e999", "-1e999", "nan", "inf", "1" * 5000, ".5", "3", "-0"]))


def test_every_numeric_key_declares_its_range():
    assert len(NUMERIC) > 40
    for purpose, name in NUMERIC:
        field = next(f for f in public_fields(schemas()[purpose].cls) if f.name == name)
        assert "bounds" in field.metadata, f"{purpose}.{name} has no declared range"


def outcome(purpose: str, name: str, value) -> None:
    """Load and validate one value; assert the result is a clear error naming the key, or a runnable value."""
    try:
        cfg = LOADERS[purpose]({**BASE[purpose], name: value})
    except ConfigError as exc:
        message = str(exc)
        assert name in message and len(message) < 400, message
        return
    if purpose != "train":  # the infer and export loaders raise every problem; reaching here means it is fine
        problems = []
    else:
        problems = engine.validate(cfg)
        warnings(cfg)  # must not raise either
    assert all(len(p) < 400 for p in problems), problems
    loaded = getattr(cfg, name)
    field = next(f for f in public_fields(cfg) if f.name == name)
    bounds = field.metadata["bounds"]
    finite = not isinstance(loaded, float) or math.isfinite(loaded)
    in_range = loaded is None or (not isinstance(loaded, bool) and finite and bounds.contains(loaded))
    range_problem = any(p.startswith(f"{name} must be") for p in problems)
    assert in_range != range_problem or purpose != "train", (name, value, loaded, problems)
    assert in_range or purpose == "train", (name, value, loaded)


@pytest.mark.parametrize("purpose,name", NUMERIC)
def test_edge_values(purpose, name):
    for value in EDGES:
        outcome(purpose, name, value)


@pytest.mark.parametrize("purpose,name", NUMERIC)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=VALUES)
def test_random_values(purpose, name, value):
    outcome(purpose, name, value)


@pytest.mark.parametrize("key,value,expected", [
    ("num_train_epochs", float("inf"), "num_train_epochs must be a finite number"),
    ("val_size", float("nan"), "val_size must be a finite number"),
    ("seed", -1, "seed must be >= 0 and < 4294967296,"),
    ("cutoff_len", 0, "cutoff_len must be >= 2 and <= 1048576,"),
    ("adam_beta1", 2, "adam_beta1 must be >= 0 and < 1"),
    ("lora_alpha", 0, "lora_alpha must be > 0"),
    ("warmup_steps", -5, "warmup_steps must be >= 0"),
    ("learning_rate", float("inf"), "learning_rate must be a finite number"),
    ("max_grad_norm", float("nan"), "max_grad_norm must be a finite number"),
    ("lora_rank", 0, "lora_rank must be >= 1"),
])
def test_measured_cases_are_refused(key, value, expected):
    problems = engine.validate(engine.load_config({**BASE["train"], key: value}))
    assert any(p.startswith(expected) for p in problems), problems


@pytest.mark.parametrize("line,expected", [
    ("num_train_epochs: .inf", "num_train_epochs must be a finite number"),
    ("val_size: .nan", "val_size must be a finite number"),
    ("seed: -1", "seed must be >= 0"),
    ("adam_beta1: 2", "adam_beta1 must be >= 0 and < 1"),
    ("learning_rate: .inf", "learning_rate must be a finite number"),
    ("max_grad_norm: .nan", "max_grad_norm must be a finite number"),
    ("seed: " + "9" * 5000, "an integer of 5000 digits is too large"),
    ("cutoff_len: [1, 2]", "cutoff_len: expected int"),
    ("per_device_train_batch_size: 1.0e+400", "per_device_train_batch_size: expected int"),
])
def test_cli_check_refuses_with_exit_2_and_no_traceback(tmp_path, line, expected):
    path = tmp_path / "c.yaml"
    path.write_text(f"dataset: identity\ndataset_dir: {REPO / 'data'}\n{line}\n")
    result = CliRunner().invoke(app, ["train", str(path), "--check"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert expected in " ".join(result.output.split()), result.output


def test_a_share_of_the_steps_is_refused_with_what_to_give_instead():
    import engine
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match=r"warmup_steps: 0.1 is a share .* warmup_ratio"):
        engine.load_config({"warmup_steps": 0.1})
    with pytest.raises(ConfigError, match=r"save_steps: 0.5 is a share .* step count"):
        engine.load_config({"save_steps": 0.5})
    assert engine.load_config({"warmup_steps": 3.0}).warmup_steps == 3  # a whole float is a count
