"""A loss chart drawn in the terminal (plotext, braille dots), one or more series on shared axes."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from assistant.i18n import t


def render_chart(series: dict[str, list[tuple[float, float]]], width: int, height: int) -> Text:
    """The chart as styled text; a note instead when no series has two points yet.

    plotext keeps one global figure, so this runs on the event loop only (about 15 ms per draw).
    """
    drawable = {name: points for name, points in series.items() if len(points) >= 2}
    if not drawable:
        return Text(t("chart.waiting"), style="dim")
    import plotext as plt

    figure = plt.figure
    figure.clear()
    figure.plot_size(max(20, width), max(6, height))
    figure.theme("simple")
    for name, points in drawable.items():
        xs, ys = zip(*points)
        signal = figure.signal(list(xs), list(ys), marker="braille").lines(True)
        if len(drawable) > 1:
            signal = signal.label(name)
        figure.draw(signal)
    return Text.from_ansi(str(figure.build()).rstrip("\n"))


class LossChart(Static):
    """Redraws itself from (step, loss) series; sized to the space it is given."""

    DEFAULT_CSS = "LossChart { height: 12; }"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._series: dict[str, list[tuple[float, float]]] = {}

    def set_series(self, series: dict[str, list[tuple[float, float]]]) -> None:
        self._series = {name: list(points) for name, points in series.items()}
        self._redraw()

    def on_resize(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        width = self.content_size.width or 50
        height = self.content_size.height or 10
        self.update(render_chart(self._series, width, height))
