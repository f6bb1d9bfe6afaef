"""Background downloads through the real huggingface_hub and ModelScope clients, against a fake hub on 127.0.0.1."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hubserver import FakeHub, HubOptions, make_tiny_repo

from engine.errors import ModelError
from engine.models.cache import check_model_dir
from engine.models.download import DownloadJob, DownloadProgress, pick_source, start_download

REPO = "acme/tiny"


@pytest.fixture()
def online(monkeypatch, tmp_path: Path):
    """Undo the test session's offline switch for the child process; keep every client cache in tmp_path."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("MODELSCOPE_HOME", str(tmp_path / "ms-home"))
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))


@pytest.fixture()
def source_repo(tmp_path: Path) -> Path:
    return make_tiny_repo(tmp_path / "hub-files", weight_bytes=3 * 2**20)


def _serve(monkeypatch, hub: FakeHub) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", hub.url)


def _run(source: str, target: Path, *, cancel_at: int | None = None, **job_kw) -> tuple[DownloadJob, list]:
    events: list[DownloadProgress] = []
    job = DownloadJob(REPO, source, target, on_progress=events.append, interval_s=0.2, **job_kw).start()
    if cancel_at is not None:
        deadline = time.monotonic() + 30
        while job.progress.downloaded_bytes < cancel_at and time.monotonic() < deadline:
            time.sleep(0.05)
        job.cancel()
    job.wait(60)
    return job, events


@pytest.mark.parametrize("source", ["hf", "modelscope"])
def test_download_reports_progress_and_checks_completeness(source, online, monkeypatch, source_repo, tmp_path):
    with FakeHub({REPO: source_repo}, HubOptions(throttle_bps=3e6)) as hub:
        _serve(monkeypatch, hub)
        job, events = _run(source, tmp_path / "out")
    final = job.progress
    assert final.done and final.error is None, (final.error, list(job.log_tail))
    assert final.check is not None and final.check.complete and final.message.startswith("complete:")
    total = sum(f.stat().st_size for f in source_repo.iterdir())
    assert final.total_bytes == total == final.downloaded_bytes
    running = [e for e in events if not e.done]
    assert len(running) >= 3  # a ~1 s transfer reported every 0.2 s
    moving = [e for e in running if 0 < e.downloaded_bytes < total]
    assert moving and all(e.rate_bps > 0 and e.eta_s is not None for e in moving[1:])
    assert [e.downloaded_bytes for e in events] == sorted(e.downloaded_bytes for e in events)
    for f in source_repo.iterdir():
        assert (tmp_path / "out" / f.name).read_bytes() == f.read_bytes()
    assert not list((tmp_path / "hf-home").rglob("models--*"))  # nothing written into the shared HF cache
    assert DownloadJob._child_env()["HF_XET_HIGH_PERFORMANCE"] == "1"  # Xet's fast mode on the real hub


def test_hf_resumes_an_interrupted_transfer_with_a_range_request(online, monkeypatch, source_repo, tmp_path):
    options = HubOptions(drop_after={"model.safetensors": 1_500_000})
    with FakeHub({REPO: source_repo}, options) as hub:
        _serve(monkeypatch, hub)
        job, _ = _run("hf", tmp_path / "out")
        ranges = [g.range for g in hub.gets("model.safetensors")]
    assert job.progress.error is None and job.progress.check.complete
    assert ranges[0] is None and ranges[1] == "bytes=1048576-"  # resumed after the first full 1 MiB chunk
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == (source_repo / "model.safetensors").read_bytes()


@pytest.mark.parametrize("source", ["hf", "modelscope"])
def test_cancel_then_resume(source, online, monkeypatch, source_repo, tmp_path):
    target = tmp_path / "out"
    with FakeHub({REPO: source_repo}, HubOptions(throttle_bps=1e6)) as hub:
        _serve(monkeypatch, hub)
        job, _ = _run(source, target, cancel_at=1_200_000)
        assert job.progress.done and job.progress.error.startswith("cancelled")
        kept = job.progress.downloaded_bytes
        assert 0 < kept < job.progress.total_bytes
        assert not check_model_dir(target).complete
        hub.options.throttle_bps = None
        job, events = _run(source, target)
        weights = hub.gets("model.safetensors")
        configs = hub.gets("config.json")
    assert job.progress.error is None and job.progress.check.complete, job.progress.error
    assert len(configs) == 1  # finished files are not fetched again
    if source == "modelscope":  # ModelScope continues the partial file itself
        assert weights[-1].range is not None and int(weights[-1].range.split("=")[1].rstrip("-")) > 0
    assert (target / "model.safetensors").read_bytes() == (source_repo / "model.safetensors").read_bytes()


def test_truncated_file_is_fetched_again(online, monkeypatch, source_repo, tmp_path):
    target = tmp_path / "out"
    with FakeHub({REPO: source_repo}) as hub:
        _serve(monkeypatch, hub)
        assert _run("hf", target)[0].progress.check.complete
        weights = target / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100_000])  # a disk error, a killed copy...
        assert any("truncated" in p for p in check_model_dir(target).problems)
        job, _ = _run("hf", target)
        assert len(hub.gets("model.safetensors")) == 2
    assert job.progress.check.complete


def test_slow_download_suggests_the_other_source(online, monkeypatch, source_repo, tmp_path):
    with FakeHub({REPO: source_repo}, HubOptions(throttle_bps=4e5)) as hub:
        _serve(monkeypatch, hub)
        job = DownloadJob(REPO, "modelscope", tmp_path / "out", interval_s=0.2, slow_after_s=0.6).start()
        deadline = time.monotonic() + 20
        while "Slow" not in job.progress.message and time.monotonic() < deadline:
            time.sleep(0.1)
        progress = job.progress
        job.cancel()
        job.wait(30)
    assert "Slow:" in progress.message and "--source hf" in progress.message
    from assistant import i18n
    from assistant.tui.app import fetch_text
    from engine.models.cache import human_bytes

    shown = fetch_text(progress, human_bytes)  # the wizard shows the advice under the share, in its language
    assert shown.splitlines()[1] == progress.message
    i18n.set_language("zh")
    try:
        shown = fetch_text(progress, human_bytes)
    finally:
        i18n.set_language("en")
    assert "下载很慢" in shown and "--source hf" in shown and "Slow" not in shown


def test_unknown_repo_fails_with_next_step(online, monkeypatch, source_repo, tmp_path):
    with FakeHub({REPO: source_repo}) as hub:
        _serve(monkeypatch, hub)
        job = DownloadJob("acme/absent", "hf", tmp_path / "out", interval_s=0.2).start()
        final = job.wait(60)
    assert final.done and "acme/absent was not found on Hugging Face" in final.error and "--source" in final.error


def test_offline_is_refused_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ModelError, match="Offline"):
        start_download("Qwen/Qwen3-0.6B", source="hf", out_dir=tmp_path / "out")
    with pytest.raises(ModelError, match="Offline"):
        pick_source()
    assert time.monotonic() - start < 0.5
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("model_id", ["a/..", "../../x", "org/name/extra", "a b/c", "org/.hidden"])
def test_a_model_id_that_is_no_hub_id_is_refused_before_anything_is_made(monkeypatch, tmp_path, model_id):
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    with pytest.raises(ModelError, match="is neither a registry name nor a hub id"):
        start_download(model_id, source="hf")
    assert time.monotonic() - start < 0.5  # no hub was asked
    assert list(tmp_path.iterdir()) == []


def test_pick_source_prefers_the_faster_hub(online, monkeypatch, source_repo):
    with FakeHub({}, HubOptions(latency_s=0.3)) as slow, FakeHub({}) as fast:
        monkeypatch.setenv("HF_ENDPOINT", slow.url)
        monkeypatch.setenv("MODELSCOPE_ENDPOINT", fast.url)
        source, reason = pick_source(timeout_s=2)
        assert source == "modelscope" and "ModelScope chosen" in reason
        monkeypatch.setenv("MODELSCOPE_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
        assert pick_source(timeout_s=2)[0] == "hf"
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(ModelError, match="no network"):
        pick_source(timeout_s=1)


def test_start_download_maps_registry_ids_per_source(online, monkeypatch, tmp_path):
    with pytest.raises(ModelError, match="built-in demo model"):
        start_download("lf-tiny-qwen3", source="hf")
    repo = make_tiny_repo(tmp_path / "files", weight_bytes=2**16)
    # The registry says Llama 3.2 lives under LLM-Research/ on ModelScope; the default target is models/<name>.
    with FakeHub({"LLM-Research/Llama-3.2-1B-Instruct": repo}) as hub:
        _serve(monkeypatch, hub)
        monkeypatch.chdir(tmp_path)
        job = start_download("meta-llama/Llama-3.2-1B-Instruct", source="modelscope", interval_s=0.2)
        final = job.wait(60)
    assert job.repo_id == "LLM-Research/Llama-3.2-1B-Instruct"
    assert job.target == tmp_path / "models" / "Llama-3.2-1B-Instruct"
    # The tiny stand-in is far smaller than 1.24B parameters: the final check catches the mismatch.
    assert final.error and "1.24B-parameter" in final.error


def test_cli_download_then_check(online, monkeypatch, source_repo, tmp_path):
    from typer.testing import CliRunner

    from assistant.cli.models import app

    with FakeHub({REPO: source_repo}) as hub:
        _serve(monkeypatch, hub)
        result = CliRunner().invoke(app, ["download", REPO, "--source", "hf", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert "complete:" in result.output
    result = CliRunner().invoke(app, ["check", str(tmp_path / "m")])
    assert result.exit_code == 0 and "complete:" in result.output


def test_a_failed_dataset_download_names_the_switch_datasets_have():
    from engine.models.download import _explain

    offline = ConnectionError("no route to host")
    dataset = _explain(offline, "hf", "llamafactory/lima", Path("x"), "dataset").text
    assert "USE_MODELSCOPE_HUB=1" in dataset and "--source" not in dataset  # `data download` has no --source
    assert "--source modelscope" in _explain(offline, "hf", "org/model", Path("x")).text


def test_a_folder_of_the_users_is_never_downloaded_into(tmp_path):
    """--out naming a folder with other files in it: refused before anything runs, every file as it was (a resume
    would delete a *.safetensors that fails its header check, and the hub writes config.json over the user's)."""
    mine = tmp_path / "my-project"
    mine.mkdir()
    (mine / "config.json").write_text('{"mine": true}')
    (mine / "notes.safetensors").write_bytes(b"not a safetensors file")
    before = {p.name: p.read_bytes() for p in mine.iterdir()}
    with pytest.raises(ModelError, match="not empty .*config.json, notes.safetensors.*new or empty folder"):
        DownloadJob(REPO, "hf", mine).start()
    assert {p.name: p.read_bytes() for p in mine.iterdir()} == before
    with pytest.raises(ModelError, match="is a file"):
        DownloadJob(REPO, "hf", mine / "config.json").start()


def test_a_download_folder_resumes_only_its_own_model(tmp_path):
    from engine.models.download import TARGET_MARK, claim_target

    empty = tmp_path / "empty"
    empty.mkdir()
    claim_target(empty, REPO, "hf")  # an empty folder is taken, and marked before any transfer
    claim_target(empty, REPO, "modelscope")  # the same model from the other hub resumes there
    assert '"modelscope"' in (empty / TARGET_MARK).read_text()
    (empty / "config.json").write_text("{}")
    claim_target(empty, REPO, "hf")  # its own files do not make it foreign
    with pytest.raises(ModelError, match="holds a download of 'acme/tiny', not 'acme/other'"):
        claim_target(empty, "acme/other", "hf")
    legacy = tmp_path / "legacy"  # a folder an earlier version downloaded into carries the hub's own cache
    (legacy / ".cache" / "huggingface").mkdir(parents=True)
    (legacy / "config.json").write_text("{}")
    claim_target(legacy, REPO, "hf")
    assert (legacy / TARGET_MARK).is_file()


def test_a_progress_line_after_the_transfer_names_the_phase_not_a_rate():
    """The package source imports after its download: "0 B/s, ETA -" there read as a stalled transfer."""
    from assistant.cli.models import _line

    importing = DownloadProgress(downloaded_bytes=92_900_000, total_bytes=92_900_000, rate_bps=0.0, eta_s=None,
                                 message="importing (2/5): dequantizing the weights")
    assert _line(importing) == "92.9 MB of 92.9 MB, fetched. importing (2/5): dequantizing the weights"
    moving = DownloadProgress(downloaded_bytes=1_000_000, total_bytes=92_900_000, rate_bps=2e6, eta_s=46.0)
    assert "2.0 MB/s, ETA" in _line(moving)


def test_a_model_downloaded_into_a_projects_models_is_found_from_any_folder(online, monkeypatch, source_repo,
                                                                           tmp_path):
    from typer.testing import CliRunner

    from assistant.cli.models import app
    from engine.models.cache import find_local_model
    from engine.models.recorded import index_path

    monkeypatch.setenv("LFA_CACHE_DIR", str(tmp_path / "cache"))
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(project)
    with FakeHub({REPO: source_repo}) as hub:
        _serve(monkeypatch, hub)
        result = CliRunner().invoke(app, ["download", REPO, "--source", "hf"])  # into ./models/tiny
    assert result.exit_code == 0, result.output
    downloaded = project / "models" / "tiny"
    monkeypatch.chdir(elsewhere)  # ./models is another folder now
    found = find_local_model(REPO)
    assert found.complete and found.where == "recorded" and found.path == downloaded
    result = CliRunner().invoke(app, ["check", REPO])
    assert result.exit_code == 0, result.output
    assert f"complete: {downloaded}" in result.output  # where it was found, and why there
    assert f"downloaded there by `lf-assistant models download`, as {index_path()} records" in result.output
    # A recorded folder that no longer holds that download (moved, replaced) is passed over, not guessed at.
    (downloaded / ".lfa-download.json").write_text('{"model": "acme/other", "source": "hf"}')
    assert find_local_model(REPO).path is None
