"""Stage 0: the shape of the run — scope, where it executes, and the fine-tuning method."""

from __future__ import annotations

from typing import Mapping

from assistant.i18n import t
from assistant.wizard.skill import Skill
from assistant.wizard.stages import Outcome, refused
from assistant.wizard.state import WizardState

STAGE = "flow"


def defaults(state: WizardState, skill: Skill) -> dict[str, str]:
    """The answers to preselect: what the user chose before, else the skill's defaults."""
    return {q.id: getattr(state, q.id, None) or q.default for q in skill.stage(STAGE).questions}


def apply(state: WizardState, skill: Skill, answers: Mapping[str, str]) -> Outcome:
    """Record scope, execution and method; each must be one of the skill's choices."""
    problems, values = [], {}
    for question in skill.stage(STAGE).questions:
        value = answers.get(question.id, question.default)
        if value not in question.choices:
            problems.append(t("flow.bad_choice", question=question.id, value=value,
                              choices=", ".join(question.choices)))
        values[question.id] = value
    if problems:
        return refused(*problems)
    notes = []
    if values.get("method") != state.method and state.method and (state.edits or state.suggestions):
        # Edits were made against the old method's example; they stay, and the diff shows them again.
        notes.append(t("flow.method_changed", old=state.method, new=values["method"]))
    return Outcome(state.replace(**values), notes=notes)
