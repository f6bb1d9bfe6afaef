"""The help line at the bottom of every screen: the keys that work here, in the interface language.

It folds between keys, never inside one, onto a second line when the keys do not fit the terminal's width."""

from __future__ import annotations

from rich.cells import cell_len
from rich.markup import escape
from textual.widgets import Static

from assistant.i18n import t

GAP = "  "


def help_lines(keys: list[tuple[str, str]], width: int | None = None) -> list[list[tuple[str, str]]]:
    """The keys in lines of at most `width` cells (one line when `width` is None)."""
    lines: list[list[tuple[str, str]]] = [[]]
    used = 0
    for key, label in keys:
        size = cell_len(f"{key} {t(label)}")
        if lines[-1] and width is not None and used + len(GAP) + size > width:
            lines.append([])
            used = 0
        used += (len(GAP) if lines[-1] else 0) + size
        lines[-1].append((key, label))
    return lines


def help_text(keys: list[tuple[str, str]], width: int | None = None) -> str:
    return "\n".join(GAP.join(f"[b]{escape(key)}[/b] {escape(t(label))}" for key, label in line)
                     for line in help_lines(keys, width))


class KeyHelp(Static):
    DEFAULT_CSS = "KeyHelp { dock: bottom; height: auto; background: $panel; color: $text; padding: 0 1; }"

    def __init__(self, keys: list[tuple[str, str]], **kwargs) -> None:
        self.keys = keys
        super().__init__(help_text(keys), **kwargs)

    def set_keys(self, keys: list[tuple[str, str]]) -> None:
        """Other keys work now (a run ended): the help follows."""
        self.keys = keys
        self.on_resize()

    def on_resize(self) -> None:
        self.update(help_text(self.keys, self.size.width or None))
