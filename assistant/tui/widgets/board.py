"""The side panel every screen shows: the progress board, the run id, the device, and any background download."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from assistant.i18n import t
from assistant.wizard.skill import MARK_TEXT

MARK_STYLE = {"done": "green", "current": "bold yellow", "todo": "", "skipped": "dim"}


def board_text(marks: list[tuple[str, str]], *, run_id: str, device: str, fetch: str | None) -> Text:
    """Plain data in, styled text out (kept free of app state so it is easy to test)."""
    text = Text()
    text.append(t("board.title") + "\n", style="bold")
    for line, mark in marks:
        text.append(f"{MARK_TEXT[mark]} {t('board.' + line)}\n", style=MARK_STYLE[mark])
    text.append("\n" + t("board.run") + "\n", style="bold")
    text.append(run_id + "\n", style="cyan")
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
