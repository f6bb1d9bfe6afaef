"""Where lf-assistant's own files are: the demo datasets (data/), the example configs (examples/), the wizard's
skills (skills/) and the generated docs (docs/).

In a checkout they are the folders beside the packages; an installed wheel carries them in the package
``lf_assistant_resources`` (setup.py copies them in at build time). Everything that reads them asks here.
"""

from __future__ import annotations

from importlib import resources as importlib_resources
from pathlib import Path

RESOURCE_PACKAGE = "lf_assistant_resources"
NAMES = ("data", "examples", "skills", "docs")
CHECKOUT = Path(__file__).resolve().parents[1]


def resource_dir(name: str) -> Path:
    """The folder ``name`` (data, examples, skills or docs) of this installation."""
    if name not in NAMES:
        raise ValueError(f"unknown resource folder {name!r}; known: {', '.join(NAMES)}")
    if (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / name).is_dir():
        return CHECKOUT / name
    try:
        return Path(str(importlib_resources.files(RESOURCE_PACKAGE) / name))
    except ModuleNotFoundError:
        return CHECKOUT / name  # neither a checkout nor a wheel: callers report the missing folder themselves


def shipped_example(path: str | Path) -> Path | None:
    """``examples/...`` given from a folder without one: the example shipped with lf-assistant, if it exists."""
    parts = Path(path).parts
    if not parts or parts[0] != "examples" or ".." in parts:
        return None
    candidate = resource_dir("examples").joinpath(*parts[1:])
    return candidate if candidate.is_file() else None
