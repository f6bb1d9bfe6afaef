"""Reading small JSON files that may be missing or damaged (configs of model folders, run records)."""

from __future__ import annotations

import json
from pathlib import Path


def read_json_dict(path: str | Path) -> dict:
    """The file's JSON object, or {} when it is missing, unreadable, invalid or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
