"""A chat with the fine-tuned model inside the app, its base model answering the same conversation beside it.

Opened with `c` at the validation stage and on the summary. The models run in their own process
(engine.inference.pipe: loaded once, one JSON line per turn), never in the app's; Esc closes the screen and ends
that process. A pre-training run is continued as plain text instead (no chat template)."""

from __future__ import annotations

import json
import subprocess

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Input, Static

from assistant.formatting import safe
from assistant.i18n import t
from assistant.tui.messages import ChatReplied
from assistant.tui.process import child_env
from assistant.tui.widgets.keyhelp import KeyHelp
from assistant.wizard.stages import validate
from assistant.wizard.stages.gpu import device_env


def turn_markup(prompt: str, reply: dict) -> str:
    """One turn: what was asked, the tuned model's answer, then the base model's (labelled, not colour alone)."""
    from assistant.tui.screens.validate import answer_markup

    lines = [f"[b]> {safe(prompt, keep_layout=True)}[/b]"]
    if reply.get("error"):
        return "\n".join(lines + [f"[red]{safe(reply['error'], keep_layout=True)}[/red]"])
    lines.append(f"[green]{t('validate.tuned')}[/green] {answer_markup(reply.get('tuned'))}")
    if reply.get("base") is not None:
        lines.append(f"[dim]{t('validate.base')}[/dim] {answer_markup(reply['base'])}")
    return "\n".join(lines)


class ChatScreen(Screen):
    BINDINGS = [Binding("escape", "close", show=False)]

    def __init__(self, *, completion: bool = False) -> None:
        super().__init__()
        self.completion = completion
        self.process: subprocess.Popen | None = None
        self.history: list[dict] = []
        self.pending: str | None = None
        self.ready = False

    def compose(self) -> ComposeResult:
        with Vertical(id="chat-frame"):
            yield Static(t("chat.title_completion" if self.completion else "chat.title"), id="stage-title")
            with VerticalScroll(id="chat-log"):
                yield Static(t("chat.loading"), id="chat-status")
            yield Input(placeholder=t("chat.placeholder"), id="chat-input")
        yield KeyHelp([("Enter", "chat.send"), ("Esc", "chat.close")])

    def on_mount(self) -> None:
        self.query_one("#chat-input", Input).focus()
        self.run_models()

    @property
    def wizard(self):
        return self.app

    @work(thread=True, exclusive=True, group="chat")
    def run_models(self) -> None:
        """Start the model process and turn each line it prints into a message for the screen."""
        folder = self.wizard.run_folder
        command = validate.pipe_command(folder, completion=self.completion)
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                            env=child_env(device_env(self.wizard.state.device)))
        except OSError as exc:
            self.post_message(ChatReplied({"error": str(exc)}, ended=True))
            return
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.post_message(ChatReplied(json.loads(line)))
            except ValueError:
                continue
        self.post_message(ChatReplied({"error": t("chat.ended", code=self.process.wait())}, ended=True))

    def on_chat_replied(self, message: ChatReplied) -> None:
        reply = message.reply
        status = self.query_one("#chat-status", Static)
        if reply.get("ready"):
            self.ready = True
            status.update(t("chat.ready", template=reply.get("template", "-")))
            return
        if message.ended or (self.pending is None and reply.get("error")):
            self.ready = False
            status.update(f"[red]{safe(reply.get('error') or '', keep_layout=True)}[/red]")
            return
        prompt, self.pending = self.pending or "", None
        if not reply.get("error") and not self.completion:
            self.history.append({"role": "assistant", "content": reply.get("tuned") or ""})
        log = self.query_one("#chat-log", VerticalScroll)
        log.mount(Static(turn_markup(prompt, reply), classes="answer"))
        log.scroll_end(animate=False)
        field = self.query_one("#chat-input", Input)
        field.disabled = False
        field.focus()
        self.query_one("#chat-status", Static).update("")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if not self.ready or self.process is None or self.process.stdin is None:
            self.query_one("#chat-status", Static).update(t("chat.wait"))
            return
        if self.pending is not None:
            return  # one turn at a time
        event.input.value = ""
        self.pending = text
        if self.completion:
            request = {"text": text}
        else:
            self.history.append({"role": "user", "content": text})
            request = {"messages": self.history}
        try:
            self.process.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
            self.process.stdin.flush()
        except OSError as exc:
            self.query_one("#chat-status", Static).update(f"[red]{safe(exc, keep_layout=True)}[/red]")
            return
        event.input.disabled = True
        self.query_one("#chat-status", Static).update(t("chat.thinking"))

    def action_close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                if self.process.stdin:
                    self.process.stdin.close()  # the model process ends at the end of its input
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
        self.app.pop_screen()
