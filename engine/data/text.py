"""Text read from data files, made safe to show and to encode.

Data comes from anywhere, so every value is suspect: a raw escape sequence in a row can rewrite the terminal (an
OSC 52 sequence even writes the clipboard), a lone UTF-16 surrogate (`"\\ud800"` in JSON) is a Python str that no
UTF-8 writer accepts, a value nested thousands of levels deep overflows every recursive walker, and a 10 MB cell
quoted in an error message buries it. The helpers here are the one place those rules live; the data checker, the
preview, the CLI and the TUI all use them.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any

from engine.jsonio import MAX_DEPTH, loads_json, too_deep  # noqa: F401 - this module's readers' depth rules

# C0 controls except tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), the bidi overrides and isolates
# that reorder what the reader sees, line/paragraph separators, and lone surrogates.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_CONTROL_WITH_LAYOUT = re.compile("[\t\n" + _CONTROL.pattern[1:])
_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL_IN_DATA = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxlevel = 60, 60, 4, 4, 3


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    return {9: "\\t", 10: "\\n", 13: "\\r"}.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape_control(text: str, *, keep_layout: bool = True) -> str:
    """`text` with every control character written out visibly (ESC as \\x1b, a lone surrogate as \\udcff).

    keep_layout=True leaves tabs and newlines as they are (multi-line samples stay readable); False escapes them
    too, for one-line places such as table cells and file names. The result is always encodable as UTF-8.
    """
    pattern = _CONTROL if keep_layout else _CONTROL_WITH_LAYOUT
    return pattern.sub(_visible, text)


def shorten(value: Any, limit: int = 60) -> str:
    """A bounded repr of `value` for messages: strings cut to `limit` characters, containers to a few items.

    repr escapes control characters and surrogates, and reprlib never walks more than a few levels, so a huge
    or deeply nested value costs no more than a small one.
    """
    _SHORT.maxstring = _SHORT.maxother = max(limit, 12)
    return _SHORT.repr(value)


def first_surrogate(text: str) -> int | None:
    """The position of the first lone surrogate in `text` (text no UTF-8 writer can encode), or None."""
    match = _SURROGATE.search(text)
    return match.start() if match else None


def find_bad_text(value: Any) -> tuple[str, str, int] | None:
    """(field path, the text, position) of the first string (key or value) holding a lone surrogate, or None.

    The value must already be known not to be too deep (see too_deep): this walks it recursively.
    """
    return _find_text(value, _SURROGATE)


def find_control(value: Any) -> tuple[str, str, int] | None:
    """Like find_bad_text, for control characters other than tab, newline and carriage return."""
    return _find_text(value, _CONTROL_IN_DATA)


def _find_text(value: Any, pattern: re.Pattern) -> tuple[str, str, int] | None:
    if isinstance(value, str):
        match = pattern.search(value)
        return None if match is None else ("", value, match.start())
    if isinstance(value, dict):
        for key, item in value.items():
            match = pattern.search(key) if isinstance(key, str) else None
            if match is not None:
                return (escape_control(key, keep_layout=False), key, match.start())
            found = _find_text(item, pattern)
            if found is not None:
                return (_join(str(key), found[0]), found[1], found[2])
    elif isinstance(value, (list, tuple)):
        for number, item in enumerate(value):
            found = _find_text(item, pattern)
            if found is not None:
                return (_join(f"[{number}]", found[0]), found[1], found[2])
    return None


def _join(head: str, tail: str) -> str:
    head = escape_control(head, keep_layout=False)
    return head if not tail else head + tail if tail.startswith("[") else f"{head}.{tail}"


def replace_bad_text(value: Any) -> Any:
    """A copy of `value` with every lone surrogate replaced by U+FFFD (safe to print, dump and encode)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {replace_bad_text(key): replace_bad_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [replace_bad_text(item) for item in value]
    return value

