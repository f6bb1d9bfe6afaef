"""Download a hub dataset (dataset_info.json's hf_hub_url / ms_hub_url) with the model download worker: the same
progress, cancel and resume, into the folder engine.data.hub reads from, checked file by file at the end."""

from __future__ import annotations

from pathlib import Path

from engine.data.hub import hub_dataset, is_cached, missing_files, snapshot_dir
from engine.data.registry import DatasetSpec
from engine.errors import DataError, ModelError
from engine.models.cache import CacheCheck, _size
from engine.models.download import MANIFEST, DownloadJob, is_offline  # noqa: F401 - MANIFEST: the name hub reads


def check_snapshot(folder: Path):
    """The download's final check, as the model downloads report it (engine.models.cache.CacheCheck)."""
    try:
        missing = missing_files(folder)
    except DataError as exc:
        return CacheCheck(folder, False, "local", [str(exc)], 0)
    if missing is None:
        problems = ["the file list never arrived"]
    elif missing:
        problems = [f"{len(missing)} file(s) missing or incomplete ({', '.join(missing[:4])})"]
    else:
        problems = []
    size = sum(_size(p) for p in folder.rglob("*") if p.is_file() and ".cache" not in p.parts)
    return CacheCheck(folder, not problems, "local", problems, size)


def start_dataset_download(spec: DatasetSpec, cache_dir: str | None = None, *, on_progress=None,
                           interval_s: float = 1.0):
    """Start the download of a hub dataset (a DownloadJob: progress, cancel, resume); DataError when it cannot."""
    ref = hub_dataset(spec)
    if ref.source == "script":
        raise DataError(f"Dataset {spec.name!r} is a folder in dataset_dir (script_url); there is nothing to download.")
    if is_offline():
        raise DataError(f"Dataset {spec.name!r} ({ref.describe()}) needs a download, and HF_HUB_OFFLINE is set. "
                        "Download it where there is network (`lf-assistant data download NAME`) and copy the cache "
                        f"folder ({snapshot_dir(ref, cache_dir)}), or put the file in dataset_dir.")
    job = DownloadJob(ref.repo_id, ref.source, snapshot_dir(ref, cache_dir), repo_type="dataset",
                      check=check_snapshot, on_progress=on_progress, interval_s=interval_s,
                      note=f"downloading dataset {spec.name} ({ref.describe()})")
    try:
        return job.start()
    except ModelError as exc:
        raise DataError(str(exc)) from None


def ensure_downloaded(spec: DatasetSpec, cache_dir: str | None = None, log=None) -> Path:
    """The complete local copy of a hub dataset, downloading it first when needed (progress lines to ``log``)."""
    ref = hub_dataset(spec)
    folder = snapshot_dir(ref, cache_dir)
    if ref.source == "script" or is_cached(ref, cache_dir):
        return folder
    last = [0.0]

    def report(progress) -> None:
        import time

        if log is not None and (progress.done or time.monotonic() - last[0] >= 10):
            last[0] = time.monotonic()
            total = f" of {progress.total_bytes:,}" if progress.total_bytes else ""
            log(f"dataset {spec.name}: {progress.downloaded_bytes:,}{total} bytes. {progress.message}")

    final = start_dataset_download(spec, cache_dir, on_progress=report).wait()
    if final.error:
        raise DataError(f"Dataset {spec.name!r} ({ref.describe()}): {final.error}")
    return folder
