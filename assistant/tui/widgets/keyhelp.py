"""The help line at the bottom of every screen: the keys that work here, in the interface language."""

from __future__ import annotations

from textual.widgets import Static

from assistant.i18n import t


def help_text(keys: list[tuple[str, str]]) -> str:
    return "  ".join(f"[b]{key}[/b] {t(label)}" for key, label in keys)


class KeyHelp(Static):
    DEFAULT_CSS = "KeyHelp { dock: bottom; height: 1; background: $panel; color: $text; padding: 0 1; }"

    def __init__(self, keys: list[tuple[str, str]], **kwargs) -> None:
        super().__init__(help_text(keys), **kwargs)
