"""The command that runs lf-assistant again, as a hint can print it: it must work in a fresh shell.

`lf-assistant --resume RUN_ID` fails with "command not found" when the tool was started from a virtual
environment that is not activated (`.venv/bin/lf-assistant`, `make run`). The hint therefore names the console
script by its absolute path unless that very script is what the shell finds on PATH, and falls back to
`<python> -m assistant.cli.main` when no console script is at hand (`python -m`, a served browser session).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

SCRIPT_NAMES = ("lf-assistant", "lfa")


def _same_file(a: str | Path | None, b: str | Path | None) -> bool:
    if not a or not b:
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _script_started_from() -> Path | None:
    """The console script this process was started through, if any."""
    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name in SCRIPT_NAMES:
        found = argv0 if os.sep in argv0 else shutil.which(argv0)
        if found and Path(found).is_file():
            return Path(os.path.abspath(found))
    # Not started through the script (python -m, tests, a served session): the venv's own script, when installed.
    beside = Path(os.path.abspath(sys.executable)).parent / SCRIPT_NAMES[0]
    return beside if beside.is_file() else None


def self_command() -> str:
    """`lf-assistant` when the shell finds this installation under that name, else an absolute command."""
    script = _script_started_from()
    if script is not None:
        if _same_file(shutil.which(script.name), script):
            return script.name
        return shlex.quote(str(script))
    return f"{shlex.quote(os.path.abspath(sys.executable))} -m assistant.cli.main"


def run_command(action: str, run_id: str, runs_dir: str | Path | None = None, *extra: str) -> str:
    """`lf-assistant ACTION RUN_ID [--runs-dir DIR] [EXTRA...]`, quoted for a shell: a hint that names a run must
    also name the runs folder it lives in when that is not the default."""
    words = [action, str(run_id)] + (["--runs-dir", str(runs_dir)] if runs_dir is not None else []) + list(extra)
    return f"{self_command()} {shlex.join(words)}"
