"""A loss chart drawn in the terminal (plotext), one or more series on shared axes.

Each series has its own marker (braille dots, •, x, +), named in a legend line above the plot, so the curves
tell apart without colour. Series with another scale (DPO's reward margins next to a loss of ~0.7) can go on a
right-hand axis.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from assistant.i18n import t

MARKERS: tuple[tuple[str, str], ...] = (("braille", "⠤"), ("dot", "•"), ("x", "x"), ("+", "+"))


def legend(names: list[str], right: set[str]) -> Text:
    """`⠤ loss  • rewards/accuracies  x rewards/margins (right axis)` in the series' colours."""
    colours = ("blue", "green", "red", "magenta")
    text = Text()
    for index, name in enumerate(names):
        marker = MARKERS[index % len(MARKERS)][1]
        label = f"{name} ({t('chart.right_axis')})" if name in right else name
        text.append(f"{marker} {label}", style=colours[index % len(colours)])
        text.append("  ")
    return text


def render_chart(series: dict[str, list[tuple[float, float]]], width: int, height: int,
                 right: set[str] | frozenset[str] = frozenset()) -> Text:
    """The chart as styled text; a note instead when no series has two points yet.

    plotext keeps one global figure, so this runs on the event loop only (about 15 ms per draw).
    """
    drawable = {name: points for name, points in series.items() if len(points) >= 2}
    if not drawable:
        return Text(t("chart.waiting"), style="dim")
    import plotext as plt

    several = len(drawable) > 1
    figure = plt.figure
    figure.clear()
    figure.plot_size(max(20, width), max(6, height - (1 if several else 0)))
    figure.theme("simple")
    for index, (name, points) in enumerate(drawable.items()):
        xs, ys = zip(*points)
        marker = MARKERS[index % len(MARKERS)][0]
        side = "right" if name in right else None
        figure.draw(figure.signal(list(xs), list(ys), marker=marker, yside=side).lines(True))
    plot = Text.from_ansi(str(figure.build()).rstrip("\n"))
    if not several:
        return plot
    return Text("\n").join([legend(list(drawable), set(right)), plot])


class LossChart(Static):
    """Redraws itself from (step, value) series; sized to the space it is given."""

    DEFAULT_CSS = "LossChart { height: 12; }"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._series: dict[str, list[tuple[float, float]]] = {}
        self._right: set[str] = set()

    def set_series(self, series: dict[str, list[tuple[float, float]]], right: list[str] | tuple = ()) -> None:
        self._series = {name: list(points) for name, points in series.items()}
        self._right = set(right)
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        width = self.content_size.width or 50
        height = self.content_size.height or 10
        self.update(render_chart(self._series, width, height, self._right))
