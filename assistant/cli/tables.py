"""Tables that fit the terminal: no word is ever split across lines.

Rich shrinks every column of a table that is too wide, cutting ids and even headers letter by letter
(`meth od`, `lf-t iny-`). Here each column keeps its natural width; when the table is too wide, the columns a
listing can do without are dropped (highest `drop` first, and the output says which), one column may wrap at
spaces (a problem message, a process list), and when even that does not fit each row is printed as a block of
`header: value` lines. Ids are never shortened: people copy them into the next command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

GAP = 3
"""Characters between two columns with box.SIMPLE_HEAD (a separator and one space of padding each side)."""


@dataclass(frozen=True)
class Column:
    header: str
    justify: str = "left"
    drop: int = 0
    """0: always shown; otherwise dropped on a narrow terminal, the highest number first."""
    wrap: bool = False
    """Takes the width left over and wraps at spaces (at most one such column per table)."""
    min_width: int = 20
    """With wrap: the narrowest it may become before the table switches to blocks."""


def cell_width(cell: str) -> int:
    return max((Text.from_markup(line).cell_len for line in cell.split("\n")), default=0)


def layout(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[int] | None:
    """The indices of the columns to show, or None when no choice of columns fits (print blocks instead)."""
    natural = [max([cell_width(col.header)] + [cell_width(row[i]) for row in rows]) for i, col in enumerate(columns)]

    def needed(kept: list[int]) -> int:
        widths = [min(natural[i], columns[i].min_width) if columns[i].wrap else natural[i] for i in kept]
        return sum(widths) + GAP * (len(kept) - 1)

    kept = list(range(len(columns)))
    while needed(kept) > width:
        droppable = [i for i in kept if columns[i].drop]
        if not droppable:
            return None
        kept.remove(max(droppable, key=lambda i: (columns[i].drop, i)))
    return kept


def print_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]], *,
                title: str | None = None) -> None:
    """Print `rows` (cells may carry rich markup) as a table that fits `console.width`."""
    if title:
        console.print(title, soft_wrap=False)
    kept = layout(columns, rows, console.width)
    if kept is None:
        _print_blocks(console, columns, rows)
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for i in kept:
        column = columns[i]
        table.add_column(column.header, justify=column.justify, no_wrap=not column.wrap,
                         overflow="fold" if column.wrap else "ellipsis",
                         min_width=min(column.min_width, max(cell_width(r[i]) for r in rows) if rows else 0)
                         if column.wrap else None)
    for row in rows:
        table.add_row(*(row[i] for i in kept))
    console.print(table)
    hidden = [columns[i].header for i in range(len(columns)) if i not in kept]
    if hidden:
        console.print(f"[dim](narrow terminal: {', '.join(hidden)} not shown; --json has every field)[/]")


def _print_blocks(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> None:
    """One block per row: the first cell on its own line, then `header: value` lines wrapped at spaces only (rich
    would cut a word longer than the line; an id wider than the terminal is left whole, for copying)."""
    import textwrap

    for row in rows:
        console.print(Text.from_markup(row[0]).plain, style="bold", soft_wrap=True, markup=False, highlight=False)
        for column, cell in zip(columns[1:], row[1:]):
            text = f"  {column.header}: {Text.from_markup(cell).plain}"
            for line in textwrap.wrap(text, console.width, subsequent_indent="    ", break_long_words=False,
                                      break_on_hyphens=False) or [text]:
                console.print(line, soft_wrap=True, markup=False, highlight=False)
