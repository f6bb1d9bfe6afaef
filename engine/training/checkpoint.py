"""Checkpoints that can be trusted: written into a folder, completion marker last, rotated, resumed exactly."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from engine.errors import ConfigError
from engine.rundir import CHECKPOINT_MARKER, find_complete_checkpoints


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(output_dir: Path, step: int, *, save_model, optimizer, scheduler, trainer_state: dict,
                    save_only_model: bool = False, total_limit: int | None = None) -> Path:
    """Write checkpoint-<step>/ and mark it complete only after every file is on disk."""
    folder = Path(output_dir) / f"checkpoint-{step}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    save_model(folder)
    if not save_only_model:
        torch.save(optimizer.state_dict(), folder / "optimizer.pt")
        torch.save(scheduler.state_dict(), folder / "scheduler.pt")
        torch.save(rng_state(), folder / "rng_state.pt")
    (folder / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2), encoding="utf-8")
    (folder / CHECKPOINT_MARKER).write_text(str(step), encoding="utf-8")
    if total_limit:
        for old in find_complete_checkpoints(output_dir)[:-total_limit]:
            shutil.rmtree(old, ignore_errors=True)
    return folder


def resolve_resume(resume_from_checkpoint: str | None, output_dir: Path) -> Path | None:
    """``auto`` -> newest complete checkpoint in output_dir (None if there is none); a path must be complete."""
    if not resume_from_checkpoint:
        return None
    if str(resume_from_checkpoint).lower() in ("auto", "true", "latest"):
        complete = find_complete_checkpoints(output_dir)
        return complete[-1] if complete else None
    path = Path(resume_from_checkpoint)
    if path.is_dir() and path.name.isdigit():
        path = Path(output_dir) / f"checkpoint-{path.name}"
    if not path.is_dir() and str(resume_from_checkpoint).isdigit():
        path = Path(output_dir) / f"checkpoint-{resume_from_checkpoint}"
    if not (path / CHECKPOINT_MARKER).exists():
        complete = [p.name for p in find_complete_checkpoints(output_dir)]
        listing = ", ".join(complete) if complete else "none"
        raise ConfigError(f"resume_from_checkpoint {resume_from_checkpoint} is not a complete checkpoint "
                          f"(no {CHECKPOINT_MARKER} marker). Complete checkpoints in {output_dir}: {listing}. "
                          "Use resume_from_checkpoint: auto to take the newest complete one.")
    return path


def load_training_state(folder: Path, optimizer, scheduler) -> dict:
    """Restore optimizer, scheduler and RNG; return trainer_state.json (step, epoch, position)."""
    state = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    if not (folder / "optimizer.pt").exists():
        raise ConfigError(f"{folder} was saved with save_only_model: true and has no optimizer state; it cannot be "
                          "resumed exactly. Start a new run from its weights instead (adapter_name_or_path).")
    optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(folder / "scheduler.pt", weights_only=False))
    set_rng_state(torch.load(folder / "rng_state.pt", weights_only=False))
    return state
