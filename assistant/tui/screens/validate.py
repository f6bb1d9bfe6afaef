"""Stage 6: the interactive chat command first; infer.yaml shown as a table and confirmed before it is written;
test prompts; base vs. fine-tuned answers side by side, saved in the run folder; the chat command again."""

from __future__ import annotations

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, ProgressBar, Static, TextArea
from textual.worker import get_current_worker

from assistant.i18n import t
from assistant.tui.messages import ProcessFinished, ProcessProgressed
from assistant.tui.process import stream
from assistant.tui.screens.base import StageScreen
from assistant.tui.widgets.dialogs import ConfirmTable
from assistant.wizard.stages import validate
from assistant.wizard.stages.gpu import device_env


ANSWER_CHARS = 400


def one_line(text: object) -> str:
    """Whitespace collapsed and length capped: a model that rambles (or the random demo one) stays readable."""
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= ANSWER_CHARS else flat[:ANSWER_CHARS] + "…"


def answer_markup(text: object) -> str:
    """The answer on one line; an empty one says so (a blank cell reads as a display fault)."""
    flat = one_line(text)
    return escape(flat) if flat else f"[dim i]{escape(t('validate.empty_answer'))}[/]"


class ValidateScreen(StageScreen):
    STAGE = "validate"

    def __init__(self) -> None:
        super().__init__()
        self.infer: dict | None = None
        self.train_config: dict = {}

    def compose_body(self) -> ComposeResult:
        yield Static("", id="chat-first")
        yield Button(t("validate.review"), id="review", variant="primary")
        with Vertical(id="prompts-box"):
            yield Static(t("validate.prompts"), classes="question")
            prompts = self.state.prompts or self.stage.settings.get("default_prompts", [])
            yield TextArea("\n".join(prompts), id="prompts")
            yield Button(t("validate.run"), id="run", variant="warning")
            yield ProgressBar(id="progress", show_eta=False)
        yield Vertical(id="answers")
        yield Static("", id="chat-again")
        yield Button(t("button.continue"), id="continue", variant="primary")

    def on_mount(self) -> None:
        super().on_mount()
        from engine.config import read_yaml
        from engine.errors import EngineError

        folder = self.wizard.run_folder
        self.query_one("#chat-first", Static).update(t("validate.chat_first",
                                                       command=validate.chat_command(folder, self.state.device)))
        for widget in ("#prompts-box", "#continue", "#progress"):
            self.query_one(widget).display = False
        try:
            self.train_config = read_yaml(folder / self.wizard.skill.config_file)
            self.infer = validate.infer_config(self.state, self.train_config)
        except EngineError as exc:
            self.say([str(exc)])
            return
        if (folder / validate.INFER_FILE).is_file() and self.state.infer_config == self.infer:
            self._written()
        else:
            self._ask_confirm()
        if self.state.validated:
            self._show_answers()

    def _ask_confirm(self) -> None:
        problems = validate.check_infer_config(self.state, self.infer, self.train_config.get("template"))
        if problems:
            self.say(problems)
            return
        self.app.push_screen(ConfirmTable(t("validate.confirm_title"), list(self.infer.items())),
                             callback=self._confirmed)

    def _confirmed(self, yes: bool) -> None:
        if not yes:
            self.say(info=[t("validate.not_written")])
            return
        from engine.config import dump_yaml

        dump_yaml(self.infer, self.wizard.run_folder / validate.INFER_FILE)
        self.wizard.commit(self.state.replace(infer_config=self.infer))
        self._written()

    def _written(self) -> None:
        self.query_one("#review").display = False
        self.query_one("#prompts-box").display = True
        if self.state.execution != "run_here":
            self.query_one("#run", Button).label = t("validate.write_prompts")
        self.query_one("#prompts", TextArea).focus()

    # --------------------------------------------------------------- run
    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "review" and self.infer is not None:
            self._ask_confirm()
        elif event.button.id == "run":
            self._run()
        elif event.button.id == "continue":
            self.submit()

    def _run(self) -> None:
        outcome = validate.set_prompts(self.state, self.query_one("#prompts", TextArea).text)
        if not outcome.ok:
            self.say(outcome.problems)
            return
        self.wizard.commit(outcome.state)
        validate.write_prompts(self.wizard.run_folder, outcome.state.prompts)
        if self.state.execution != "run_here":
            limit = validate.max_new_tokens(self.state, self.stage.settings)
            self.query_one("#chat-again", Static).update(escape(t(
                "validate.commands_elsewhere", chat=validate.chat_command(self.wizard.run_folder, self.state.device),
                command=validate.batch_command_text(self.state, self.wizard.run_folder, limit))))
            self._ready_to_leave()
            return
        self.query_one("#run", Button).disabled = True
        self.query_one("#progress").display = True
        self.say(info=[t("validate.running")])
        self.run_validation()

    @work(thread=True, exclusive=True, group="validate")
    def run_validation(self) -> None:
        worker = get_current_worker()

        def on_line(line: str) -> None:
            progress = validate.parse_progress(line)
            if progress:
                self.post_message(ProcessProgressed(*progress, line=line))

        limit = validate.max_new_tokens(self.state, self.stage.settings)
        command = validate.validate_command(self.wizard.run_folder, limit)
        code, lines = stream(command, device_env(self.state.device), on_line,
                             log_path=self.wizard.run_folder / "validate.log", should_stop=lambda: worker.is_cancelled)
        self.post_message(ProcessFinished(code, lines))

    def on_process_progressed(self, message: ProcessProgressed) -> None:
        self.query_one("#progress", ProgressBar).update(total=message.total, progress=message.done)

    def on_process_finished(self, message: ProcessFinished) -> None:
        self.query_one("#run", Button).disabled = False
        if message.returncode != 0:
            errors = [line for line in message.lines if line.startswith("error")] or message.lines[-3:]
            self.say(errors or [t("validate.failed")])
            return
        self.wizard.commit(self.state.replace(validated=True))
        self.say()
        self._show_answers()

    def _show_answers(self) -> None:
        box = self.query_one("#answers", Vertical)
        box.remove_children()
        rows = validate.read_answers(self.wizard.run_folder)
        widgets = []
        for row in rows:
            block = Vertical(classes="answer")
            widgets.append(block)
        box.mount_all(widgets)
        for block, row in zip(widgets, rows, strict=True):
            block.mount(Static(f"[b]{escape(row.get('prompt', ''))}[/b]"))
            block.mount(Horizontal(Static(f"[dim]{t('validate.base')}[/dim]\n{answer_markup(row.get('base'))}"),
                                   Static(f"[green]{t('validate.tuned')}[/green]\n{answer_markup(row.get('tuned'))}"),
                                   classes="row side-by-side"))
        self.query_one("#chat-again", Static).update(
            t("validate.saved", path=validate.ANSWERS_FILE) + "\n" +
            t("validate.chat_again", command=validate.chat_command(self.wizard.run_folder, self.state.device)))
        self._ready_to_leave()

    def _ready_to_leave(self) -> None:
        self.query_one("#continue").display = True
        self.query_one("#continue", Button).focus()

    def submit(self) -> None:
        written = (self.wizard.run_folder / validate.INFER_FILE).is_file()
        if not written or (self.state.execution == "run_here" and not self.state.validated):
            self.say([t("validate.not_done")])
            return
        self.wizard.advance(self.STAGE, self.state)
