"""A loss chart drawn in the terminal (plotext), one or more series on shared axes.

Each series has its own marker (braille dots, •, x, +), named in a legend line above the plot, so the curves
tell apart without colour. Series with another scale (DPO's reward margins next to a loss of ~0.7) can go on a
right-hand axis.
"""

from __future__ import annotations

import math

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Static

from assistant.i18n import t

MARKERS: tuple[tuple[str, str], ...] = (("braille", "⠤"), ("dot", "•"), ("x", "x"), ("+", "+"))
# Room above the highest and below the lowest value, as a share of their span: a point on the edge of the plot
# reads as cut off.
Y_MARGIN = 0.05


def legend(names: list[str], right: set[str], note: str = "", width: int | None = None) -> Text:
    """`⠤ loss  • rewards/accuracies  x rewards/margins (right axis)` in the series' colours, then `note` (what a
    point is) dimmed; with `width`, an entry that would run past it starts the next line (never cut in two: the
    compare view's entries are run ids)."""
    colours = ("blue", "green", "red", "magenta")
    entries = []
    for index, name in enumerate(names):
        label = f"{name} ({t('chart.right_axis')})" if name in right else name
        entries.append((f"{MARKERS[index % len(MARKERS)][1]} {label}", colours[index % len(colours)]))
    if note:
        entries.append((note, "dim"))
    text = Text()
    used = 0
    for entry, style in entries:
        if width is not None and used and used + 2 + cell_len(entry) > width:
            text.append("\n")
            used = 0
        elif used:
            text.append("  ")
            used += 2
        text.append(entry, style=style)
        used += cell_len(entry)
    return text


def y_range(values: list[float]) -> tuple[float, float]:
    """The lowest and highest value with Y_MARGIN of their span around them (a flat series: of the value)."""
    low, high = min(values), max(values)
    margin = (high - low) * Y_MARGIN or abs(high) * Y_MARGIN or 1.0
    return low - margin, high + margin


def nice_ticks(low: float, high: float, count: int, *, whole: bool = False) -> tuple[list[float], list[str]]:
    """About ``count`` evenly spaced round ticks (1, 2 or 5 x 10^k apart, the spacing nearest to an even split)
    inside [low, high], with labels that
    show the same number of decimals; ``whole`` keeps them whole numbers (training steps)."""
    span = high - low
    if not math.isfinite(span) or span <= 0:
        return [low], [_tick_label(low, 1.0 if whole else abs(low) / 10 or 1.0)]
    raw = span / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 5, 10)), key=lambda candidate: abs(math.log(candidate / raw)))
    if whole:
        step = max(1.0, round(step))
    first = math.ceil(low / step - 1e-9) * step
    positions = [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]
    return positions, [_tick_label(p, step) for p in positions]


def _tick_label(value: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    return f"{value:.{decimals}f}"


def render_chart(series: dict[str, list[tuple[float, float]]], width: int, height: int,
                 right: set[str] | frozenset[str] = frozenset(), note: str = "") -> Text:
    """The chart as styled text; a note instead when no series has two points yet. A legend line names the series
    when there are several, and says what a point is (`note`) when that is given.

    plotext keeps one global figure, so this runs on the event loop only (about 15 ms per draw).
    """
    drawable = {name: points for name, points in series.items() if len(points) >= 2}
    if not drawable:
        return Text(t("chart.waiting"), style="dim")
    import plotext as plt

    titled = len(drawable) > 1 or bool(note)
    key = legend(list(drawable), set(right), note, width) if titled else None
    figure = plt.figure
    figure.clear()
    figure.plot_size(max(20, width), max(6, height - (len(key.plain.splitlines()) if key else 0)))
    figure.theme("simple")
    for index, (name, points) in enumerate(drawable.items()):
        xs, ys = zip(*points)
        marker = MARKERS[index % len(MARKERS)][0]
        side = "right" if name in right else None
        figure.draw(figure.signal(list(xs), list(ys), marker=marker, yside=side).lines(True))
    # Round ticks: whole steps along the bottom, evenly spaced values up the side(s) (plotext's own are not). The
    # ranges are set too: from the ticks alone plotext takes the span of the ticks, which cut off the points past
    # them (the first, highest loss of a curve whose first step lies before the first tick).
    xs = [x for points in drawable.values() for x, _ in points]
    figure.ruler(axis=0, side=0).lim(min(xs), max(xs)).ticks(*nice_ticks(min(xs), max(xs), max(2, width // 7),
                                                                          whole=True))
    for side in (0, 1):
        ys = [y for name, points in drawable.items() if (name in right) == bool(side) for _, y in points]
        if ys:
            low, high = y_range(ys)
            figure.ruler(axis=1, side=side).lim(low, high).ticks(*nice_ticks(low, high, max(2, round(height / 2.5))))
    plot = Text.from_ansi(str(figure.build()).rstrip("\n"))
    return Text("\n").join([key, plot]) if key else plot


class LossChart(Static):
    """Redraws itself from (step, value) series; sized to the space it is given."""

    DEFAULT_CSS = "LossChart { height: 12; }"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._series: dict[str, list[tuple[float, float]]] = {}
        self._right: set[str] = set()
        self._note = ""

    def set_series(self, series: dict[str, list[tuple[float, float]]], right: list[str] | tuple = (),
                   note: str = "") -> None:
        """`note` says what a point is (the mean of each logging window), above the plot."""
        self._series = {name: list(points) for name, points in series.items()}
        self._right, self._note = set(right), note
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        width = self.content_size.width or 50
        height = self.content_size.height or 10
        self.update(render_chart(self._series, width, height, self._right, self._note))
