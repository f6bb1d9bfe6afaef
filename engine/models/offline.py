"""Cheap checks made before anything loads: is a hub id reachable offline, is there a CUDA device."""

from __future__ import annotations

import os
import re

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def offline_mode() -> bool:
    """True when the user or the environment asked for no network (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    return any(os.environ.get(k, "").lower() in ("1", "true", "yes") for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def hub_id_problem(model: str) -> str | None:
    """A sentence when ``model`` cannot be a usable hub id here; None when it can (cached, or online)."""
    if not _HUB_ID.match(model):
        return (f"model_name_or_path {model!r} is neither an existing folder nor a hub id of the form org/name. "
                "Check the path, or leave it empty for the built-in demo model.")
    try:
        from engine.models.cache import find_local_model
    except ImportError:
        return None
    check = find_local_model(model)
    if check.complete:
        return None
    if offline_mode():
        return (f"{model} is not in the local caches and the hub is offline (HF_HUB_OFFLINE=1). Download it first "
                "(`lf-assistant models download ID`) or point model_name_or_path at a local folder.")
    return None
