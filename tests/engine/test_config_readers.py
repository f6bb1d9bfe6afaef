"""The bounded YAML/JSON readers: hostile input ends in a short, clear error, quickly, never a traceback."""

import json
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import engine
from engine.readers import MAX_DEPTH, load_json_text, load_yaml_text, read_json, read_yaml, short_repr
from engine.data.registry import load_dataset_info
from engine.errors import ConfigError, DataError

# Nine levels of nine aliases: 9**9 (387 million) strings once expanded.
ALIAS_BOMB = "\n".join(
    [f'a0: &a0 [{", ".join(["lol"] * 9)}]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    + ["dataset: identity"])


@contextmanager
def time_box(seconds: int):
    """Fail instead of hanging: the readers must answer within ``seconds``."""
    def expired(*_):
        raise TimeoutError(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_alias_bomb_is_refused_quickly_with_a_short_message(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    started = time.perf_counter()
    with time_box(10), pytest.raises(ConfigError) as refused:
        engine.load_config(path)
    assert time.perf_counter() - started < 2
    message = str(refused.value)
    assert "alias" in message and "line 2" in message and len(message) < 300


def test_aliases_of_scalars_still_work():
    assert load_yaml_text("a: &x 5\nb: *x\n", "c.yaml") == {"a": 5, "b": 5}


def test_too_many_aliases_are_refused():
    text = "a: &x 1\n" + "\n".join(f"k{i}: *x" for i in range(200))
    with pytest.raises(ConfigError, match="more than 100 aliases"):
        load_yaml_text(text, "c.yaml")


@pytest.mark.parametrize("text", ["a: " + "[" * 5000 + "]" * 5000, "a:\n" + "".join(
    f"{'  ' * (i + 1)}k{i}:\n" for i in range(MAX_DEPTH + 5)) + "  " * (MAX_DEPTH + 6) + "v: 1\n"])
def test_deep_yaml_is_refused(text):
    with time_box(10), pytest.raises(ConfigError, match=f"nested more than {MAX_DEPTH} levels"):
        load_yaml_text(text, "c.yaml")


def test_duplicate_yaml_keys_name_both_lines(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("dataset: identity\nlearning_rate: 1.0e-4\nmax_steps: 3\nlearning_rate: 1.0\n")
    with pytest.raises(ConfigError, match="duplicate key 'learning_rate' at lines 2 and 4"):
        engine.load_config(path)


def test_huge_yaml_integer_is_refused_cleanly(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("dataset: identity\nseed: " + "7" * 5000 + "\n")
    with pytest.raises(ConfigError, match="line 2: an integer of 5000 digits is too large") as refused:
        engine.load_config(path)
    assert len(str(refused.value)) < 200


@pytest.mark.parametrize("content,match", [
    (b"\x00\x01\x02binary\x00", "binary file"),
    (b"dataset: caf\xe9\n", "not UTF-8"),
    (b"a: [1,\n", "not valid YAML at line 2"),
    (b"a: 1\n---\nb: 2\n", "single document"),
    (b"!!python/object/apply:os.system ['true']\n", "not valid YAML"),
])
def test_bad_files_get_clear_errors(tmp_path, content, match):
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=match):
        read_yaml(path)


def test_a_pipe_or_device_is_named_as_such_and_never_read(tmp_path):
    import os

    pipe = tmp_path / "c.yaml"
    os.mkfifo(pipe)  # reading it would wait for a writer forever
    for path in (pipe, Path("/dev/null")):
        with pytest.raises(ConfigError, match="is not a regular file"):
            read_yaml(path)
    with pytest.raises(ConfigError, match="does not exist"):
        read_yaml(tmp_path / "absent.yaml")


def test_oversized_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("x: " + "a" * (2 << 20))
    with pytest.raises(ConfigError, match="larger than"):
        read_yaml(path)


def test_error_messages_truncate_the_values_they_quote():
    with pytest.raises(ConfigError) as refused:
        engine.load_config({"per_device_train_batch_size": "x" * 100_000})
    assert len(str(refused.value)) < 200
    with pytest.raises(ConfigError) as unknown:
        engine.load_config({"k" * 100_000: 1})
    assert len(str(unknown.value)) < 300


def test_short_repr_is_bounded_and_never_raises():
    assert short_repr(10**5000) == "<an integer of about 5000 digits>"
    assert len(short_repr("x" * 10**6)) <= 80
    nested: list = []
    for _ in range(10_000):
        nested = [nested, nested]  # 2**10000 leaves once expanded
    assert len(short_repr(nested)) <= 80


@pytest.mark.parametrize("text,match", [
    ('{"a": 1,\n "b": 2,\n "a": 3}', "duplicate key 'a' \\(lines 1, 3\\)"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("[" * 40 + "]" * 40, f"nested more than {MAX_DEPTH} levels"),
    ("1" * 5000, "more than 4300 digits"),
    ('{"a": NaN}', "NaN is not standard JSON"),
    ('{"a": 1,}', "not valid JSON: .* at line 1"),
])
def test_json_reader_refuses_hostile_input(text, match):
    with time_box(10), pytest.raises(ConfigError, match=match):
        load_json_text(text, "x.json")


def test_dataset_info_problems_are_data_errors(tmp_path):
    info = tmp_path / "dataset_info.json"
    info.write_text('{"a": {"file_name": "a.json"},\n "a": {"file_name": "b.json"}}')
    with pytest.raises(DataError, match="names 'a' more than once"):
        load_dataset_info(tmp_path)
    info.write_text('{"a": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(DataError, match="more than 64 levels deep"):
        load_dataset_info(tmp_path)
    info.write_bytes(b"\x00\x00")
    with pytest.raises(DataError, match="binary"):
        load_dataset_info(tmp_path)


def test_real_registries_still_read(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    assert "identity" in load_dataset_info(repo / "data")
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto"}))
    assert read_json(tmp_path / "ds.json") == {"train_micro_batch_size_per_gpu": "auto"}
