"""Stage 6: infer.yaml shown as a table and confirmed before it is written; then the test prompts, to check and
edit, and on the user's go the base and the fine-tuned model answer them and a few held-out rows of the user's data
(their answer from the data shown beside); `c` opens a chat with the tuned model (its base answering beside it). A
reward model shows the scores it gave held-out pairs instead; a pre-training run completes text."""

from __future__ import annotations

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Button, ProgressBar, Static, TextArea
from textual.worker import get_current_worker

from assistant.formatting import safe
from assistant.i18n import t
from assistant.tui.messages import InferPlanned, ProcessFinished, ProcessProgressed
from assistant.tui.process import stream
from assistant.tui.screens.base import COMMON_KEYS, StageScreen
from assistant.tui.widgets.dialogs import ConfirmTable
from assistant.wizard.stages import validate
from assistant.wizard.stages.gpu import device_env
from assistant.wizard.stages.train import read_run_config

ANSWER_CHARS = 240


def one_line(text: object, limit: int = ANSWER_CHARS) -> str:
    """Whitespace collapsed and length capped: a model that rambles (or the random demo one) stays readable."""
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def answer_markup(text: object, cut: bool = False) -> str:
    """The answer on one line; an empty one says so (a blank cell reads as a display fault); one that ran to
    max_new_tokens says it was cut, which the "…" of a long line shortened for the screen does not."""
    flat = one_line(text)
    if not flat:
        return f"[dim i]{escape(t('validate.empty_answer'))}[/]"
    return safe(flat) + (f" [dim i]{escape(t('validate.cut'))}[/]" if cut else "")


def answer_block(row: dict) -> str:
    """One prompt: the prompt, then the data's answer (a held-out row), the base's and the tuned model's, each on
    its own labelled line so they read apart without colour."""
    lines = [f"[b]{safe(one_line(row.get('prompt'), 160))}[/b]"]
    if row.get("reference") is not None:
        lines.append(f"[cyan]{t('validate.reference')}[/cyan] {answer_markup(row['reference'])}")
    lines.append(f"[dim]{t('validate.base')}[/dim] {answer_markup(row.get('base'), row.get('base_cut') is True)}")
    lines.append(f"[green]{t('validate.tuned')}[/green] "
                 f"{answer_markup(row.get('tuned'), row.get('tuned_cut') is True)}")
    return "\n".join(lines)


def score_block(row: dict) -> str:
    """A held-out pair as the reward model scored it: ✓ when the chosen answer scored higher."""
    good = row.get("chosen_score", 0.0) > row.get("rejected_score", 0.0)
    mark = "[green]✓[/green]" if good else "[red]✗[/red]"
    return "\n".join([f"{mark} [b]{safe(one_line(row.get('prompt'), 120))}[/b]",
                      f"  [green]{t('data.chosen')} {row.get('chosen_score', 0.0):+.3f}[/green] "
                      f"{safe(one_line(row.get('chosen'), 80))}",
                      f"  [red]{t('data.rejected')} {row.get('rejected_score', 0.0):+.3f}[/red] "
                      f"{safe(one_line(row.get('rejected'), 80))}"])


class ValidateScreen(StageScreen):
    STAGE = "validate"
    KEYS = [("c", "key.chat"), *COMMON_KEYS]
    BINDINGS = [Binding("c", "chat", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.infer: dict | None = None
        self.train_config: dict = {}
        self.held_out: list[dict] = []
        self.held_out_total = 0
        self.running = False
        """The base and the tuned model are answering now."""

    @property
    def mode(self) -> str:
        return validate.mode(self.stage.settings)

    def compose_body(self) -> ComposeResult:
        yield Static("", id="intro")
        yield Button(t("validate.review"), id="review", variant="primary")
        with Vertical(id="prompts-box"):
            yield Static(t("validate.prompts"), classes="question")
            prompts = self.state.prompts or self.stage.settings.get("default_prompts", [])
            yield TextArea("\n".join(prompts), id="prompts")
            yield Button(t("validate.run_again"), id="run", variant="warning")
        yield ProgressBar(id="progress", show_eta=False)
        yield Vertical(id="answers")
        yield Static("", id="chat-again")
        yield Button(t("button.continue"), id="continue", variant="primary")

    def on_mount(self) -> None:
        super().on_mount()
        for widget in ("#prompts-box", "#continue", "#progress", "#review", "#run"):
            self.query_one(widget).display = False
        self.train_config, problems = read_run_config(self.wizard.run_folder, self.wizard.skill.config_file)
        if problems:
            self.say(problems)
            return
        if self.mode == "scores":
            self._show_scores()
            return
        count = int(self.stage.settings.get("held_out_prompts", 0) or 0)
        self.held_out = validate.held_out_rows(self.wizard.run_folder, count)
        # the config said how many rows training held out; validation asks the first few of them
        self.held_out_total = len(validate.held_out_rows(self.wizard.run_folder, 1_000_000)) if count else 0
        self.query_one("#intro", Static).update(escape(self._intro()))
        self.plan_infer()

    def _intro(self, written: bool = False) -> str:
        """How to chat, and what the validation does: before infer.yaml is confirmed, what will run; after, what
        runs now (the text must not still ask for a confirmation already given)."""
        lines = [t("validate.chat_first", command=validate.chat_command(self.wizard.run_folder, self.state.device))]
        if self.state.execution == "run_here":
            key = "validate.what_ran" if written else "validate.what_runs"
            mixed = [name for name in self.state.mixed_in if name in self.state.datasets]
            shown, total = len(self.held_out), self.held_out_total
            held = t("validate.some_of", shown=shown, total=total) if total > shown else str(shown)
            if self.held_out and mixed:  # the rows are held out of the whole mix, not only the user's data
                lines.append(t(f"{key}_mixed", held=held, mixed=", ".join(mixed)))
            else:
                lines.append(t(key, held=held) if self.held_out else t(f"{key}_plain"))
        return "\n".join(lines)

    # --------------------------------------------------------------- infer.yaml
    @work(thread=True, exclusive=True, group="plan")
    def plan_infer(self) -> None:
        """max_new_tokens from the training answers' lengths (reads the data: off the event loop)."""
        settings = self.stage.settings
        if self.mode == "completion":
            limit = int(settings.get("max_new_tokens") or 64)
        else:
            lengths = validate.answer_lengths(self.train_config, self.state.model_path)
            limit = validate.max_new_tokens(lengths, settings)
        infer = validate.infer_config(self.state, self.train_config, max_tokens=limit,
                                      sampling=settings.get("sampling"))
        self.post_message(InferPlanned(infer))

    def on_infer_planned(self, message: InferPlanned) -> None:
        self.infer = message.infer
        folder = self.wizard.run_folder
        if (folder / validate.INFER_FILE).is_file() and self.state.infer_config == self.infer:
            self._written()
            if self.state.validated:
                self._show_answers()
        else:
            self.query_one("#review").display = True
            self._ask_confirm()

    def _ask_confirm(self) -> None:
        problems = validate.check_infer_config(self.state, self.infer, self.train_config.get("template"))
        if problems:
            self.say(problems)
            return
        note = t("validate.confirm_note", held=len(self.held_out)) if self.state.execution == "run_here" else ""
        self.app.push_screen(ConfirmTable(t("validate.confirm_title"), list(self.infer.items()), note),
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
        """infer.yaml is on disk: the prompts are there to check and edit, and nothing answers them before the user
        says go (Enter on the button, which has the focus, or Ctrl+N)."""
        self.query_one("#intro", Static).update(escape(self._intro(written=True)))
        self.query_one("#review").display = False
        self.query_one("#prompts-box").display = True
        button = self.query_one("#run", Button)
        button.label = t("validate.write_prompts" if self.state.execution != "run_here" else
                         "validate.run_again" if self.state.validated else "validate.answer")
        button.display = True
        button.focus()
        if not (self.state.validated and self.state.execution == "run_here"):  # else the answers follow at once
            self.say(info=[t("validate.check_prompts", button=str(button.label))])

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
        validate.write_prompts(self.wizard.run_folder, outcome.state.prompts, self.held_out)
        completion = self.mode == "completion"
        if self.state.execution != "run_here":
            self.say()  # written: what to run elsewhere is shown below
            chat = validate.chat_command(self.wizard.run_folder, self.state.device, here=False)
            self.query_one("#chat-again", Static).update(escape(t(
                "validate.commands_elsewhere", chat=chat,
                command=validate.batch_command_text(self.state, self.wizard.run_folder, completion=completion))))
            self._ready_to_leave()
            return
        self.query_one("#run", Button).disabled = True
        self.query_one("#progress").display = True
        self.say(info=[t("validate.running")])
        self.running = True
        self.run_validation(completion)

    @work(thread=True, exclusive=True, group="validate")
    def run_validation(self, completion: bool) -> None:
        worker = get_current_worker()

        def on_line(line: str) -> None:
            progress = validate.parse_progress(line)
            if progress:
                self.post_message(ProcessProgressed(*progress, line=line))

        command = validate.validate_command(self.wizard.run_folder, completion=completion)
        code, lines = stream(command, device_env(self.state.device), on_line,
                             log_path=self.wizard.run_folder / "validate.log", should_stop=lambda: worker.is_cancelled)
        self.post_message(ProcessFinished(code, lines))

    def on_process_progressed(self, message: ProcessProgressed) -> None:
        self.query_one("#progress", ProgressBar).update(total=message.total, progress=message.done)

    def on_process_finished(self, message: ProcessFinished) -> None:
        self.running = False
        self.query_one("#run", Button).disabled = False
        self.query_one("#progress").display = False
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
        box.mount_all([Static(answer_block(row), classes="answer") for row in rows])
        self.query_one("#chat-again", Static).update(
            t("validate.saved", path=validate.ANSWERS_FILE) + "\n" + t("validate.chat_keys") + "\n" +
            t("validate.chat_again", command=validate.chat_command(self.wizard.run_folder, self.state.device)))
        self.query_one("#run", Button).label = t("validate.run_again")
        self.query_one("#run").display = True
        self._ready_to_leave()

    def _show_scores(self) -> None:
        """A reward model: the held-out pairs with the scores its reloaded model gave (no chat, no infer.yaml)."""
        rows = validate.read_scores(self.wizard.run_folder)
        right, total = validate.score_summary(rows)
        self.query_one("#intro", Static).update(escape(
            t("validate.scores", right=right, total=total) if rows else t("validate.no_scores")))
        self.query_one("#answers", Vertical).mount_all([Static(score_block(row), classes="answer")
                                                        for row in rows])
        if not self.state.validated:
            self.wizard.commit(self.state.replace(validated=True))
        self._ready_to_leave()

    def _ready_to_leave(self) -> None:
        self.query_one("#continue").display = True
        self.query_one("#continue", Button).focus()

    def action_chat(self) -> None:
        if isinstance(self.focused, TextArea):
            return  # typing a prompt
        if self.mode == "scores" or not (self.wizard.run_folder / validate.INFER_FILE).is_file():
            self.say(notes=[t("chat.not_ready")])
            return
        from assistant.tui.screens.chat import ChatScreen

        self.app.push_screen(ChatScreen(completion=self.mode == "completion"))

    def submit(self) -> None:
        if self.mode == "scores":
            self.wizard.advance(self.STAGE, self.state)
            return
        written = (self.wizard.run_folder / validate.INFER_FILE).is_file()
        if not written:
            self.say([t("validate.confirm_first")])
            if self.infer is not None:
                self._ask_confirm()
            return
        if self.running:
            self.say(info=[t("validate.still_running")])
            return
        if not self.query_one("#continue").display:  # the prompts are not answered (or written) yet: this is the go
            self._run()
            return
        self.wizard.advance(self.STAGE, self.state)
