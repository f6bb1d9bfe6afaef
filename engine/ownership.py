"""Is the process a run's status.json names really that run's training? Asked before any signal is sent.

status.json is a plain file: a stale one names a pid the system has since given to another program, and one
written by hand can name any pid. Signalling on its word alone could stop a stranger's process. So a pid is
trusted only with evidence from the process itself: its recorded start time (`pid_start`, when the trainer wrote
one) or a command line that is one of ours (the recipe module, torchrun running it, or the lf-assistant CLI).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_OUR_MODULES = ("engine.recipes.", "assistant.cli.main", "assistant.tui")
_OUR_SCRIPTS = ("lf-assistant", "lfa")


def process_start(pid: int) -> int | None:
    """The process start time in clock ticks since boot (Linux /proc), or None when unknown."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="utf-8", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError, TypeError):
        return None


def process_arguments(pid: int) -> list[str] | None:
    """The command line of `pid` (Linux /proc), or None when it cannot be read."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as handle:
            raw = handle.read()
    except (OSError, ValueError, TypeError):
        return None
    return [part.decode("utf-8", errors="replace") for part in raw.split(b"\0") if part]


def owns_process(pid: object, run_dir: Path, status: dict | None = None) -> bool:
    """True when `pid` is (with evidence) the training process of the run in `run_dir`.

    Where /proc does not exist (macOS, Windows) there is nothing to ask, and the status file is trusted.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1 or pid == os.getpid():
        return False
    if not Path("/proc/self/stat").exists():
        return sys.platform != "linux"
    recorded = (status or {}).get("pid_start")
    if recorded is not None:
        return process_start(pid) == recorded
    arguments = process_arguments(pid)
    if not arguments:
        return False
    run_path = str(Path(run_dir).resolve())
    for argument in arguments:
        if run_path in argument or argument.startswith(_OUR_MODULES):
            return True
        if Path(argument).name in _OUR_SCRIPTS:
            return True
    return False
