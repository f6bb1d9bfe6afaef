"""Data: listing, templated datasets, custom files — the user's files are never modified."""

import json

from assistant.wizard.stages import data
from assistant.wizard.state import new_state


def test_listing_marks_what_can_be_trained(workspace):
    rows = {row.name: row for row in data.list_datasets(workspace / "data")}
    assert rows["identity"].available and rows["identity"].formatting == "alpaca"
    assert not rows["dpo_demo"].available and "DPO" in rows["dpo_demo"].note
    count, chars = data.count_rows(workspace / "data", "identity")
    assert count == len(json.loads((workspace / "data" / "identity.json").read_text())) and chars > 10
    preview = data.preview(workspace / "data", "identity", 2)
    assert len(preview) == 2 and preview[0]["messages"][-1]["role"] == "assistant"
    refused = data.choose(new_state(), workspace / "data", ["dpo_demo"], list(rows.values()), {})
    assert not refused.ok and "dpo_demo" in refused.problems[0]
    assert not data.choose(new_state(), workspace / "data", [], list(rows.values()), {}).ok


def test_templated_dataset_is_filled_into_a_registered_copy(workspace):
    folder = workspace / "data"
    original = (folder / "identity.json").read_bytes()
    assert data.placeholders(folder, "identity") == ["author", "name"]
    state = new_state().replace(datasets=["identity", "alpaca_demo"], dataset_rows={"identity": 90})
    assert not data.fill_template(state, folder, "identity", {"name": "Ada", "author": " "}, "_custom").ok
    outcome = data.fill_template(state, folder, "identity", {"name": "Ada", "author": "Lab"}, "_custom")
    assert outcome.ok, outcome.problems
    assert outcome.state.datasets == ["identity_custom", "alpaca_demo"]
    assert outcome.state.dataset_rows == {"identity_custom": 90}
    assert (folder / "identity.json").read_bytes() == original
    filled = (folder / "identity_custom.json").read_text()
    assert "{{" not in filled and "Ada" in filled and "Lab" in filled
    info = json.loads((folder / "dataset_info.json").read_text())
    assert info["identity_custom"]["file_name"] == "identity_custom.json" and "identity" in info
    # a second fill never overwrites the first copy
    again = data.fill_template(state, folder, "identity", {"name": "Bo", "author": "Co"}, "_custom")
    assert again.state.datasets[0] == "identity_custom_2"
    assert "Ada" in (folder / "identity_custom.json").read_text()


def test_malformed_file_lists_every_problem_and_a_converted_copy_is_registered(workspace):
    source = workspace / "mine.jsonl"
    lines = [{"conversations": [{"from": "user", "value": "hi"}, {"from": "bot", "value": "hello"}]},
             {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
             "not json at all"]
    text = "\n".join(json.dumps(r) if isinstance(r, dict) else r for r in lines) + "\n"
    source.write_text(text, encoding="utf-8")
    path, report, problems = data.check_custom(str(source))
    assert path == source and report is not None and not report.ok
    assert any("line 3" in p for p in problems)
    state = new_state()
    outcome = data.onboard(state, workspace / "data", source, "mine", convert=True)
    assert outcome.ok, outcome.problems
    assert source.read_text(encoding="utf-8") == text
    info = json.loads((workspace / "data" / "dataset_info.json").read_text())
    assert info["mine"]["file_name"] == "mine.json" and info["mine"]["formatting"] == "sharegpt"
    assert outcome.state.onboarded[0]["source"] == str(source)
    assert not data.onboard(state, workspace / "data", source, "mine", convert=True).ok  # name taken
    assert not data.onboard(state, workspace / "data", source, "a,b", convert=True).ok
    _p, _r, missing = data.check_custom(str(workspace / "nowhere.json"))
    assert "does not exist" in missing[0]


def test_dataset_folder_must_hold_dataset_info(workspace):
    assert data.find_dir("data").notes == [str(workspace / "data")]
    refused = data.find_dir(str(workspace / "empty"))
    assert not refused.ok and "dataset_info.json" in refused.problems[0]


def test_default_folder_is_local_data_else_the_bundled_demo_data(workspace, tmp_path_factory, monkeypatch):
    assert data.default_dir("data") == "data"
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.chdir(elsewhere)
    assert data.default_dir("data") == str(data.BUNDLED_DATA)
    assert data.find_dir(data.default_dir("data")).notes == [str(data.BUNDLED_DATA)]
