"""Names the user gives that become folder names or land in shell scripts: run ids, job names.

A name is a name, not a path and not a command: `--run-id ../../x` would write outside the runs folder, an empty
one would make the runs folder itself the run, and `$(...)`, backticks or a newline would be one quoting mistake
away from running in a generated launch script. So every such name must match one small character set, checked
in one place before it is used.
"""

from __future__ import annotations

import re

from engine.data.text import shorten
from engine.errors import ConfigError

MAX_NAME_LENGTH = 100
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
SAFE_CHARACTERS = "letters A-Z a-z, digits, '.', '_' and '-'"


def name_problem(value: object) -> str | None:
    """Why `value` is not a safe name, or None when it is one."""
    if not isinstance(value, str):
        return f"must be text, not {type(value).__name__}"
    if not value:
        return "is empty"
    if len(value) > MAX_NAME_LENGTH:
        return f"is {len(value)} characters long (at most {MAX_NAME_LENGTH})"
    if value[0] in ".-":
        return f"starts with {value[0]!r} (a hidden file or an option to a command)"
    if ".." in value:
        return "contains '..'"
    bad = sorted({char for char in value if not SAFE_NAME.fullmatch("a" + char)})
    if bad:
        shown = ", ".join(repr(char) for char in bad[:6])
        return f"contains {shown}"
    return None


def check_name(kind: str, value: object) -> str:
    """`value` when it is a safe name; ConfigError naming `kind` ("run id", ...) and the rule otherwise.

    Safe: 1-100 of A-Z a-z 0-9 . _ -, not starting with '.' or '-', no '..'. Such a name is one path component
    that needs no quoting in any shell.
    """
    problem = name_problem(value)
    if problem is not None:
        raise ConfigError(f"The {kind} {shorten(value, 60)} {problem}. A {kind} becomes a folder name: use 1-"
                          f"{MAX_NAME_LENGTH} {SAFE_CHARACTERS}, starting with a letter or a digit "
                          "(e.g. my-run_2).")
    return value
