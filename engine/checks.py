"""A verification result, as the export and the model import record it (lfa_export.json, lfa_import.json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.messages import Message


@dataclass
class Check:
    """One verification: what was checked, whether it passed, and the figures behind it. ``name_message`` and
    ``detail_message``: the same as engine.messages.Message, for a front end in another language (recorded as
    their dicts)."""

    name: str
    passed: bool
    detail: str
    measured: float | None = None
    tolerance: float | None = None
    name_message: Message | None = None
    detail_message: Message | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def with_faults(detail: Message, faults: list[Message]) -> Message:
    """A check's detail followed by what failed, each fault its own sentence ('...; missing: lm_head.weight')."""
    if not faults:
        return detail
    return Message("check.faults", "; ".join([detail.text, *(fault.text for fault in faults)]),
                   {"detail": detail, "faults": faults})
