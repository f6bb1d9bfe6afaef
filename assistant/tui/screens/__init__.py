"""One screen per stage; the skill says the order, this table says which screen shows a stage."""

from __future__ import annotations

import importlib

# stage id -> (module under assistant.tui.screens, class). Imported on first use: the first frame only needs the
# first stage's screen.
SCREENS: dict[str, tuple[str, str]] = {
    "flow": ("flow", "FlowScreen"),
    "data": ("data", "DataScreen"),
    "model": ("model", "ModelScreen"),
    "gpu": ("gpu", "GpuScreen"),
    "config": ("config", "ConfigScreen"),
    "train": ("train", "TrainScreen"),
    "loss": ("loss", "LossScreen"),
    "validate": ("validate", "ValidateScreen"),
    "export": ("export", "ExportScreen"),
    "summary": ("summary", "SummaryScreen"),
}


def screen_class(stage_id: str) -> type:
    if stage_id not in SCREENS:
        raise KeyError(f"No screen for stage {stage_id!r}; known: {', '.join(SCREENS)}")
    module_name, class_name = SCREENS[stage_id]
    module = importlib.import_module(f"assistant.tui.screens.{module_name}")
    return getattr(module, class_name)


def screen_for(stage_id: str):
    return screen_class(stage_id)()
