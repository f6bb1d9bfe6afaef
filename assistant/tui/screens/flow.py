"""Stage 0: workflow, scope, execution and method — the questions on one screen, as the skill declares them.

Choosing another workflow (SFT or preference training) switches the app to the skill that runs it, and the screen
is drawn again from that skill (its questions, defaults and notes), keeping the answers already given."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.widgets import Button, RadioSet

from assistant.i18n import t
from assistant.tui.screens.base import StageScreen
from assistant.tui.widgets.question import QuestionSet
from assistant.wizard.skill import skill_for
from assistant.wizard.stages import flow


class FlowScreen(StageScreen):
    STAGE = "flow"

    def __init__(self) -> None:
        super().__init__()
        self.given: dict[str, str] = {}
        """Answers picked on this screen before a workflow switch redrew it."""

    def compose_body(self) -> ComposeResult:
        chosen = dict(flow.defaults(self.state, self.wizard.skill), **self.given)
        for question in self.stage.questions:
            yield QuestionSet(question, chosen.get(question.id))
        yield Button(t("button.continue"), id="continue", variant="primary")

    def on_mount(self) -> None:
        super().on_mount()
        self.query(QuestionSet).first().query_one("RadioSet").focus()

    @on(RadioSet.Changed, "#workflow-set")
    async def _workflow_changed(self, event: RadioSet.Changed) -> None:
        answers = self.answers()
        skill = skill_for(answers["workflow"])
        if skill.name == self.wizard.skill.name:
            return
        questions = {question.id: question for question in skill.stage(self.STAGE).questions}
        self.given = {key: value for key, value in answers.items()
                      if key in questions and value in questions[key].choices}
        self.wizard.use_skill(skill)
        await self.recompose()
        self.query_one("#messages-box").display = False
        self.query_one("#workflow-set", RadioSet).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "continue":
            self.submit()

    def answers(self) -> dict[str, str]:
        return {widget.question.id: widget.value for widget in self.query(QuestionSet)}

    def submit(self) -> None:
        answers = self.answers()
        outcome = flow.apply(self.state, self.wizard.skill, answers)
        if not outcome.ok:
            self.say(outcome.problems)
            return
        self.wizard.advance(self.STAGE, outcome.state, notes=outcome.notes)
        if answers.get("execution") == flow.BROWSER:
            self.wizard.open_in_browser()
