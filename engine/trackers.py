"""Experiment trackers for ``report_to``: TensorBoard event files, W&B offline, SwanLab local, MLflow file store.

``open_trackers(config, run_dir)`` returns one ``Tracker`` (``log(step, metrics)``, ``close()``) that writes to
every tracker the config names; everything is written inside the run folder and nothing goes over the network
unless the user says so in W&B's own way (WANDB_MODE=online; WANDB_PROJECT names the project), which a note in
the run's log tells them, since LLaMA-Factory's W&B logs online by default.
Importing this module imports no tracker package (and no torch): ``missing_packages`` tells ``validate`` what is
not installed before a run starts.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from pathlib import Path
from typing import Any, Protocol

TRACKERS: tuple[str, ...] = ("tensorboard", "wandb", "swanlab", "mlflow")
# Which importable module makes a tracker usable, and what to install when none is.
PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "wandb": (("wandb",), "wandb"),
    "swanlab": (("swanlab",), "swanlab"),
    "mlflow": (("mlflow",), "mlflow"),
}
PROJECT = "lf-assistant"


def _installed(modules: tuple[str, ...]) -> bool:
    return any(importlib.util.find_spec(module) is not None for module in modules)


def requested(report_to: str | None) -> list[str]:
    """The trackers ``report_to`` names: ``none`` -> [], ``all`` -> every installed one, else the listed ones."""
    names = [part.strip() for part in str(report_to or "none").split(",") if part.strip()]
    if "all" in names:
        return [name for name in TRACKERS if _installed(PACKAGES[name][0])]
    return [name for name in names if name in TRACKERS]


def missing_packages(report_to: str | None) -> list[str]:
    """A sentence per requested tracker whose package is not installed."""
    return [f"report_to: {name} needs `pip install {PACKAGES[name][1]}` (it is not installed)."
            for name in requested(report_to) if not _installed(PACKAGES[name][0])]


class Tracker(Protocol):
    def log(self, step: int, metrics: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numeric metrics (trackers take numbers; NaN/inf would break their plots)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = float(value)
    return out


class TensorBoardTracker:
    def __init__(self, log_dir: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # torch's writer needs the tensorboard package; tensorboardX is the same API
            from tensorboardX import SummaryWriter
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for key, value in _numbers(metrics).items():
            self.writer.add_scalar(f"train/{key}" if "/" not in key else key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def wandb_mode() -> tuple[str, str]:
    """(mode, project): offline into the run folder unless WANDB_MODE says otherwise; WANDB_PROJECT or ours."""
    import os

    return os.environ.get("WANDB_MODE") or "offline", os.environ.get("WANDB_PROJECT") or PROJECT


class WandbTracker:
    def __init__(self, run_dir: Path, name: str, settings: dict[str, Any]):
        import wandb

        mode, project = wandb_mode()
        self.run = wandb.init(project=project, name=name, dir=str(run_dir), mode=mode, config=settings)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.run.log(_numbers(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class SwanlabTracker:
    def __init__(self, run_dir: Path, name: str, settings: dict[str, Any]):
        import swanlab

        self.swanlab = swanlab
        swanlab.init(project=PROJECT, experiment_name=name, logdir=str(run_dir / "swanlog"), mode="local",
                     config=settings)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.swanlab.log(_numbers(metrics), step=step)

    def close(self) -> None:
        self.swanlab.finish()


class MlflowTracker:
    def __init__(self, run_dir: Path, name: str, settings: dict[str, Any]):
        import mlflow

        self.mlflow = mlflow
        mlflow.set_tracking_uri((run_dir / "mlruns").resolve().as_uri())
        mlflow.set_experiment(PROJECT)
        mlflow.start_run(run_name=name)
        mlflow.log_params({key: str(value)[:250] for key, value in settings.items()})

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.mlflow.log_metrics(_numbers(metrics), step=step)

    def close(self) -> None:
        self.mlflow.end_run()


class Trackers:
    """Several trackers behind one ``log``/``close``; a tracker that fails is closed and dropped, once, with
    a note, so a tracker problem never ends a training run."""

    def __init__(self, trackers: list[Tracker], on_error=None):
        self.trackers = list(trackers)
        self.on_error = on_error or (lambda message: None)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for tracker in list(self.trackers):
            try:
                tracker.log(step, metrics)
            except Exception as exc:  # noqa: BLE001 - a tracker must not end the run
                self.trackers.remove(tracker)
                self.on_error(f"{type(tracker).__name__} stopped logging: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        for tracker in self.trackers:
            try:
                tracker.close()
            except Exception as exc:  # noqa: BLE001
                self.on_error(f"{type(tracker).__name__} did not close cleanly: {type(exc).__name__}: {exc}")
        self.trackers = []


def open_trackers(config, run_dir: str | Path, on_error=None) -> Trackers:
    """The trackers ``config.report_to`` names, writing under ``run_dir`` (tensorboard/, wandb/, swanlog/,
    mlruns/). An empty ``Trackers`` for report_to: none. A tracker whose package is missing raises ImportError:
    ``validate`` reports that before a run starts."""
    run_dir = Path(run_dir)
    name = run_dir.name
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                if not f.metadata.get("internal") and getattr(config, f.name) is not None}
    opened: list[Tracker] = []
    for tracker in requested(config.report_to):
        if tracker == "tensorboard":
            opened.append(TensorBoardTracker(run_dir / "tensorboard"))
        elif tracker == "wandb":
            opened.append(WandbTracker(run_dir, name, settings))
            if on_error is not None and wandb_mode()[0] == "offline":
                on_error(f"W&B logs offline into {run_dir / 'wandb'}: `wandb sync` uploads it, or set "
                         "WANDB_MODE=online before training to send it as it trains.")
        elif tracker == "swanlab":
            opened.append(SwanlabTracker(run_dir, name, settings))
            if on_error is not None:  # LLaMA-Factory's swanlab_mode defaults to cloud
                on_error(f"SwanLab logs locally into {run_dir / 'swanlog'} (`swanlab watch -l` that folder shows it, "
                         "with swanlab[dashboard]); the swanlab_* keys for its cloud are not used here.")
        elif tracker == "mlflow":
            opened.append(MlflowTracker(run_dir, name, settings))
    return Trackers(opened, on_error)
