"""The side panel every screen shows: the progress board, the run id, the device, and any background download."""

from __future__ import annotations

import re

from rich.text import Text
from textual.widgets import Static

from assistant.i18n import t
from assistant.wizard.skill import MARK_TEXT

MARK_STYLE = {"done": "green", "current": "bold yellow", "todo": "", "skipped": "dim"}
# The board is 24 columns with a border and padding: 21 cells of text per line.
RUN_ID_WIDTH = 21
# A run id's parts: its time stamp whole (an id ends with it, and -2, -3... when runs started in the same second),
# else a piece up to and with a `_` or `-`.
RUN_ID_PARTS = re.compile(r"\d{8}_\d{6}(?:-\d+)?$|[^_-]*[_-]|[^_-]+")


def run_id_lines(run_id: str, width: int = RUN_ID_WIDTH) -> list[str]:
    """The whole run id in lines of at most `width` cells, broken after a `_` or `-` and with its time stamp kept
    on one line (lf-tiny-qwen3_lora_20260102_030405 -> lf-tiny-qwen3_lora_ / 20260102_030405): the user types
    it back for `lf-assistant --resume RUN_ID`, so none of it is left out. A part wider than a line is cut."""
    lines = [""]
    for part in RUN_ID_PARTS.findall(run_id):
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        while len(lines[-1]) + len(part) > width:
            cut = width - len(lines[-1])
            lines[-1] += part[:cut]
            lines.append("")
            part = part[cut:]
        lines[-1] += part
    return [line for line in lines if line]


def board_text(marks: list[tuple[str, str]], *, run_id: str, device: str, fetch: str | None) -> Text:
    """Plain data in, styled text out (kept free of app state so it is easy to test)."""
    text = Text()
    text.append(t("board.title") + "\n", style="bold")
    for number, (line, mark) in enumerate(marks):  # numbered as the screen headers are (Skill.stage_number)
        text.append(f"{MARK_TEXT[mark]} {number}. {t('board.' + line)}\n", style=MARK_STYLE[mark])
    text.append("\n" + t("board.run") + "\n", style="bold")
    text.append("\n".join(run_id_lines(run_id)) + "\n", style="cyan")
    text.append(t("board.device", device=device) + "\n")
    if fetch:
        text.append(fetch + "\n", style="magenta")
    return text


class ProgressBoard(Static):
    """Refreshed by the app whenever the state, the stage or a background download changes."""

    def on_mount(self) -> None:
        self.refresh_board()

    def refresh_board(self) -> None:
        app = self.app
        state = getattr(app, "state", None)
        if state is None:
            return
        marks = app.skill.board_marks(state.stage, state.done, state.answers())
        self.update(board_text(marks, run_id=state.run_id, device=app.device_label(), fetch=app.fetch_text))
