"""Which model a benchmark runs on: ``--model NAME_OR_PATH``.

- a model folder (config.json, weights, tokenizer) is used as it is;
- ``lf-tiny-qwen3`` (or another built-in demo model) is built offline into the benchmark's scratch folder;
- a registry id (``smollm2-135m-instruct``) is looked up in the model registry and found in the local caches
  (./models, the Hugging Face and ModelScope caches) through engine.models; a benchmark never downloads.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_MODEL = "lf-tiny-qwen3"
REPO = Path(__file__).resolve().parent.parent


class ModelNotAvailable(SystemExit):
    """The model cannot be used here; the message says how to get it."""


def resolve_bench_model(name: str, scratch: Path) -> tuple[Path, str]:
    """(the model folder, the name to print in table headers)."""
    from engine.models.demo import DEMO_MODELS, build_demo_model

    folder = Path(name).expanduser()
    if name.startswith(("/", ".", "~")) and not folder.is_dir():
        raise ModelNotAvailable(f"There is no model folder at {folder}.")
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise ModelNotAvailable(f"{folder} has no config.json: pass a model folder or a registry id.")
        return folder.resolve(), folder.resolve().name
    if name in DEMO_MODELS:
        return Path(build_demo_model(name, scratch / "model")), name
    return _cached_registry_model(name), name


def _cached_registry_model(name: str) -> Path:
    from engine.models.cache import find_local_model
    from engine.models.registry import find_model

    download = f"`lf-assistant models download {name}`"
    entry = find_model(name)
    if entry is None:
        raise ModelNotAvailable(
            f"{name!r} is neither a model folder nor a model the registry knows. Pass the folder of a model on "
            f"this machine, or a registry id that is downloaded ({download} fetches a registered one).")
    # where `lf-assistant models download` puts it (./models), from here or from the checkout
    checks = [find_local_model(entry.id, models_dir=where) for where in (Path("models"), REPO / "models")]
    check = next((c for c in checks if c.complete), checks[0])
    if check.path is None or not check.complete:
        problems = "; ".join(check.problems) or "not found"
        raise ModelNotAvailable(f"{name} ({entry.id}) is not on this machine in full ({problems}). Fetch it "
                                f"first with {download}, or pass its folder.")
    return check.path
