"""Messages that workers post (named in the past tense: something happened); handlers own the state.

Workers never touch widgets: a thread worker computes, posts one of these, and the screen's handler updates the
wizard state and the widgets on the event loop.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message


class DatasetsListed(Message):
    def __init__(self, folder: Any, rows: list, error: str | None = None, hidden: list[str] | None = None) -> None:
        super().__init__()
        self.folder, self.rows, self.error, self.hidden = folder, rows, error, hidden or []


class RowsCounted(Message):
    def __init__(self, counts: dict, errors: dict) -> None:
        super().__init__()
        self.counts, self.errors = counts, errors


class PreviewLoaded(Message):
    def __init__(self, name: str, examples: list, error: str | None = None) -> None:
        super().__init__()
        self.name, self.examples, self.error = name, examples, error


class FileChecked(Message):
    def __init__(self, path: Any, report: Any, problems: list[str]) -> None:
        super().__init__()
        self.path, self.report, self.problems = path, report, problems


class Onboarded(Message):
    def __init__(self, outcome: Any) -> None:
        super().__init__()
        self.outcome = outcome


class Filled(Message):
    def __init__(self, outcome: Any, values: dict) -> None:
        super().__init__()
        self.outcome, self.values = outcome, values


class FixAccepted(Message):
    def __init__(self, state: Any) -> None:
        super().__init__()
        self.state = state


class PlaceholdersFound(Message):
    def __init__(self, found: dict[str, list[str]]) -> None:
        super().__init__()
        self.found = found


class ModelResolved(Message):
    def __init__(self, outcome: Any, plan: Any = None) -> None:
        super().__init__()
        self.outcome, self.plan = outcome, plan


class AvailabilityChecked(Message):
    """engine.models.availability answered for the skill's real model (posted to the app)."""

    def __init__(self, availability: Any) -> None:
        super().__init__()
        self.availability = availability


class FetchProgressed(Message):
    """A background download (or demo build) moved on; posted to the app, shown on every screen's board."""

    def __init__(self, text: str, done: bool = False, ok: bool = False, error: str | None = None,
                 target: Any = None, error_message: dict | None = None) -> None:
        super().__init__()
        self.text, self.done, self.ok, self.error, self.target = text, done, ok, error, target
        self.error_message = error_message
        """``error`` as an engine.messages.Message dict, where the engine gave one."""


class DevicesDetected(Message):
    def __init__(self, report: Any, error: str | None = None) -> None:
        super().__init__()
        self.report, self.error = report, error


class ConfigChecked(Message):
    def __init__(self, outcome: Any) -> None:
        super().__init__()
        self.outcome = outcome


class Measured(Message):
    """The pre-flight of the config with `key` ended: its engine.measurement.Measurement, or why it failed."""

    def __init__(self, key: str, config: dict, result: Any, error: str | None = None) -> None:
        super().__init__()
        self.key, self.config, self.result, self.error = key, config, result, error


class RunStarted(Message):
    def __init__(self, run: Any, process: Any, error: str | None = None) -> None:
        super().__init__()
        self.run, self.process, self.error = run, process, error


class RunPolled(Message):
    def __init__(self, status, metrics: list[dict] | None, log_lines: list[str], last_metric_at: float | None) -> None:
        super().__init__()
        self.status, self.metrics, self.log_lines, self.last_metric_at = status, metrics, log_lines, last_metric_at


class ProcessProgressed(Message):
    """A line of progress from a validation or export process."""

    def __init__(self, done: int, total: int, line: str = "") -> None:
        super().__init__()
        self.done, self.total, self.line = done, total, line


class ProcessFinished(Message):
    def __init__(self, returncode: int, lines: list[str], result: Any = None) -> None:
        super().__init__()
        self.returncode, self.lines, self.result = returncode, lines, result


class InferPlanned(Message):
    """infer.yaml's content is worked out (max_new_tokens read from the training answers)."""

    def __init__(self, infer: dict) -> None:
        super().__init__()
        self.infer = infer


class ChatReplied(Message):
    """The chat's model process printed a line (ready, an answer, an error), or ended."""

    def __init__(self, reply: dict, ended: bool = False) -> None:
        super().__init__()
        self.reply, self.ended = reply, ended


class BrowserStarted(Message):
    """`lf-assistant web` answers at `url` (error: it did not start)."""

    def __init__(self, url: str | None = None, log: Any = None, pid: int | None = None,
                 error: str | None = None) -> None:
        super().__init__()
        self.url, self.log, self.pid, self.error = url, log, pid, error
