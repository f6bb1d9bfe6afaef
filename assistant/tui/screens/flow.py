"""Stage 0: scope, execution and method — three questions on one screen, as the skill declares them."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Button

from assistant.i18n import t
from assistant.tui.screens.base import StageScreen
from assistant.tui.widgets.question import QuestionSet
from assistant.wizard.stages import flow


class FlowScreen(StageScreen):
    STAGE = "flow"

    def compose_body(self) -> ComposeResult:
        chosen = flow.defaults(self.state, self.wizard.skill)
        for question in self.stage.questions:
            yield QuestionSet(question, chosen.get(question.id))
        yield Button(t("button.continue"), id="continue", variant="primary")

    def on_mount(self) -> None:
        super().on_mount()
        self.query(QuestionSet).first().query_one("RadioSet").focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "continue":
            self.submit()

    def answers(self) -> dict[str, str]:
        return {widget.question.id: widget.value for widget in self.query(QuestionSet)}

    def submit(self) -> None:
        outcome = flow.apply(self.state, self.wizard.skill, self.answers())
        if not outcome.ok:
            self.say(outcome.problems)
            return
        self.wizard.advance(self.STAGE, outcome.state, notes=outcome.notes)
