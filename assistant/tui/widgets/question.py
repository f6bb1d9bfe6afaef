"""A skill question rendered as a radio set: its prompt and its choices, all labels from the i18n catalog.

The chosen choice is marked by a symbol, not by colour alone (over SSH, or with NO_COLOR, colours may be gone),
and the skill's default says "(recommended)".
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import RadioButton, RadioSet, Static

from assistant.i18n import t
from assistant.tui.widgets.marked import MarkedRadioButton
from assistant.wizard.skill import Question


def choice_label(question: Question, choice: str) -> str:
    label = t(f"q.{question.id}.{choice}")
    return f"{label} {t('q.recommended')}" if choice == question.default else label


class ChoiceSet(RadioSet):
    """A radio set where Enter on the choice already made means "yes, go on" (the screen continues), and on
    another choice selects it. Space always selects."""

    BINDINGS = [Binding("enter", "confirm_or_select", show=False), Binding("space", "toggle_button", show=False)]

    class Confirmed(Message):
        """Enter on the chosen choice: the screen treats it like Ctrl+N."""

    def action_confirm_or_select(self) -> None:
        highlighted = self._nodes[self._selected] if self._selected is not None else None
        if highlighted is not None and highlighted is self.pressed_button:
            self.post_message(self.Confirmed())
        else:
            self.action_toggle_button()


class QuestionSet(Vertical):
    """`value` is the chosen choice's name (e.g. "lora"), never its translated label."""

    DEFAULT_CSS = """
    QuestionSet { height: auto; }
    QuestionSet RadioSet { width: 100%; }
    QuestionSet .question-note { color: $text-muted; }
    """

    def __init__(self, question: Question, selected: str | None = None, **kwargs) -> None:
        super().__init__(id=kwargs.pop("id", f"q-{question.id}"), **kwargs)
        self.question = question
        self.selected = selected if selected in question.choices else question.default

    def compose(self) -> ComposeResult:
        yield Static(t(f"q.{self.question.id}.prompt"), classes="question")
        with ChoiceSet(id=f"{self.question.id}-set"):
            for choice in self.question.choices:
                yield MarkedRadioButton(choice_label(self.question, choice), value=choice == self.selected,
                                        id=f"{self.question.id}--{choice}")
        if self.question.note:
            yield Static(t(self.question.note), classes="question-note")

    def on_mount(self) -> None:
        # The keyboard highlight starts on the first choice; move it to the chosen one, so Enter keeps it.
        radio_set = self.query_one(RadioSet)
        for _ in range(self.question.choices.index(self.selected)):
            radio_set.action_next_button()

    @property
    def value(self) -> str:
        pressed = self.query_one(RadioSet).pressed_button
        return pressed.id.split("--", 1)[1] if pressed is not None and pressed.id else self.selected

    def choose(self, choice: str) -> None:
        """Select a choice programmatically (resume restores answers this way)."""
        self.query_one(f"#{self.question.id}--{choice}", RadioButton).value = True
