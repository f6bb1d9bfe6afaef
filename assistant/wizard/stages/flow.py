"""Stage 0: the shape of the run — the workflow (SFT or preference training), scope, where it executes, and the
fine-tuning method. The workflow decides which skill runs the later stages (`skill_for`)."""

from __future__ import annotations

from typing import Mapping

from assistant.i18n import t
from assistant.wizard.skill import Skill, skill_for
from assistant.wizard.stages import Outcome, refused
from assistant.wizard.state import WizardState

STAGE = "flow"
BROWSER = "browser"
"""The execution answer that moves this wizard into a browser (`lf-assistant web`). The run itself is then
managed here like run_here, which is what the state records: later stages know only run_here and write_only."""


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
    if values.get("execution") == BROWSER:
        values["execution"] = "run_here"
    notes = []
    if values.get("method") != state.method and state.method and (state.edits or state.suggestions):
        # Edits were made against the old method's example; they stay, and the diff shows them again.
        notes.append(t("flow.method_changed", old=state.method, new=values["method"]))
    new = state.replace(**values)
    workflow_changed = (new.workflow or "sft") != (state.workflow or "sft")  # states from before the question: SFT
    if new.family and (workflow_changed or new.method != state.method):
        # The model was resolved under another workflow or method: its starting example changes with them.
        from assistant.wizard.stages.model import example_for

        example, note = example_for(skill_for(new.workflow), new.family, new.method or "lora")
        new = new.replace(example=str(example), example_note=note,
                          # the small-data advice answered the old example's step count: the config stage asks anew
                          suggestions={} if str(example) != state.example else new.suggestions)
    if workflow_changed and state.datasets:
        # SFT rows and preference pairs are not interchangeable: the data stage is chosen again.
        new = new.replace(datasets=[], dataset_rows={}, dataset_chars={}, mixed_in=[],
                          done=[s for s in new.done if s != "data"])
        notes.append(t("flow.workflow_changed"))
    return Outcome(new, notes=notes)
