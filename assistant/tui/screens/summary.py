"""The closing summary: what was produced, how training went, validation, export, the chat command. Nothing more."""

from __future__ import annotations

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from assistant.formatting import fmt_duration
from assistant.i18n import t
from assistant.tui.screens.base import StageScreen
from assistant.wizard.stages.summary import summarize


class SummaryScreen(StageScreen):
    STAGE = "summary"
    KEYS = [("^Q", "key.quit"), ("F2", "key.runs")]
    BINDINGS = [Binding("enter", "app.quit_wizard", show=False)]

    def compose_body(self) -> ComposeResult:
        yield Static("", id="summary")

    def on_mount(self) -> None:
        super().on_mount()
        if "summary" not in self.state.done:
            self.wizard.commit(self.state.replace(done=[*self.state.done, "summary"]))
        info = summarize(self.state, self.wizard.run_folder)
        rows = [("summary.run_folder", info.run_folder),
                ("summary.adapter" if info.output_kind == "adapter" else "summary.model", info.output_dir),
                ("summary.loss_plot", info.loss_plot),
                ("summary.training", t("summary.training_value", steps=info.steps, epochs=info.epochs,
                                       loss=info.final_loss, runtime=fmt_duration(info.runtime_s))),
                ("summary.rewards", info.rewards),
                ("summary.validation", info.validation),
                ("summary.export", info.export_dir),
                ("summary.chat", info.chat_command)]
        lines = [f"[b]{t(key)}[/b]  {escape(str(value))}" for key, value in rows if value]
        self.query_one("#summary", Static).update("\n".join(lines))

    def action_back(self) -> None:
        """The run is finished: nothing to go back to."""
