"""Sentences the engine writes for people, kept as a code with the values in them beside their English text.

The CLI prints ``text``. A front end in another language renders ``code`` with ``fields`` through its own catalog
and falls back to ``text`` for a code it does not know (lf-assistant: the ``engine.<code>`` keys of its catalogs).
Fields are plain JSON values, a nested message as a dict (``to_dict``), or a list of those (a front end joins
the list with its own separator), so a message survives a child process's JSON output and a saved state file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Message:
    code: str
    text: str
    """The engine's own English rendering."""
    fields: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.text

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "text": self.text,
                "fields": {name: _plain(value) for name, value in self.fields.items()}}


def _plain(value: Any) -> Any:
    if isinstance(value, Message):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value
