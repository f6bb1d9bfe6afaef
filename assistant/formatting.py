"""How the front ends write numbers for people (shared by the CLI and the TUI; no heavy imports)."""

from __future__ import annotations


def fmt_duration(seconds: float | None) -> str:
    """``75`` -> ``1:15``, ``3725`` -> ``1:02:05``, None -> ``-``."""
    if seconds is None:
        return "-"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def fmt_age(seconds: float) -> str:
    """How long ago, in the largest whole unit: ``90`` -> ``1 min``, ``11000`` -> ``3 h``, ``200000`` -> ``2 d``."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def metric_words(name: str) -> str:
    """A metric's name in a sentence, in the interface language (``metric.<name>`` in the catalogs):
    ``rewards/accuracies`` -> ``reward accuracies``; a metric the catalogs do not name reads as its key."""
    from assistant.i18n import t_or

    return t_or(f"metric.{name}", name.replace("rewards/", "reward ").replace("/", " "))


def safe(value: object, *, keep_layout: bool = False) -> str:
    """`value` as text for a rich markup string: control characters shown escaped (``keep_layout``: except line
    breaks and tabs, for a message of several lines), markup brackets escaped. For anything read from data, a
    model or a file: an escape sequence in it would otherwise drive the terminal (set the clipboard, retitle)."""
    from rich.markup import escape

    from engine.data.text import escape_control

    return escape(escape_control(str(value), keep_layout=keep_layout))
