"""dataset_info.json: finding the folder, reading entries, suggestions for unknown names, safe registration."""

from __future__ import annotations

import json
import os

import pytest

from engine.data.registry import (
    dataset_file_path,
    find_dataset_dir,
    get_dataset_spec,
    load_dataset_info,
    parse_spec,
    register_dataset,
)
from engine.errors import DataError


def _info(folder, data) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset_info.json").write_text(json.dumps(data), encoding="utf-8")


def test_relative_dataset_dir_prefers_the_config_folder_then_cwd(tmp_path, monkeypatch):
    config_dir, cwd = tmp_path / "configs", tmp_path / "work"
    _info(config_dir / "data", {"a": {"file_name": "a.json"}})
    _info(cwd / "data", {"b": {"file_name": "b.json"}})
    monkeypatch.chdir(cwd)
    assert find_dataset_dir("data", config_dir=config_dir) == (config_dir / "data").resolve()
    assert find_dataset_dir("data") == (cwd / "data").resolve()
    assert find_dataset_dir("data", config_dir=tmp_path / "elsewhere") == (cwd / "data").resolve()
    assert find_dataset_dir(str(config_dir / "data")) == (config_dir / "data").resolve()


def test_missing_dataset_dir_names_every_place_looked_in(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg" / "data").mkdir(parents=True)  # exists, but has no dataset_info.json
    with pytest.raises(DataError) as info:
        find_dataset_dir("data", config_dir=tmp_path / "cfg")
    message = str(info.value)
    assert str(tmp_path / "cfg" / "data") in message and "no dataset_info.json inside" in message
    assert str(tmp_path / "data") in message and "does not exist" in message


@pytest.mark.parametrize("special", ["ONLINE", "REMOTE:llamafactory/demo_data"])
def test_llamafactory_hub_dataset_dirs_are_refused_by_name(special):
    with pytest.raises(DataError, match=f"dataset_dir '{special}' is LLaMA-Factory's way .* hf_hub_url"):
        find_dataset_dir(special)


def test_bad_json_reports_line_and_column(tmp_path):
    (tmp_path / "dataset_info.json").write_text('{\n  "a": {"file_name": "a.json"},\n}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"line 3, column 1"):
        load_dataset_info(tmp_path)


@pytest.mark.parametrize(("entry", "message"), [
    ({"formatting": "sharegpt"}, "no file_name"),
    ({"file_name": "a.json", "formatting": "chatml"}, "not one of alpaca, sharegpt, openai"),
    ({"file_name": "a.json", "columns": {"promt": "q"}}, "Did you mean 'prompt'"),
    ({"file_name": "a.json", "tags": {"user_tag": 1}}, "must be a string"),
    ({"file_name": "a.json", "ranking": "yes"}, "true or false"),
    ({"file_name": "a.json", "num_samples": 0}, "positive whole number"),
    ("a.json", "must be an object"),
])
def test_bad_entries_are_refused_with_the_reason(tmp_path, entry, message):
    _info(tmp_path, {"broken": entry})
    with pytest.raises(DataError, match=message):
        load_dataset_info(tmp_path)


def test_spec_defaults_follow_llamafactory(tmp_path):
    """Without a "columns" / "tags" object the formatting's defaults apply; with one, what it leaves out is absent,
    as LLaMA-Factory's DatasetAttr.join sets it (firefly's {"prompt": "input", "response": "target"} has no query)."""
    spec = parse_spec("x", {"file_name": "x.json", "formatting": "sharegpt", "om_hub_url": "kept"})
    assert spec.column("messages") == "conversations" and spec.column("system") is None
    assert spec.tag("user_tag") == "human" and spec.tag("assistant_tag") == "gpt"
    alpaca = parse_spec("y", {"file_name": "y.json"})
    assert (alpaca.column("prompt"), alpaca.column("query"), alpaca.column("response")) == \
        ("instruction", "input", "output")
    assert spec.to_dict() == {"file_name": "x.json", "formatting": "sharegpt", "om_hub_url": "kept"}
    firefly = parse_spec("firefly", {"file_name": "f.json", "columns": {"prompt": "input", "response": "target"}})
    assert (firefly.column("prompt"), firefly.column("query"), firefly.column("response")) == ("input", None, "target")
    tagged = parse_spec("u", {"file_name": "u.json", "formatting": "sharegpt", "columns": {"messages": "messages"},
                              "tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user",
                                       "assistant_tag": "assistant"}})
    assert (tagged.tag("system_tag"), tagged.tag("observation_tag"), tagged.tag("function_tag")) == (None,) * 3
    # what is written back names every column and tag it reads, so LLaMA-Factory reads the same
    assert parse_spec("f", firefly.to_dict()).to_dict() == firefly.to_dict() == {
        "file_name": "f.json", "columns": {"prompt": "input", "response": "target"}}
    from engine.data.registry import DatasetSpec

    ours = DatasetSpec(name="mine", file_name="m.json", columns={"system": "system"})  # as data check suggests it
    assert ours.to_dict()["columns"] == {"prompt": "instruction", "query": "input", "response": "output",
                                         "system": "system"}


@pytest.mark.parametrize("entry, message", [
    ({"formatting": "sharegpt", "columns": {"system": "sys"}}, 'names no "messages" column'),
    ({"formatting": "sharegpt", "tags": {"user_tag": "user"}}, "leaves out role_tag, content_tag, assistant_tag"),
    # as lf-assistant itself once wrote entries: no row would have a prompt, each refused naming a None column
    ({"columns": {"system": "system"}}, 'names no "prompt" \\(nor "query"\\) column'),
    ({"ranking": True, "columns": {"chosen": "chosen", "rejected": "rejected"}}, 'names no "prompt"'),
])
def test_an_entry_that_names_too_little_is_refused(entry, message, tmp_path):
    """Refused where the dataset is used, naming what to add; the other entries of the file stay usable."""
    from engine.data.registry import load_dataset_info

    _info(tmp_path, {"x": {"file_name": "x.json", **entry}, "fine": {"file_name": "f.json"}})
    with pytest.raises(DataError, match=message):
        get_dataset_spec("x", tmp_path)
    assert set(load_dataset_info(tmp_path)) == {"x", "fine"} and get_dataset_spec("fine", tmp_path).name == "fine"


def test_unknown_name_suggests_close_matches(tmp_path):
    _info(tmp_path, {"alpaca_en_demo": {"file_name": "a.json"}, "identity": {"file_name": "i.json"}})
    with pytest.raises(DataError, match="Did you mean alpaca_en_demo"):
        get_dataset_spec("alpca_en_demo", tmp_path)


def test_a_file_path_instead_of_a_name_explains_registration(tmp_path):
    _info(tmp_path, {"identity": {"file_name": "i.json"}})
    with pytest.raises(DataError) as info:
        get_dataset_spec("/home/me/LLaMA-Factory/data/train1.json", tmp_path)
    message = str(info.value)
    assert "looks like a file path" in message and '{"train1": {"file_name": "train1.json"}}' in message


def test_register_dataset_writes_valid_json_and_keeps_other_entries(tmp_path):
    _info(tmp_path, {"old": {"file_name": "old.json", "custom_key": 1}})
    register_dataset(tmp_path, "new", {"file_name": "new.json", "formatting": "sharegpt"})
    data = json.loads((tmp_path / "dataset_info.json").read_text(encoding="utf-8"))
    assert data == {"old": {"file_name": "old.json", "custom_key": 1},
                    "new": {"file_name": "new.json", "formatting": "sharegpt"}}
    assert [p.name for p in tmp_path.iterdir()] == ["dataset_info.json"]  # no temp file left behind
    register_dataset(tmp_path, "new", {"file_name": "new.json", "formatting": "sharegpt"})  # same: no-op
    with pytest.raises(DataError, match="already has a different entry"):
        register_dataset(tmp_path, "new", {"file_name": "other.json"})
    register_dataset(tmp_path, "new", {"file_name": "other.json"}, overwrite=True)
    assert load_dataset_info(tmp_path)["new"].file_name == "other.json"


def test_register_dataset_creates_the_registry_and_refuses_bad_input(tmp_path):
    folder = tmp_path / "fresh"
    register_dataset(folder, "a", {"file_name": "a.json"})
    assert json.loads((folder / "dataset_info.json").read_text()) == {"a": {"file_name": "a.json"}}
    with pytest.raises(DataError, match="without commas"):
        register_dataset(folder, "a,b", {"file_name": "a.json"})
    with pytest.raises(DataError, match="formatting"):
        register_dataset(folder, "c", {"file_name": "c.json", "formatting": "xml"})
    with pytest.raises(DataError, match="points outside"):
        register_dataset(folder, "d", {"file_name": "../secret.json"})
    assert set(json.loads((folder / "dataset_info.json").read_text())) == {"a"}


@pytest.mark.parametrize("file_name", ["../outside.json", "sub/../../outside.json", "/etc/passwd"])
def test_file_name_may_not_escape_the_dataset_dir(tmp_path, file_name):
    spec = parse_spec("x", {"file_name": file_name})
    with pytest.raises(DataError, match="points outside"):
        dataset_file_path(spec, tmp_path / "data")


def test_file_name_inside_the_dataset_dir_resolves(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.json").write_text("[]")
    assert dataset_file_path(parse_spec("x", {"file_name": "sub/a.json"}), tmp_path) == tmp_path / "sub" / "a.json"
    absolute = parse_spec("y", {"file_name": os.fspath(tmp_path / "sub" / "a.json")})
    assert dataset_file_path(absolute, tmp_path) == tmp_path / "sub" / "a.json"
    with pytest.raises(DataError, match="does not exist"):
        dataset_file_path(parse_spec("z", {"file_name": "missing.json"}), tmp_path)


def test_a_registry_that_is_a_link_is_updated_where_it_lives(tmp_path):
    shared, folder = tmp_path / "shared", tmp_path / "project"
    shared.mkdir(), folder.mkdir()
    _info(shared, {"old": {"file_name": "old.json"}})
    (folder / "dataset_info.json").symlink_to(shared / "dataset_info.json")
    register_dataset(folder, "new", {"file_name": "new.json"})
    assert (folder / "dataset_info.json").is_symlink()  # still the link the user made
    assert set(json.loads((shared / "dataset_info.json").read_text(encoding="utf-8"))) == {"old", "new"}
    assert sorted(p.name for p in shared.iterdir()) == ["dataset_info.json"]  # no temp file left behind
