"""A verification result, as the export and the model import record it (lfa_export.json, lfa_import.json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Check:
    """One verification: what was checked, whether it passed, and the figures behind it."""

    name: str
    passed: bool
    detail: str
    measured: float | None = None
    tolerance: float | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}
