"""Hub datasets (hf_hub_url with subset / folder / split / num_samples) download through huggingface_hub from the
fake hub on 127.0.0.1 into the verified cache, with progress and cancel, and then load like local files;
`train --check` says which need a download; om_hub_url, loading scripts and multimodal entries are refused by name."""

import json
import re
from pathlib import Path

import pytest

import engine
from engine.config.validate import check_notes
from engine.data.hub import hub_dataset, is_cached, snapshot_dir
from engine.data.loader import load_examples
from engine.data.registry import get_dataset_spec
from engine.errors import DataError
from engine.models.dataset_download import ensure_downloaded, start_dataset_download

from tests.hubserver import FakeHub, HubOptions

README = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/train.jsonl
- config_name: zh
  data_files:
  - split: train
    path: zh/train.jsonl
---
"""


def rows(lang: str, count: int) -> str:
    return "\n".join(json.dumps({"instruction": f"{lang} question {i}", "input": "", "output": f"{lang} answer {i}"})
                     for i in range(count)) + "\n"


@pytest.fixture()
def hub_repos(tmp_path) -> dict:
    subsets = tmp_path / "repo_subsets"
    for lang, count in (("en", 12), ("zh", 5)):
        (subsets / lang).mkdir(parents=True)
        (subsets / lang / "train.jsonl").write_text(rows(lang, count), encoding="utf-8")
    (subsets / "README.md").write_text(README, encoding="utf-8")
    folders = tmp_path / "repo_folders"
    (folders / "python").mkdir(parents=True)
    (folders / "python" / "part.jsonl").write_text(rows("py", 4), encoding="utf-8")
    (folders / "other").mkdir()
    (folders / "other" / "part.jsonl").write_text(rows("other", 9), encoding="utf-8")
    big = tmp_path / "repo_big"
    big.mkdir()
    (big / "train.jsonl").write_text(rows("big", 40000), encoding="utf-8")
    scripted = tmp_path / "repo_script"
    scripted.mkdir()
    (scripted / "repo_script.py").write_text("raise SystemExit('never run')\n", encoding="utf-8")
    (scripted / "README.md").write_text("a scripted dataset\n", encoding="utf-8")
    return {"org/subsets": subsets, "org/folders": folders, "org/big": big, "org/scripted": scripted}


@pytest.fixture()
def data_dir(tmp_path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    info = {"hub_en": {"hf_hub_url": "org/subsets", "subset": "en", "num_samples": 8},
            "hub_py": {"hf_hub_url": "org/folders", "folder": "python"},
            "hub_big": {"hf_hub_url": "org/big"},
            "hub_script": {"hf_hub_url": "org/scripted"},
            "modelers": {"om_hub_url": "org/subsets"},
            "hub_images": {"hf_hub_url": "org/subsets", "formatting": "sharegpt",
                           "columns": {"messages": "messages", "images": "images"}}}
    (folder / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    return folder


@pytest.fixture()
def online(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))


def config(data_dir, dataset, **over):
    return engine.load_config({"dataset": dataset, "dataset_dir": str(data_dir), **over})


def test_offline_check_names_the_missing_download(data_dir):
    problems = engine.validate(config(data_dir, "hub_en"))
    assert any("needs a download and HF_HUB_OFFLINE is set" in p for p in problems), problems


def test_download_then_load_subset_split_folder_and_num_samples(data_dir, hub_repos, online, monkeypatch):
    with FakeHub(hub_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert "needs a download, not cached" in " ".join(check_notes(config(data_dir, "hub_en,hub_py")))
        spec = get_dataset_spec("hub_en", data_dir)
        seen = []
        final = start_dataset_download(spec, on_progress=seen.append, interval_s=0.2).wait(60)
        assert final.error is None and final.done and seen
        log = []
        ensure_downloaded(get_dataset_spec("hub_py", data_dir), log=log.append)
        assert log and "bytes" in log[-1]
    assert is_cached(hub_dataset(spec))
    assert "downloaded and complete" in " ".join(check_notes(config(data_dir, "hub_en")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # cached: no network needed any more
    assert not [p for p in engine.validate(config(data_dir, "hub_en,hub_py")) if "hub_" in p]
    english = load_examples("hub_en", data_dir)
    assert len(english) == 8 and all("en question" in e["messages"][0]["content"] for e in english)  # num_samples
    python = load_examples("hub_py", data_dir)
    assert [e["messages"][1]["content"] for e in python] == [f"py answer {i}" for i in range(4)]  # folder only


def test_a_cancelled_download_is_not_cached_and_resumes(data_dir, hub_repos, online, monkeypatch):
    spec = get_dataset_spec("hub_big", data_dir)
    with FakeHub(hub_repos, HubOptions(throttle_bps=4e5)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        job = start_dataset_download(spec, interval_s=0.1)
        while job.wait(0.1).downloaded_bytes < 100_000 and not job.progress.done:
            pass
        job.cancel()
        cancelled = job.wait(30)
        assert cancelled.error and "cancelled" in cancelled.error
        assert not is_cached(hub_dataset(spec))
        with pytest.raises(DataError, match="needs a download and is not in the cache"):
            load_examples("hub_big", data_dir)
    with FakeHub(hub_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert start_dataset_download(spec).wait(120).error is None
    assert len(load_examples("hub_big", data_dir, max_samples=5)) == 5


def test_refusals_by_name(data_dir, hub_repos, online, monkeypatch):
    with pytest.raises(DataError, match="Modelers hub"):
        hub_dataset(get_dataset_spec("modelers", data_dir))
    problems = engine.validate(config(data_dir, "hub_images"))
    assert any("multimodal" in p and "does not support" in p for p in problems)
    with FakeHub(hub_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        ensure_downloaded(get_dataset_spec("hub_script", data_dir))
    assert (snapshot_dir(hub_dataset(get_dataset_spec("hub_script", data_dir))) / "repo_script.py").is_file()
    with pytest.raises(DataError, match="loading script"):
        load_examples("hub_script", data_dir)


@pytest.mark.parametrize("listing, words", [
    ('{"files": ["train.jsonl"]}', "the field 'files' must be an object, not a list"),
    ('{"files": {"../../../etc/passwd": 0}}', "'../../../etc/passwd', which is not a path inside"),
    ('{"files": {"/etc/hostname": 0}}', "'/etc/hostname', which is not a path inside"),
    ('{"files": {"train.jsonl": "big"}}', "the size of 'train.jsonl' must be a whole number of bytes, not text"),
    ('{"files": {}}', "lists no files"),
    ("[" * 100 + "]" * 100, "nested more than 64 levels deep"),
], ids=["list", "parent", "absolute", "size", "empty", "deep"])
def test_a_damaged_download_list_is_named_and_never_counts_as_complete(data_dir, online, monkeypatch, listing, words):
    spec = get_dataset_spec("hub_py", data_dir)
    folder = snapshot_dir(hub_dataset(spec))
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text(rows("py", 2), encoding="utf-8")
    (folder / ".lfa-manifest.json").write_text(listing, encoding="utf-8")
    assert not is_cached(hub_dataset(spec))
    with pytest.raises(DataError, match="needs a download: .*" + re.escape(words)):
        load_examples("hub_py", data_dir)
    note = " ".join(check_notes(config(data_dir, "hub_py")))
    assert words in note and "not used until the dataset is downloaded again" in note
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    problems = engine.validate(config(data_dir, "hub_py"))
    assert any("HF_HUB_OFFLINE is set" in p and words in p for p in problems), problems
    from engine.models.dataset_download import check_snapshot

    assert words in check_snapshot(folder).problems[0]


def test_downloading_a_local_dataset_says_it_is_local(tmp_path):
    from typer.testing import CliRunner

    from assistant.cli.main import app

    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "mine.json").write_text(json.dumps([{"instruction": "q", "output": "a"}]))
    (folder / "dataset_info.json").write_text(json.dumps({"mine": {"file_name": "mine.json"}}))
    result = CliRunner().invoke(app, ["data", "download", "mine", "--dataset-dir", str(folder)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert "is a local file ('mine.json' in dataset_dir): there is nothing to download" in result.output


def test_the_hub_is_chosen_as_llamafactory_chooses_it(data_dir, monkeypatch):
    from engine.data.registry import DatasetSpec

    both = DatasetSpec(name="both", hf_hub_url="org/a", ms_hub_url="ms/a")
    assert hub_dataset(both).source == "hf"
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "1")
    assert (hub_dataset(both).source, hub_dataset(both).repo_id) == ("modelscope", "ms/a")
    assert hub_dataset(DatasetSpec(name="ms", ms_hub_url="ms/only")).source == "modelscope"
    assert hub_dataset(DatasetSpec(name="legacy", hf_hub_url="wiki_qa")).repo_id == "wiki_qa"
    from engine.models.download import MANIFEST as WRITTEN
    from engine.data.hub import MANIFEST as READ

    assert WRITTEN == READ


def test_cli_check_lists_the_download_and_the_download_command_fetches_it(data_dir, hub_repos, online, monkeypatch,
                                                                        demo_model_dir):
    from typer.testing import CliRunner

    from assistant.cli.main import app

    yaml = data_dir / "train.yaml"
    yaml.write_text(f"model_name_or_path: {demo_model_dir}\ndataset: hub_py\ndataset_dir: {data_dir}\n"
                    "template: qwen\npacking: true\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["train", str(yaml), "--check", "--json"])
    notes = json.loads(result.output)["notes"]
    assert any(note.startswith("packing: LLaMA-Factory's packing") for note in notes)
    assert any("dataset hub_py: org/folders" in note and "needs a download" in note for note in notes)
    with FakeHub(hub_repos) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        fetched = CliRunner().invoke(app, ["data", "download", "hub_py", "--dataset-dir", str(data_dir)])
        assert fetched.exit_code == 0, fetched.output
    result = CliRunner().invoke(app, ["train", str(yaml), "--check", "--json"])
    assert any("downloaded and complete" in note for note in json.loads(result.output)["notes"])
