"""Errors the engine raises on purpose.

Every message says what is wrong and what to do next; the CLI prints it without a traceback.
"""


class EngineError(Exception):
    """Base class: a problem the user can fix (bad input, missing file, unsupported setting)."""


class ConfigError(EngineError):
    """A training / inference / export config is invalid."""


class DataError(EngineError):
    """A dataset is missing, unregistered or malformed."""


class ModelError(EngineError):
    """A model cannot be found, resolved or loaded."""


class DeviceError(EngineError):
    """The requested device or feature is not available on this machine."""
