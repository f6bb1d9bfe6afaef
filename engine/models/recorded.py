"""Where `lf-assistant models download` put each model, recorded in the user's cache, so that a model downloaded
into a project's ./models/ is found from any working folder.

``downloads.json`` in the cache folder (``$LFA_CACHE_DIR``, else ``$XDG_CACHE_HOME/lf-assistant``, else
``~/.cache/lf-assistant``) maps a model's id to the absolute folders it was downloaded into, newest last. A
recorded folder is used only while it still carries the download's own mark naming that model (a folder moved,
deleted or replaced since is passed over), and whoever finds a model there says so (engine.models.cache's
``where == "recorded"``): nothing is guessed from a path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine.jsonio import read_json_dict, write_text_atomic

TARGET_MARK = ".lfa-download.json"
"""Written into a download's target before anything else: what the folder is a download of. Only a folder that
carries it for the same model (or an earlier download's hub cache) is resumed into; any other folder that is not
empty is the user's and is refused, since a download writes config.json, README.md and weights over files of the
same name, and a resume deletes damaged *.safetensors. A recorded folder is found only while it carries it."""
INDEX_FILE = "downloads.json"
# A few folders per model are plenty (a project's models/ and a copy elsewhere); older ones drop off.
KEEP_PER_MODEL = 8


def cache_dir() -> Path:
    """lf-assistant's folder in the user's cache (read from the environment each time: tests move it)."""
    if os.environ.get("LFA_CACHE_DIR"):
        return Path(os.environ["LFA_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "lf-assistant"


def index_path() -> Path:
    return cache_dir() / INDEX_FILE


def _read_index() -> dict[str, list[str]]:
    data = read_json_dict(index_path())
    return {key: [p for p in value if isinstance(p, str)] for key, value in data.items()
            if isinstance(key, str) and isinstance(value, list)}


def record_download(model_id: str, folder: Path) -> None:
    """Remember that ``model_id`` was downloaded, complete, into ``folder``. A cache that cannot be written costs
    only this convenience: the download itself is done, so nothing is raised."""
    path = str(Path(folder).resolve())
    try:
        index = _read_index()
        kept = [p for p in index.get(model_id, []) if p != path]
        index[model_id] = [*kept, path][-KEEP_PER_MODEL:]
        write_text_atomic(index_path(), json.dumps(index, indent=2, ensure_ascii=False))
    except OSError:
        pass


def recorded_folders(model_ids: list[str]) -> list[Path]:
    """Folders recorded for any of ``model_ids``, newest first, that still hold the download of that model."""
    index, found = _read_index(), []
    for model_id in dict.fromkeys(model_ids):
        for text in reversed(index.get(model_id, [])):
            folder = Path(text)
            if folder.is_dir() and read_json_dict(folder / TARGET_MARK).get("model") == model_id:
                found.append(folder)
    return list(dict.fromkeys(found))
