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


def short_run_id(run_id: str, width: int = RUN_ID_WIDTH) -> str:
    """The run id on one line: whole when it fits, else its start and its time stamp around an ellipsis
    (lf-tiny-qwen3_lora_20260102_030405 -> lf-tiny-qwen3_…030405), cut at a `_` where one is close. The start
    names the model, the time tells runs of the same model apart; the full id is printed on exit."""
    if len(run_id) <= width:
        return run_id
    stamp = re.search(r"\d{6}(?:-\d+)?$", run_id)
    tail = stamp.group(0) if stamp else run_id[-(width // 3):]
    head = run_id[:width - len(tail) - 1]
    cut = head.rfind("_")
    if cut >= len(head) // 2:
        head = head[:cut + 1]
    return f"{head}…{tail}"


def board_text(marks: list[tuple[str, str]], *, run_id: str, device: str, fetch: str | None) -> Text:
    """Plain data in, styled text out (kept free of app state so it is easy to test)."""
    text = Text()
    text.append(t("board.title") + "\n", style="bold")
    for number, (line, mark) in enumerate(marks):  # numbered as the screen headers are (Skill.stage_number)
        text.append(f"{MARK_TEXT[mark]} {number}. {t('board.' + line)}\n", style=MARK_STYLE[mark])
    text.append("\n" + t("board.run") + "\n", style="bold")
    text.append(short_run_id(run_id) + "\n", style="cyan")
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
