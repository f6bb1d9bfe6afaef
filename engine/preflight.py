"""Problems found before a model loads: folders that cannot be written, and disks too small for the results.

Hours of training must never end in "permission denied" or "no space left": the launcher writes a probe into the
run folder and the output folder, and compares the free space there with what the result and a checkpoint will
take (estimated from the model's files and the method). No torch import.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from engine.errors import EngineError
from engine.methods import get_method

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def probe_writable(folder: Path, what: str) -> None:
    """Create ``folder`` and write (then remove) a file in it, or raise naming the folder and the reason."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(prefix=".lfa-probe-", dir=folder):
            pass
    except OSError as exc:
        raise EngineError(f"Cannot write to {what} {folder}: {exc.strerror or exc}. Choose a folder you can write "
                          "to (found before training, so nothing was lost).") from None


def human_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if count < 1024 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} TB"


def model_footprint(model_path: str | None) -> tuple[int, int, int] | None:
    """(weight bytes on disk, parameter count, hidden size) of a local model folder, or None when unknown."""
    if not model_path or not Path(model_path).is_dir():
        return None
    folder = Path(model_path)
    weights = [p for p in folder.glob("*") if p.suffix in (".safetensors", ".bin", ".pt") and p.is_file()]
    size = sum(p.stat().st_size for p in weights)
    from engine.errors import ModelError
    from engine.models.cache import read_model_config

    try:
        config = read_model_config(folder)
    except ModelError:  # named by the model checks; no estimate from it
        return None
    if not size or not isinstance(config, dict):
        return None
    per_param = DTYPE_BYTES.get(str(config.get("torch_dtype") or config.get("dtype") or "float32"), 4)
    hidden = config.get("hidden_size") or config.get("d_model") or 0
    return size, size // per_param, int(hidden) if isinstance(hidden, int) else 0


def result_sizes(config, model_path: str | None) -> tuple[int, int] | None:
    """Bytes of the final result and of one checkpoint (fp32 training state), estimated low rather than high."""
    footprint = model_footprint(model_path)
    if footprint is None:
        return None
    _size, params, hidden = footprint
    method = get_method(config.method)
    if method.adapter:
        share = min(1.0, 2 * config.lora_rank / hidden) if hidden else 0.0
        trained = int(params * share)
        result = trained * 4
    else:
        from engine.errors import ModelError
        from engine.models.cache import read_model_config

        try:
            layers = (read_model_config(Path(model_path)) or {}).get("num_hidden_layers")
        except ModelError:
            layers = None
        share = 1.0
        if config.method == "freeze" and isinstance(layers, int) and layers:
            share = min(1.0, abs(config.freeze_trainable_layers) / layers)
        trained = int(params * share)
        result = params * 4
    optimizer = 0 if config.save_only_model else 2 * trained * 4
    return result, result + optimizer


def space_problem(config, model_path: str | None, output_dir: Path) -> tuple[str | None, str | None]:
    """(a problem that must stop the run, a note worth telling) about free space in ``output_dir``."""
    sizes = result_sizes(config, model_path)
    if sizes is None:
        return None, None
    result, checkpoint = sizes
    free = shutil.disk_usage(output_dir).free
    needed = result + (checkpoint if config.save_strategy != "no" else 0)
    if free < needed:
        return (f"output_dir {output_dir} has {human_bytes(free)} free, but the result and one checkpoint need about "
                f"{human_bytes(needed)}. Free space or choose another output_dir (found before training, so "
                "nothing was lost)."), None
    kept = config.save_total_limit or 3
    if config.save_strategy != "no" and free < result + kept * checkpoint:
        return None, (f"output_dir has {human_bytes(free)} free; each checkpoint takes about "
                      f"{human_bytes(checkpoint)}. Set save_total_limit to keep fewer, or free space, so a late "
                      "checkpoint does not fail.")
    return None, None


def check_before_training(config, model_path: str | None, run_dir: Path, output_dir: Path) -> list[str]:
    """Probe both folders and the free space; raise on what would fail later, return notes for the log."""
    probe_writable(run_dir, "the run folder")
    probe_writable(output_dir, "output_dir")
    problem, note = space_problem(config, model_path, output_dir)
    if problem:
        raise EngineError(problem)
    return [note] if note else []
