"""Training stages, one recipe module each. A recipe declares ``setup(session) -> Task`` (its data, model(s) and
loss); the shell in engine.training runs it. This table is the one place a stage name becomes a recipe: the
launcher starts ``python -m <module>`` and in-process training calls :func:`run_stage`."""

from __future__ import annotations

import importlib
from types import ModuleType

from engine.errors import ConfigError
from engine.runstatus import STAGES

RECIPES: dict[str, str] = {stage: f"engine.recipes.{stage}" for stage in STAGES}


def recipe_module_name(stage: str) -> str:
    if stage not in RECIPES:
        raise ConfigError(f"stage {stage!r} has no recipe. Valid stages: {', '.join(RECIPES)}.")
    return RECIPES[stage]


def recipe(stage: str) -> ModuleType:
    return importlib.import_module(recipe_module_name(stage))


def run_stage(config, run, *, on_log=None, stop=None):
    """Train ``config`` (its stage's recipe inside the shell) in this process; returns the final RunStatus."""
    from engine.training import shell

    return shell.train(config, run, recipe(config.stage).setup, on_log=on_log, stop=stop)
