"""The closing summary: what was produced, how training went, validation, export, the chat command. Nothing more."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from assistant.formatting import safe
from assistant.i18n import t
from assistant.tui.screens.base import StageScreen
from assistant.wizard.stages.summary import summarize


class SummaryScreen(StageScreen):
    STAGE = "summary"
    KEYS = [("c", "key.chat"), ("^Q", "key.quit"), ("F2", "key.runs")]
    BINDINGS = [Binding("enter", "app.quit_wizard", show=False), Binding("c", "chat", show=False)]

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
                                       loss=info.final_loss, runtime=info.runtime)),
                ("summary.resumed", info.resumed),
                ("summary.rewards", info.rewards),
                ("summary.validation", info.validation),
                ("summary.export", info.export_dir),
                ("summary.load", info.load_hint),
                ("summary.chat", info.chat_command)]
        lines = [f"[b]{t(key)}[/b]  {safe(value, keep_layout=True)}" for key, value in rows if value]
        from assistant.tui.screens.validate import answer_block

        if info.answers:
            lines += ["", f"[b]{t('summary.answers')}[/b]"] + [answer_block(row) for row in info.answers]
        if info.chat_command:
            lines.append(t("summary.chat_key"))
        self.query_one("#summary", Static).update("\n".join(lines))
        self.chat_ready = bool(info.chat_command) and self.state.infer_config is not None

    def action_chat(self) -> None:
        if not getattr(self, "chat_ready", False):
            return
        from assistant.tui.screens.chat import ChatScreen
        from assistant.wizard.stages.validate import mode

        completion = mode(self.wizard.skill.stage("validate").settings) == "completion"
        self.app.push_screen(ChatScreen(completion=completion))

    def action_back(self) -> None:
        """The run is finished: nothing to go back to."""
