"""Stage 7: export — merge (LoRA/QLoRA) or re-save (Full/Freeze), into a folder the user names; export.yaml shown
as a table and confirmed before it is written; never into a quantized base."""

from __future__ import annotations

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.widgets import Button, Input, ProgressBar, Static
from textual.worker import get_current_worker

from assistant.i18n import t
from assistant.tui.messages import ProcessFinished, ProcessProgressed
from assistant.tui.process import stream
from assistant.tui.screens.base import StageScreen
from assistant.tui.widgets.dialogs import ConfirmTable
from assistant.wizard.stages import export
from assistant.wizard.stages.gpu import device_env
from assistant.wizard.stages.train import display_path, elsewhere_command, read_run_config


class ExportScreen(StageScreen):
    STAGE = "export"

    def __init__(self) -> None:
        super().__init__()
        self.train_config: dict = {}
        self.config: dict | None = None

    def compose_body(self) -> ComposeResult:
        merges = export.merges(self.state.method)
        yield Static(t("export.meaning_merge" if merges else "export.meaning_full"), id="meaning")
        yield Static(t("export.folder"), classes="question")
        # The folder gets the whole line: a path beside the button scrolled its start out of view at 80x24.
        yield Input(id="export-dir")
        yield Button(t("export.review"), id="review", variant="primary")
        yield Button(t("export.run"), id="run", variant="warning")
        yield ProgressBar(id="progress", show_eta=False)
        yield Static("", id="export-result")
        yield Button(t("button.continue"), id="continue", variant="primary")

    def on_mount(self) -> None:
        super().on_mount()
        for widget in ("#run", "#progress", "#continue"):
            self.query_one(widget).display = False
        self.train_config, problems = read_run_config(self.wizard.run_folder, self.wizard.skill.config_file)
        if problems:
            self.say(problems)
            return
        field = self.query_one("#export-dir", Input)
        field.value = display_path(self.state.export_dir or export.default_dir(self.state, self.wizard.skill,
                                                                                  self.train_config))
        field.focus()
        quantized = export.quantized_base_problem(self.state, self.train_config)
        if quantized:
            self.say([quantized])
        if self.state.exported:
            self._done(self.state.export_dir)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._review()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        actions = {"review": self._review, "run": self._run, "continue": self.submit}
        if event.button.id in actions:
            actions[event.button.id]()

    def _review(self) -> None:
        outcome = export.set_export_dir(self.state, self.query_one("#export-dir", Input).value)
        if not outcome.ok:
            self.say(outcome.problems)
            return
        self.wizard.commit(outcome.state)
        self.config = export.export_config(self.state, self.train_config, self.state.export_dir, self.wizard.skill)
        problems = export.check_export(self.state, self.config, self.train_config.get("template"), self.train_config)
        if problems:
            self.say(problems)
            return
        self.app.push_screen(ConfirmTable(t("export.confirm_title"), list(self.config.items())),
                             callback=self._confirmed)

    def _confirmed(self, yes: bool) -> None:
        if not yes:
            self.say(info=[t("export.not_written")])
            return
        from engine.config import dump_yaml

        dump_yaml(self.config, self.wizard.run_folder / export.EXPORT_FILE)
        self.wizard.commit(self.state.replace(export_config=self.config))
        if self.state.execution != "run_here":
            command = elsewhere_command(self.state, "export", self.wizard.run_folder / export.EXPORT_FILE)
            self.query_one("#export-result", Static).update(t("export.command", command=escape(command)))
            self.query_one("#continue").display = True
            return
        self._run()  # what the confirmation asked for: the export starts now

    def _run(self) -> None:
        self.query_one("#run").display = True
        self.query_one("#review").display = False
        self.query_one("#run", Button).disabled = True
        self.query_one("#progress").display = True
        self.say(info=[t("export.running")])
        self.run_export()

    @work(thread=True, exclusive=True, group="export")
    def run_export(self) -> None:
        worker = get_current_worker()
        result: dict = {}

        def on_line(line: str) -> None:
            parsed = export.parse_line(line)
            if parsed and parsed[0] == "progress":
                # Step i is announced as it begins: the bar counts the steps finished, so it is not full while the
                # last one (writing the tokenizer, or the GGUF file) still runs.
                begun, total = parsed[1]
                self.post_message(ProcessProgressed(begun - 1, total, line=line))
            elif parsed:
                result["dir"] = parsed[1]

        code, lines = stream(export.export_command(self.wizard.run_folder), device_env(self.state.device), on_line,
                             log_path=self.wizard.run_folder / "export.log", should_stop=lambda: worker.is_cancelled)
        self.post_message(ProcessFinished(code, lines, result.get("dir")))

    def on_process_progressed(self, message: ProcessProgressed) -> None:
        self.query_one("#progress", ProgressBar).update(total=message.total, progress=message.done)

    def on_process_finished(self, message: ProcessFinished) -> None:
        self.query_one("#run", Button).disabled = False
        self.query_one("#run", Button).label = t("export.run_again")
        self.query_one("#progress").display = False
        if message.returncode != 0 or not message.result:
            self.say(export.failure_lines(message.lines) or [t("export.failed")])
            return
        self.wizard.commit(self.state.replace(exported=True, export_dir=message.result))
        self.say(info=export.result_lines(message.lines, message.result))
        self._done(message.result)

    def _done(self, folder: str | None) -> None:
        self.query_one("#export-result", Static).update(t("export.done", path=escape(display_path(folder or "-"))))
        self.query_one("#run").display = False
        self.query_one("#continue").display = True
        self.query_one("#continue", Button).focus()

    def submit(self) -> None:
        written = (self.wizard.run_folder / export.EXPORT_FILE).is_file() and self.state.export_config
        if not written:
            self._review()  # the recommended action: the folder shown, export.yaml to confirm
            return
        if self.state.execution == "run_here" and not self.state.exported:
            self.say(info=[t("export.still_running")] if self.query_one("#run", Button).disabled else
                     [t("export.not_done")])
            return
        self.wizard.advance(self.STAGE, self.state)
