"""Finding past and current runs: ``engine.runs.list()`` and ``engine.runs.get(run_id)``."""

from __future__ import annotations

import builtins
from pathlib import Path

from engine.rundir import RunDir, find_run, iter_runs


def list(runs_dir: str | Path | None = None) -> builtins.list[dict]:  # noqa: A001 - the API reads runs.list()
    """One summary dict per run (id, model, method, state, steps, final loss, dates), newest first."""
    return [run.summary() for run in iter_runs(runs_dir)]


def get(run_id: str, runs_dir: str | Path | None = None) -> RunDir:
    """The run folder for an id, a unique prefix of one, or a path."""
    return find_run(run_id, runs_dir)
