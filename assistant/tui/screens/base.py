"""What every stage screen shares: the progress board on the left, the stage's content, a message area, the help
line, and the keys to go on (Ctrl+N) and back (Esc)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from assistant.formatting import safe
from assistant.i18n import t
from assistant.tui.widgets.board import ProgressBoard
from assistant.tui.widgets.keyhelp import KeyHelp

if TYPE_CHECKING:
    from assistant.tui.app import WizardApp
    from assistant.wizard.skill import Stage
    from assistant.wizard.state import WizardState

# Stages Esc cannot leave: training was launched (or its config written) before them, so the config is fixed.
NO_BACK_STAGES = ("train", "loss", "validate", "export", "summary")
COMMON_KEYS = [("Tab", "key.move"), ("^N", "key.next"), ("Esc", "key.back"), ("^Q", "key.quit"), ("F2", "key.runs")]


class StageScreen(Screen):
    """A stage of the wizard. Subclasses set STAGE and implement compose_body() and submit()."""

    STAGE = ""
    KEYS: list[tuple[str, str]] = COMMON_KEYS
    BODY_SCROLLS = True
    """False for screens that lay out their own scrolling parts (a table inside a scrolling page scrolls twice)."""
    # Enter continues too when the focused widget has no use for it (a Button presses itself, an Input submits).
    BINDINGS = [Binding("ctrl+n", "next", show=False, priority=True), Binding("escape", "back", show=False),
                Binding("enter", "next", show=False)]

    @property
    def wizard(self) -> WizardApp:
        return self.app  # type: ignore[return-value]

    @property
    def state(self) -> WizardState:
        return self.wizard.state

    @property
    def stage(self) -> Stage:
        return self.wizard.skill.stage(self.STAGE)

    def compose(self) -> ComposeResult:
        with Horizontal(id="frame"):
            yield ProgressBoard(id="board")
            with Vertical(id="main"):
                yield Static(self.header(), id="stage-title")
                with (VerticalScroll if self.BODY_SCROLLS else Vertical)(id="body"):
                    yield from self.compose_body()
                with VerticalScroll(id="messages-box"):
                    yield Static("", id="messages")
        yield KeyHelp(self.keys(), id="keyhelp")

    def keys(self) -> list[tuple[str, str]]:
        """The key help: Esc is left out where it is refused."""
        return [k for k in self.KEYS if not (k[0] == "Esc" and self.STAGE in NO_BACK_STAGES)]

    def header(self) -> str:
        """`Stage N · Title`, N being the stage's line on the progress board (the Device screen is part of 2)."""
        title = t(self.stage.title_key)
        number = self.wizard.skill.stage_number(self.STAGE)
        return title if number is None else t("stage.header", number=number, title=title)

    def compose_body(self) -> ComposeResult:
        yield from ()

    # --- messages
    def say(self, problems: list[str] | tuple = (), notes: list[str] | tuple = (), info: list[str] | tuple = ()) -> None:
        """Show problems (red), notes (yellow) and plain information below the content; empty clears it."""
        # messages may quote what was read from disk (names, paths, a file's text): shown, never obeyed
        lines = [f"[red]✗ {safe(p, keep_layout=True)}[/]" for p in problems]
        lines += [f"[yellow]! {safe(n, keep_layout=True)}[/]" for n in notes]
        lines += [safe(i, keep_layout=True) for i in info]
        self.query_one("#messages", Static).update("\n".join(lines))
        box = self.query_one("#messages-box")
        box.display = bool(lines)

    def on_mount(self) -> None:
        self.query_one("#messages-box").display = False

    def refresh_board(self) -> None:
        for board in self.query(ProgressBoard):
            board.refresh_board()

    # --- navigation
    def action_next(self) -> None:
        self.submit()

    def on_choice_set_confirmed(self, event) -> None:
        """Enter on an answer that is already chosen: the recommended answers go on with Enter alone."""
        event.stop()
        self.action_next()

    def submit(self) -> None:
        """Check the answers and move on (each screen decides what that takes)."""

    def action_back(self) -> None:
        self.wizard.go_back()

    def fetch_changed(self) -> None:
        """Called by the app when a background download or build moved on."""
