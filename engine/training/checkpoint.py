"""Checkpoints that can be trusted: complete or absent, never code, resumed exactly.

A checkpoint is written into a hidden ``.checkpoint-<step>.*.partial`` folder, its completion marker last, and
renamed to ``checkpoint-<step>`` only then; a crash or a full disk leaves the previous checkpoints untouched and
the partial folder is swept on the next start. Optimizer, scheduler and RNG states hold only tensors, numbers,
strings, lists and dicts, and are loaded with ``torch.load(weights_only=True)``: a checkpoint file that would need
unpickling arbitrary objects (code) is refused, naming the file.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from engine.errors import ConfigError, EngineError
from engine.jsonio import apply_umask, loads_json
from engine.rundir import CHECKPOINT_MARKER, find_complete_checkpoints, resolve_resume  # noqa: F401

PARTIAL_GLOB = ".checkpoint-*.partial"


class CheckpointWriteError(EngineError):
    """A checkpoint could not be written (disk full, permissions); earlier checkpoints are intact."""


def rng_state() -> dict:
    """Every RNG the loop draws from, as tensors and plain numbers (safe to load without unpickling code)."""
    version, internal, gauss = random.getstate()
    legacy = np.random.get_state(legacy=False)
    return {
        "python": {"version": version, "internal": torch.tensor(internal, dtype=torch.int64), "gauss": gauss},
        "numpy": {"key": torch.from_numpy(legacy["state"]["key"].astype(np.int64)), "pos": int(legacy["state"]["pos"]),
                  "has_gauss": int(legacy["has_gauss"]), "gauss": float(legacy["gauss"])},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict) -> None:
    python = state["python"]
    random.setstate((python["version"], tuple(python["internal"].tolist()), python["gauss"]))
    legacy = state["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": legacy["key"].numpy().astype(np.uint32), "pos": legacy["pos"]},
                         "has_gauss": legacy["has_gauss"], "gauss": legacy["gauss"]})
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def safe_load(path: Path):
    """``torch.load`` that never runs code from the file; a clear error for unsafe or damaged files."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # torch's message goes on to suggest weights_only=False, i.e. running the file's code: only the line that
        # names what the file wanted to run is quoted
        named = [line.strip() for line in str(exc).splitlines() if "Unsupported global" in line][:1]
        what = f" ({named[0][:200]})" if named else ""
        raise EngineError(f"{path} holds objects that can only be loaded by running code from the file{what}. "
                          "lf-assistant does not load such checkpoints: " + _EARLIER + ", or start a new run from "
                          "the checkpoint's weights (adapter_name_or_path / model_name_or_path).") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise _damaged(path, f"{type(exc).__name__}: {str(exc)[:200]}") from None


def content_digest(items: list, settings: dict | None = None) -> str:
    """A digest of rows or samples (token lists as packed integers, anything else as sorted JSON) and `settings`."""
    from array import array

    digest = hashlib.sha256(json.dumps(settings or {}, sort_keys=True, default=str).encode())
    for item in items:
        for key, value in sorted(item.items()) if isinstance(item, dict) else [("", item)]:
            digest.update(key.encode())
            try:
                digest.update(array("q", value).tobytes())  # token ids and labels
            except TypeError:
                digest.update(json.dumps(value, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:32]


def data_digests(samples: list, groups: list, rows_digest: str | None = None) -> dict:
    """What an exact resume needs unchanged, as digests: the train data (``rows_digest``: the train rows with the
    settings that encode them, as the recipe's data step made it; else the samples themselves, as read from
    tokenized_path) and how one epoch groups the samples into steps and micro-batches (batch size, accumulation,
    processes, packing, seed)."""
    return {"train_samples": len(samples), "data_digest": rows_digest or content_digest(samples),
            "batches_digest": hashlib.sha256(json.dumps(groups).encode()).hexdigest()[:32]}


def resume_note(saved: dict, now: dict, total_steps: int, folder: Path) -> str | None:
    """Refuse (ConfigError) to resume a checkpoint onto other train samples, or the same ones grouped otherwise:
    its data position would then point at other batches. A changed step count only stretches the schedule: the
    note says so. A checkpoint from before these digests were kept is resumed as it is."""
    weights = f"start a new run from its weights (adapter_name_or_path or model_name_or_path: {folder})"
    if saved.get("data_digest") not in (None, now["data_digest"]):
        raise ConfigError(
            f"{folder} was saved while training on other samples ({saved.get('train_samples', '?')} then, "
            f"{now['train_samples']} now): the dataset files, dataset, max_samples, cutoff_len, template or val_size "
            "changed since. Resuming would continue its data position on other batches. Restore the data and "
            f"settings it was trained with, or {weights}.")
    if saved.get("batches_digest") not in (None, now["batches_digest"]):
        raise ConfigError(
            f"{folder} grouped the same samples into other steps: per_device_train_batch_size, "
            "gradient_accumulation_steps, the number of processes, the batching (packing) or the seed changed since. "
            f"Resuming would skip or repeat samples. Restore those settings, or {weights}.")
    before = saved.get("total_steps")
    if isinstance(before, int) and before != total_steps:
        return (f"the run now has {total_steps} steps where {folder.name} was saved in a run of {before} "
                "(max_steps or num_train_epochs changed): the learning-rate schedule is stretched over the new "
                "count from here on.")
    return None


_EARLIER = "resume from an earlier complete checkpoint (`lf-assistant resume-train RUN_ID --checkpoint N`)"


def _damaged(path: Path, why: str) -> EngineError:
    kept = ", ".join(p.name for p in find_complete_checkpoints(Path(path).parent.parent))
    return EngineError(f"{path} cannot be used ({why}): the checkpoint is damaged or was not written by "
                       f"lf-assistant; {_EARLIER}" + (f"; complete ones: {kept}." if kept else "."))


def sweep_partial(output_dir: Path) -> None:
    """Remove half-written checkpoint folders of an earlier, interrupted run (they are ours: hidden, partial)."""
    for partial in Path(output_dir).glob(PARTIAL_GLOB):
        shutil.rmtree(partial, ignore_errors=True)


def save_checkpoint(output_dir: Path, step: int, *, save_model, optimizer, scheduler, trainer_state: dict,
                    save_only_model: bool = False, total_limit: int | None = None) -> Path:
    """Write checkpoint-<step>/ completely, or raise CheckpointWriteError and leave earlier ones as they are."""
    output_dir = Path(output_dir)
    final = output_dir / f"checkpoint-{step}"
    partial = None
    try:
        partial = Path(tempfile.mkdtemp(prefix=f".checkpoint-{step}.", suffix=".partial", dir=output_dir))
        apply_umask(partial, directory=True)
        save_model(partial)
        if not save_only_model:
            torch.save(optimizer.state_dict(), partial / "optimizer.pt")
            torch.save(scheduler.state_dict(), partial / "scheduler.pt")
            torch.save(rng_state(), partial / "rng_state.pt")
        (partial / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2), encoding="utf-8")
        (partial / CHECKPOINT_MARKER).write_text(str(step), encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)  # a folder of the same step from before a resume: ours, superseded
        partial.rename(final)
    except OSError as exc:
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        kept = find_complete_checkpoints(output_dir)
        last = f"the newest complete checkpoint is {kept[-1].name}" if kept else "no complete checkpoint exists yet"
        raise CheckpointWriteError(f"Could not write checkpoint-{step} in {output_dir}: {exc.strerror or exc}. "
                                   f"Earlier checkpoints are intact ({last}). Free space or fix the folder's "
                                   "permissions, then `lf-assistant resume-train`.") from None
    if total_limit:
        for old in find_complete_checkpoints(output_dir)[:-total_limit]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_training_state(folder: Path, optimizer, scheduler) -> dict:
    """Restore optimizer, scheduler and RNG; return trainer_state.json (step, epoch, position)."""
    state_file = folder / "trainer_state.json"
    try:
        state = loads_json(state_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:  # nested too deep or a number too long included
        raise _damaged(state_file, f"not valid JSON: {exc.msg}") from None
    except (OSError, ValueError) as exc:
        raise _damaged(state_file, str(exc)[:200]) from None
    counts = [state.get(k) for k in ("step", "epoch", "group")] if isinstance(state, dict) else []
    if len(counts) != 3 or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts) \
            or counts[0] < 1:
        raise _damaged(state_file, "no step (at least 1), epoch and data position as counts")
    if not (folder / "optimizer.pt").exists():
        raise ConfigError(f"{folder} was saved with save_only_model: true and has no optimizer state; it cannot be "
                          "resumed exactly. Start a new run from its weights instead (adapter_name_or_path).")
    for name, load in (("optimizer.pt", optimizer.load_state_dict), ("scheduler.pt", scheduler.load_state_dict),
                       ("rng_state.pt", set_rng_state)):
        try:
            load(safe_load(folder / name))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
            # well-formed tensors and numbers, but not the state this run's optimizer, schedule or RNGs have
            raise _damaged(folder / name, f"{type(exc).__name__}: {str(exc)[:200]}") from None
    return state
