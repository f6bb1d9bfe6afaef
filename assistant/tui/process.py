"""Running validation and export as child processes from a thread worker, line by line.

The command is an argument list (never a shell string) and gets the run's device environment, so the same GPU
choice applies to training, validation and export. Each line is handed to `on_line` in the worker thread; the
caller turns it into a message for the screen.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable, Mapping


def child_env(device_env: Mapping[str, str]) -> dict[str, str]:
    """os.environ plus the device pinning, with the checkout importable (as the engine's own launcher does)."""
    env = {**os.environ, **device_env, "PYTHONUNBUFFERED": "1"}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def stream(command: list[str], device_env: Mapping[str, str], on_line: Callable[[str], None],
           log_path: Path | None = None, should_stop: Callable[[], bool] = lambda: False) -> tuple[int, list[str]]:
    """Run to the end, passing each output line to `on_line`; (return code, every line). Output is also
    appended to `log_path` when given, for the record in the run folder."""
    lines: list[str] = []
    log = open(log_path, "a", encoding="utf-8") if log_path else None
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   stdin=subprocess.DEVNULL, env=child_env(device_env), bufsize=1)
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.rstrip("\n")
            lines.append(line)
            if log:
                log.write(raw)
            on_line(line)
            if should_stop():
                process.terminate()
        return process.wait(), lines
    finally:
        if log:
            log.close()
