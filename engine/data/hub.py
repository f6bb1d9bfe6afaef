"""Datasets that live on a hub (dataset_info.json's hf_hub_url / ms_hub_url), or in a folder datasets reads
(script_url): downloaded, verified and read as LLaMA-Factory reads them.

Where LLaMA-Factory calls ``datasets.load_dataset(repo, name=subset, data_dir=folder, split=split)`` on the hub,
lf-assistant first downloads the dataset repository through huggingface_hub (or ModelScope's client), in the same
background worker as models (engine.models.dataset_download: progress, cancel, resume), into
``<cache_dir or the HF datasets cache>/lf-assistant/<hub>/<org>--<name>``. The download writes the repo's file list
first; the copy counts as cached only when every listed file is there at its listed size. The rows are then read
from that folder by ``datasets.load_dataset`` (subset, folder, split), offline, and converted like a local file's.

Which hub: ModelScope when the entry has ms_hub_url and USE_MODELSCOPE_HUB=1 (or has no hf_hub_url), as there.
Refused by name: om_hub_url (the Modelers hub), cloud_file_name (s3/gcs), and any repository or script_url folder
that holds a loading script (.py): reading it would run that code.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from engine.data.registry import DatasetSpec
from engine.errors import DataError
from engine.readers import short_repr

_HUB_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")
MANIFEST = ".lfa-manifest.json"  # the name engine.models.download writes (kept equal by a test)
SITES = {"hf": "Hugging Face", "modelscope": "ModelScope"}


@dataclass(frozen=True)
class HubDataset:
    """Where a dataset entry's rows come from, and how datasets selects them."""

    name: str
    source: str
    """hf | modelscope | script (a folder inside dataset_dir)."""
    repo_id: str
    subset: str | None
    split: str
    folder: str | None

    def describe(self) -> str:
        where = "a folder in dataset_dir" if self.source == "script" else SITES[self.source]
        extra = "".join(f", {key} {value}" for key, value in (("subset", self.subset), ("folder", self.folder))
                        if value)
        return f"{self.repo_id} ({where}{extra}, split {self.split})"


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def hub_dataset(spec: DatasetSpec) -> HubDataset:
    """The hub (or script folder) a non-local entry reads from; DataError naming what cannot be read here."""
    where = f"Dataset {short_repr(spec.name, 60)}"
    if spec.ms_hub_url and (_env_true("USE_MODELSCOPE_HUB") or not spec.hf_hub_url):
        source, repo = "modelscope", spec.ms_hub_url
    elif spec.om_hub_url and not spec.hf_hub_url:
        raise DataError(f"{where} lives on the Modelers hub (om_hub_url {spec.om_hub_url}), LLaMA-Factory's openmind "
                        "source, which lf-assistant does not download from. Use its hf_hub_url or ms_hub_url, or "
                        "put the file in dataset_dir and register it with file_name.")
    elif spec.hf_hub_url:
        source, repo = "hf", spec.hf_hub_url
    elif spec.script_url:
        source, repo = "script", spec.script_url
    elif spec.cloud_file_name:
        raise DataError(f"{where} is a cloud file ({spec.cloud_file_name}): LLaMA-Factory's s3/gcs reading needs "
                        "cloud credentials, which lf-assistant does not handle. Copy the file into dataset_dir and "
                        "register it with file_name.")
    elif spec.file_name:
        raise DataError(f"{where} is a local file ({short_repr(spec.file_name, 200)} in dataset_dir): there is "
                        "nothing to download; train on it as it is.")
    else:
        raise DataError(f"{where} names no hub repository and no file_name.")
    if source != "script" and not _HUB_ID.fullmatch(repo):  # a legacy canonical dataset has no org (wiki_qa)
        raise DataError(f"{where}: {repo!r} is not a hub id of the form org/name.")
    return HubDataset(spec.name, source, repo, spec.subset, spec.split or "train", spec.folder)


def cache_root(cache_dir: str | None = None) -> Path:
    """cache_dir, else the HF datasets cache (HF_DATASETS_CACHE, HF_HOME/datasets, ~/.cache/huggingface/datasets)."""
    if cache_dir:
        return Path(os.path.expanduser(cache_dir))
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.environ["HF_DATASETS_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "datasets"


def snapshot_dir(ref: HubDataset, cache_dir: str | None = None) -> Path:
    return cache_root(cache_dir) / "lf-assistant" / ref.source / ref.repo_id.replace("/", "--")


MAX_MANIFEST_BYTES = 64 << 20
"""A repository of a hundred thousand files lists in a few MB; a file far larger is not the list a download wrote."""


def _listing(folder: Path) -> dict[str, int | None] | None:
    """The download's file list {path in the repo: size in bytes, or null when the hub gave none}; None when there is
    none yet; DataError naming the file when it is damaged (not JSON, not a list of files in the folder with
    their sizes): a list that cannot be trusted never makes a copy count as complete."""
    from engine.jsonio import kind_words, read_record

    path = folder / MANIFEST
    fix = "The copy there is not used until the dataset is downloaded again."
    data = read_record(path, {"files": dict}, fix=fix, error=DataError, max_bytes=MAX_MANIFEST_BYTES,
                       what="the file list a dataset download writes")
    if data is None:
        return None
    files = data.get("files")
    if not files:
        raise DataError(f"{path} lists no files. {fix}")
    for name, size in files.items():
        parts = PurePosixPath(name).parts
        if not parts or name.startswith(("/", "~")) or ".." in parts or Path(name).is_absolute():
            raise DataError(f"{path} lists {short_repr(name, 80)}, which is not a path inside the download's "
                            f"folder. {fix}")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise DataError(f"{path}: the size of {short_repr(name, 80)} must be a whole number of bytes, not "
                            f"{kind_words(size)}. {fix}")
    return files


def missing_files(folder: Path) -> list[str] | None:
    """Files the download's list names that are absent or of another size ([] when complete); None when the
    folder holds no listing (never downloaded, or stopped before the list arrived); DataError when the list is
    damaged."""
    listed = _listing(folder)
    if listed is None:
        return None
    missing = []
    for name, size in listed.items():
        path = folder / name
        if not path.is_file() or (size and path.stat().st_size != size):
            missing.append(name)
    return missing


def listing_damage(folder: Path) -> str | None:
    """What is wrong with the download's file list in `folder`, or None (none there yet, or intact)."""
    try:
        _listing(folder)
    except DataError as exc:
        return str(exc)
    return None


def is_cached(ref: HubDataset, cache_dir: str | None = None) -> bool:
    try:
        return missing_files(snapshot_dir(ref, cache_dir)) == []
    except DataError:  # a damaged list: downloading again writes a new one
        return False


def download_status(spec: DatasetSpec, cache_dir: str | None = None) -> str:
    """One line for `train --check`: where the dataset comes from and whether it is downloaded."""
    try:
        ref = hub_dataset(spec)
    except DataError as exc:
        return f"{spec.name}: refused: {exc}"
    if ref.source == "script":
        return f"{spec.name}: read from {ref.describe()}, no download"
    folder = snapshot_dir(ref, cache_dir)
    try:
        missing = missing_files(folder)
    except DataError as exc:
        return (f"{spec.name}: {ref.describe()}: needs a download: {exc} (training downloads it when online, or run "
                f"`lf-assistant data download {spec.name}`)")
    if missing == []:
        return f"{spec.name}: {ref.describe()}: downloaded and complete in {folder}"
    state = "partly downloaded" if missing else "needs a download"
    return (f"{spec.name}: {ref.describe()}: {state}, not cached (training downloads it when online, or run "
            f"`lf-assistant data download {spec.name}`)")


def _has_loading_script(folder: Path) -> bool:
    return any(path.suffix == ".py" for path in folder.iterdir() if path.is_file())


def read_hub_records(spec: DatasetSpec, dataset_dir: Path, cache_dir: str | None = None):
    """(where, rows) of a hub or script_url dataset, read by datasets.load_dataset as LLaMA-Factory reads it."""
    ref = hub_dataset(spec)
    if ref.source == "script":
        from engine.data.registry import dataset_file_path

        folder = dataset_file_path(DatasetSpec(name=spec.name, file_name=spec.script_url), dataset_dir)
        if not folder.is_dir():
            raise DataError(f"Dataset {spec.name!r}: script_url {spec.script_url} is not a folder in dataset_dir.")
    else:
        folder = snapshot_dir(ref, cache_dir)
        if not is_cached(ref, cache_dir):
            damage = listing_damage(folder)
            where = f": {damage} Run" if damage else f" and is not in the cache ({folder}): run"
            raise DataError(f"Dataset {spec.name!r} ({ref.describe()}) needs a download{where} `lf-assistant data "
                            f"download {spec.name}` (training downloads it itself when online).")
    if _has_loading_script(folder):
        raise DataError(f"Dataset {spec.name!r} ({ref.describe()}) comes with a loading script (.py): reading it "
                        "would run that code, which lf-assistant does not do (datasets >= 4 refuses it too). Use a "
                        "version of the dataset published as data files (parquet, json, csv).")
    return folder, _load_rows(folder, ref, cache_dir)


def _load_rows(folder: Path, ref: HubDataset, cache_dir: str | None) -> list[dict]:
    from datasets import load_dataset

    from engine.data.tokenized import quiet_datasets

    try:
        with quiet_datasets():
            rows = load_dataset(str(folder), name=ref.subset, data_dir=ref.folder, split=ref.split,
                                cache_dir=str(cache_root(cache_dir) / "lf-assistant" / "arrow"))
    except (ValueError, FileNotFoundError, KeyError) as exc:
        raise DataError(f"Dataset {ref.name!r} ({ref.describe()}) cannot be read from {folder}: "
                        f"{str(exc).splitlines()[0][:300]}. Check subset, folder and split in dataset_info.json.") \
            from None
    return rows.to_list()
