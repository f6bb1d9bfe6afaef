"""Data: listing, templated datasets, custom files — the user's files are never modified."""

import json

import pytest

from assistant.wizard.stages import data
from assistant.wizard.state import new_state


def test_listing_marks_what_can_be_trained(workspace):
    rows = {row.name: row for row in data.list_datasets(workspace / "data")}
    assert rows["identity"].available and rows["identity"].formatting == "alpaca"
    assert not rows["dpo_demo"].available and "preference pairs" in rows["dpo_demo"].note
    assert not rows["pt_demo"].available and rows["pt_demo"].kind == "text"  # raw text has no answers to learn
    count, chars = data.count_rows(workspace / "data", "identity")
    assert count == len(json.loads((workspace / "data" / "identity.json").read_text())) and chars > 10
    preview = data.preview(workspace / "data", "identity", 2)
    assert len(preview) == 2 and preview[0]["messages"][-1]["role"] == "assistant"
    refused = data.choose(new_state(), workspace / "data", ["dpo_demo"], list(rows.values()), {})
    assert not refused.ok and "dpo_demo" in refused.problems[0]
    assert not data.choose(new_state(), workspace / "data", [], list(rows.values()), {}).ok


def _listed_with(workspace, name: str, entry: dict) -> dict:
    """The data stage's rows, by name, once dataset_info.json also registers ``entry`` as ``name``."""
    folder = workspace / "data"
    info = json.loads((folder / "dataset_info.json").read_text())
    info[name] = entry
    (folder / "dataset_info.json").write_text(json.dumps(info))
    return {row.name: row for row in data.list_datasets(folder)}


def test_multimodal_datasets_are_listed_as_not_usable(workspace):
    rows = _listed_with(workspace, "pictures", {"file_name": "identity.json", "columns": {"images": "images"}})
    assert not rows["pictures"].available and "multimodal" in rows["pictures"].note
    assert rows["identity"].available


def test_a_file_name_outside_the_folder_is_listed_as_outside_not_missing(workspace):
    rows = _listed_with(workspace, "escape", {"file_name": "../../etc/passwd"})
    rows = {**rows, **_listed_with(workspace, "gone", {"file_name": "gone.json"})}
    assert not rows["escape"].available and rows["escape"].note == "file outside this folder: copy it in"
    assert not rows["gone"].available and rows["gone"].note == "file missing"


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
    # a second fill never overwrites the first copy, and the question names the copy it will make
    assert data.filled_name(folder, "identity", "_custom") == "identity_custom_2"
    again = data.fill_template(state, folder, "identity", {"name": "Bo", "author": "Co"}, "_custom")
    assert again.state.datasets[0] == "identity_custom_2"
    assert "Ada" in (folder / "identity_custom.json").read_text()



def test_the_same_values_filled_again_use_the_earlier_copy_and_a_changed_copy_is_left_alone(workspace):
    folder = workspace / "data"
    state = new_state().replace(datasets=["identity"], dataset_rows={"identity": 90})
    ada = {"name": "Ada", "author": "Lab"}
    first = data.fill_template(state, folder, "identity", ada, "_custom")
    info = (folder / "dataset_info.json").read_bytes()
    made = (folder / "identity_custom.json").stat()
    # every new wizard answers the demo's question alike: one copy serves them all
    again = data.fill_template(state, folder, "identity", ada, "_custom")
    assert again.ok and again.state.datasets == ["identity_custom"] == first.state.datasets
    assert again.state.filled["identity_custom"]["file"] == str(folder / "identity_custom.json")
    assert "used again" in again.notes[-1] and not (folder / "identity_custom_2.json").exists()
    assert (folder / "dataset_info.json").read_bytes() == info  # nothing registered twice
    assert (folder / "identity_custom.json").stat().st_mtime_ns == made.st_mtime_ns  # not even rewritten
    other = data.fill_template(state, folder, "identity", {"name": "Bo", "author": "Co"}, "_custom")
    assert other.state.datasets == ["identity_custom_2"]
    assert data.fill_template(state, folder, "identity", ada, "_custom").state.datasets == ["identity_custom"]
    # a copy the user changed since is theirs: the same values make a new copy beside it, the file stays
    (folder / "identity_custom.json").write_text((folder / "identity_custom.json").read_text().replace("Ada", "Eve"))
    changed = (folder / "identity_custom.json").read_bytes()
    fresh = data.fill_template(state, folder, "identity", ada, "_custom")
    assert fresh.state.datasets == ["identity_custom_3"] and "Filled copy written" in fresh.notes[-1]
    assert (folder / "identity_custom.json").read_bytes() == changed
    assert "Ada" in (folder / "identity_custom_3.json").read_text()


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
    assert any("line 3" in note for note in outcome.notes)  # what the conversion left out is said
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


def test_the_projects_own_data_is_never_written_a_working_copy_is(workspace, monkeypatch):
    """Filling identity in the shipped data/ (tracked by git) writes into ./lf_data, a copy made once."""
    shipped = workspace / "shipped"
    (workspace / "data").rename(shipped)
    monkeypatch.setattr(data, "BUNDLED_DATA", shipped)
    before = {path.name: path.read_bytes() for path in shipped.iterdir()}
    assert data.default_dir("data") == str(shipped)
    state = new_state().replace(datasets=["identity"], dataset_rows={"identity": 90}, dataset_dir=str(shipped))
    outcome = data.fill_template(state, shipped, "identity", {"name": "Ada", "author": "Lab"}, "_custom")
    assert outcome.ok, outcome.problems
    copy = workspace / "lf_data"
    assert outcome.state.dataset_dir == str(copy) and (copy / "identity_custom.json").is_file()
    assert "identity_custom" in json.loads((copy / "dataset_info.json").read_text())
    assert {path.name: path.read_bytes() for path in shipped.iterdir()} == before
    assert any("lf_data" in note for note in outcome.notes)
    assert data.default_dir(str(shipped)) == "lf_data"  # the next session starts there


def test_a_killed_working_copy_leaves_nothing_and_a_users_lf_data_is_refused(workspace, monkeypatch):
    """The working copy is staged, then renamed: a copy killed half-way leaves no lf_data that would pass for
    complete. A non-empty ./lf_data that is not a working copy is the user's: refused, untouched."""
    import shutil

    shipped = workspace / "shipped"
    (workspace / "data").rename(shipped)
    monkeypatch.setattr(data, "BUNDLED_DATA", shipped)
    state = new_state().replace(datasets=["identity"], dataset_rows={"identity": 90}, dataset_dir=str(shipped))
    real_copyfile = shutil.copyfile
    copied: list[str] = []

    def killed_after_two(src, dst, **kw):
        if len(copied) == 2:
            raise KeyboardInterrupt  # the process dies mid-copy
        copied.append(src)
        return real_copyfile(src, dst, **kw)

    monkeypatch.setattr(shutil, "copyfile", killed_after_two)  # copytree's copy2 copies through it
    with pytest.raises(KeyboardInterrupt):
        data.fill_template(state, shipped, "identity", {"name": "Ada", "author": "Lab"}, "_custom")
    monkeypatch.setattr(shutil, "copyfile", real_copyfile)
    assert not (workspace / "lf_data").exists() and [p.name for p in workspace.iterdir() if
                                                      p.name.startswith(".lf_data")] == []
    mine = workspace / "lf_data"
    mine.mkdir()
    (mine / "identity.json").write_text("my own rows")
    outcome = data.fill_template(state, shipped, "identity", {"name": "Ada", "author": "Lab"}, "_custom")
    assert not outcome.ok and "lf_data is not empty" in outcome.problems[0]
    assert [p.name for p in mine.iterdir()] == ["identity.json"]
    assert (mine / "identity.json").read_text() == "my own rows"
    (mine / "identity.json").unlink()  # an empty folder is taken
    assert data.fill_template(state, shipped, "identity", {"name": "Ada", "author": "Lab"}, "_custom").ok
    assert (mine / "dataset_info.json").is_file()


def test_a_brought_in_file_is_copied_whole_and_never_over_another(workspace, monkeypatch):
    import shutil

    source = workspace / "mine.jsonl"
    source.write_text("\n".join(json.dumps({"instruction": f"q{i}", "output": f"a{i}"}) for i in range(3)) + "\n")
    folder = workspace / "data"
    real = shutil.copyfile

    def cut_short(src, dst, **kw):
        real(src, dst, **kw)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copyfile", cut_short)
    refused = data.bring_in(folder, source, "mine", convert=False)
    assert refused[0] is None and "No space left" in refused[1][0]
    assert not [p for p in folder.iterdir() if "mine" in p.name]  # no half copy, no temp file left
    monkeypatch.setattr(shutil, "copyfile", real)
    record, problems = data.bring_in(folder, source, "mine", convert=False)
    assert problems == [] and (folder / "mine.jsonl").read_bytes() == source.read_bytes()
    from engine.jsonio import copy_file_new

    other = workspace / "other.jsonl"
    other.write_text("other")
    with pytest.raises(FileExistsError):
        copy_file_new(other, folder / "mine.jsonl")
    assert (folder / "mine.jsonl").read_bytes() == source.read_bytes()


def test_kto_and_text_files_are_checked_and_registered_for_their_stage(workspace):
    kto = workspace / "kto.jsonl"
    kto.write_text("\n".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                                       {"role": "assistant", "content": f"a{i}"}],
                                         "label": i % 2 == 0}) for i in range(4)) + "\n")
    _path, report, problems = data.check_custom(str(kto), kind="kto")
    assert problems == [] and data.fits_kind(report, "kto")
    outcome = data.onboard(new_state(), workspace / "data", kto, "my_kto", convert=False, kind="kto")
    assert outcome.ok, outcome.problems
    from engine.data.kinds import dataset_kind
    from engine.data.registry import get_dataset_spec

    assert dataset_kind(get_dataset_spec("my_kto", workspace / "data")) == "kto"
    sft_rows = workspace / "sft.jsonl"
    sft_rows.write_text(json.dumps({"instruction": "q", "output": "a"}) + "\n")
    _path, report, problems = data.check_custom(str(sft_rows), kind="kto")
    assert not data.fits_kind(report, "kto") and "label" in problems[0]
    text = workspace / "notes.txt"
    text.write_text("one line of text\nanother line\n")
    _path, report, problems = data.check_custom(str(text), kind="text")
    assert problems == [] and report.rows == 2
    assert data.onboard(new_state(), workspace / "data", text, "notes", convert=False, kind="text").ok
    assert dataset_kind(get_dataset_spec("notes", workspace / "data")) == "text"


def test_preview_reads_each_kind_as_training_does(workspace):
    from assistant.tui.screens.data import preview_markup

    text = data.preview(workspace / "data", "pt_demo", 2)
    assert len(text) == 2 and all(set(row) == {"text"} and row["text"] for row in text)  # no SFT reader error
    assert "trained:" in preview_markup(text)
    rows = data.preview(workspace / "data", "kto_demo", 6)
    marked = preview_markup(rows)
    assert any(not row["kto_tag"] for row in rows)
    for row in rows:  # an undesirable answer is never shown as what training learns
        answer = row["messages"][-1]["content"][:40]
        line = next(line for line in marked.splitlines() if answer in line)
        assert ("✓ desirable" in line) == row["kto_tag"] and ("✗ undesirable" in line) == (not row["kto_tag"])


def test_an_entry_naming_too_few_columns_is_listed_with_why(workspace):
    """{"columns": {"system": "system"}}, as entries were once written: listed as not usable, the others still."""
    rows = _listed_with(workspace, "old", {"file_name": "identity.json", "columns": {"system": "system"}})
    assert not rows["old"].available and 'names no "prompt"' in rows["old"].note
    assert rows["identity"].available


@pytest.mark.parametrize("name", ["a\x1b[2Jb", "new\nline", ".hidden", "-x", "a\\b", "x" * 300, "a,b", "../up"])
def test_a_dataset_name_that_cannot_be_a_file_or_list_entry_is_refused(workspace, name):
    source = workspace / "mine.json"
    source.write_text(json.dumps([{"instruction": "q", "output": "a"}]))
    folder = workspace / "data"
    before = sorted(p.name for p in folder.iterdir()), (folder / "dataset_info.json").read_bytes()
    record, problems = data.bring_in(folder, source, name, convert=False)
    assert record is None and "cannot be a dataset name" in problems[0]
    assert (sorted(p.name for p in folder.iterdir()), (folder / "dataset_info.json").read_bytes()) == before


@pytest.mark.parametrize("name", ["身份", "my_data-2", "v1.2"])
def test_a_dataset_name_in_any_script_is_accepted(workspace, name):
    source = workspace / "mine.json"
    source.write_text(json.dumps([{"instruction": "q", "output": "a"}]))
    record, problems = data.bring_in(workspace / "data", source, name, convert=False)
    assert problems == [] and record["name"] == name
