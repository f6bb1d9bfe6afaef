"""Errors the engine raises on purpose.

Every message says what is wrong and what to do next; the CLI prints it without a traceback.
"""

from __future__ import annotations

from engine.messages import Message


class EngineError(Exception):
    """Base class: a problem the user can fix (bad input, missing file, unsupported setting). ``message``: the
    same sentence as a code with its values (engine.messages), where a front end may show it in another
    language."""

    def __init__(self, *args: object, message: Message | None = None) -> None:
        super().__init__(*args)
        self.message = message


class ConfigError(EngineError):
    """A training / inference / export config is invalid."""


class DataError(EngineError):
    """A dataset is missing, unregistered or malformed."""


class ModelError(EngineError):
    """A model cannot be found, resolved or loaded."""


class DeviceError(EngineError):
    """The requested device or feature is not available on this machine."""
