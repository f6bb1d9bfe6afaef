"""One module per stage: pure functions that take the state and the user's answers and return an Outcome.

Side effects a stage needs (copying a data file, writing a config) live in clearly named helper functions of the
same module, called by the screen only after the user confirmed; `apply`-style functions never touch the disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from assistant.wizard.state import WizardState


@dataclass
class Outcome:
    """The new state when the answers are acceptable, else the problems (each says what to do)."""

    state: WizardState | None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    code: str | None = None
    """A machine-readable kind of refusal the screen can offer a remedy for (e.g. "unsupported")."""

    @property
    def ok(self) -> bool:
        return self.state is not None and not self.problems


def refused(*problems: str, code: str | None = None) -> Outcome:
    return Outcome(None, [p for p in problems if p], code=code)
