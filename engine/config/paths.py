"""Folder relations the configs must respect, written once for train and export.

An output folder equal to, inside, or around the model, adapter or dataset folders would let a run overwrite its
own inputs (measured: ``output_dir=M finetuning_type=full`` rewrote M/model.safetensors), so it is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.readers import clip


def _resolved(path: str | Path) -> Path:
    return Path(os.path.expanduser(str(path))).resolve()


def _relation(out: Path, source: Path) -> str | None:
    if out == source:
        return "is"
    if source in out.parents:
        return "is inside"
    if out in source.parents:
        return "contains"
    return None


def output_overlap_problems(out_key: str, out_dir: str | Path | None,
                            sources: list[tuple[str, Any]]) -> list[str]:
    """A problem for each existing source folder that ``out_dir`` equals, lies inside, or contains.

    ``sources``: (config key, folder) pairs; values that are not existing local paths (hub ids, None) are skipped.
    """
    if not out_dir:
        return []
    out = _resolved(out_dir)
    problems = []
    for key, value in sources:
        if not value or not Path(os.path.expanduser(str(value))).exists():
            continue
        source = _resolved(value)
        relation = _relation(out, source)
        if relation:
            problems.append(f"{out_key} {clip(out_dir, 200)} {relation} the {key} folder {clip(source, 200)}: "
                            f"writing there could overwrite it. Choose an {out_key} outside it.")
    return problems


def dataset_dir_of(config: Any) -> Path:
    """The folder holding dataset_info.json for a training config (relative: the config's folder, then the
    working dir). The one place the config's dataset_dir is resolved; DataError when there is none."""
    from engine.data.registry import find_dataset_dir

    return find_dataset_dir(config.dataset_dir, config_dir=Path(config.config_dir) if config.config_dir else None)


def find_relative_file(path: str, base_dir: Path) -> Path | None:
    """A file a config names by a relative path: from the working dir, the config's folder, then the config's
    parent folders (LLaMA-Factory's examples name files relative to its repository root, where its CLI runs:
    examples/deepspeed/ds_z3_config.json). None when no candidate is a file."""
    candidate = Path(os.path.expanduser(path))
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    for root in (Path.cwd(), base_dir, *base_dir.resolve().parents):
        if (root / candidate).is_file():
            return (root / candidate).resolve()
    return None
