"""Find a model on this machine and check that it is complete, not just present.

A download that stopped half-way leaves a folder that looks like a model: config.json is there, the weights are
not (or only some shards, or a truncated one). Loading it then fails minutes later with an obscure error, or a
run silently starts from the hub again. Here every shard named in the index must exist at the exact size its
safetensors header announces, no `*.incomplete` file may remain, config and tokenizer files must be present, and
the weights must weigh roughly what the parameter count and dtype say.

Places searched, in order: the given path, ./models/, the folders `lf-assistant models download` recorded in the
user's cache (engine.models.recorded: a project's models/ seen from another working folder), the Hugging Face
cache (`HF_HUB_CACHE`, `HF_HOME/hub`, `~/.cache/huggingface/hub`, layout `models--org--name/snapshots/<rev>/`) and
the ModelScope cache (`MODELSCOPE_CACHE`, `~/.cache/modelscope`; both the current
`models/org--name/snapshots/<rev>/` layout and the older `[hub/]models/org/name/` one, where dots in the name were
written as `___`).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from engine.jsonio import loads_json, read_json_dict
from engine.messages import Message

Where = Literal["local", "hf_cache", "modelscope_cache", "models_dir", "recorded"]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer.tiktoken", "qwen.tiktoken",
                   "spiece.model")
PARTIAL_SUFFIXES = (".incomplete", ".parallel_tmp")
# Bytes per parameter by config.json dtype; unknown dtypes are assumed 16-bit, what nearly every release uses.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
# Stored weights below this share of params x dtype bytes mean shards are missing. Published parameter counts
# are rounded and tied embeddings are stored once, so real checkpoints land between ~0.8 and ~1.3.
MIN_SIZE_RATIO = 0.6
# A Git LFS pointer file (what `git clone` without git-lfs leaves) starts with this line.
LFS_POINTER = b"version https://git-lfs"


@dataclass
class CacheCheck:
    """Where a model was found and whether it can be loaded as it is."""

    path: Path | None
    """The folder checked (None when the model was not found anywhere)."""
    complete: bool
    """True when nothing is missing, truncated or still downloading."""
    where: Where | None
    """Which kind of place it was found in (None when not found)."""
    problems: list[str] = field(default_factory=list)
    """One sentence per thing that is wrong; empty when complete."""
    size_bytes: int = 0
    """Bytes on disk in the folder (symlinks into the HF blob store followed)."""
    expected_bytes: int | None = None
    """Bytes the weights should take (from the shard index, the safetensors headers or params x dtype)."""
    searched: list[Path] = field(default_factory=list)
    """Every folder looked at, for the 'not found' message."""
    problem_messages: list[Message] = field(default_factory=list)
    """``problems`` as engine.messages.Message, one per problem."""

    @property
    def empty_shell(self) -> bool:
        """A folder that exists but holds no weights at all: the download never really happened."""
        return self.path is not None and any(p.startswith("no weight files") for p in self.problems)

    def where_words(self) -> str | None:
        """The kind of place, and for a recorded download where the record is (it was not under ./models)."""
        if self.where != "recorded":
            return self.where
        from engine.models.recorded import index_path

        return f"downloaded there by `lf-assistant models download`, as {index_path()} records"

    def summary(self) -> str:
        """One or a few lines for the CLI and TUI."""
        if self.path is None and self.problem_messages and self.problem_messages[0].code == "models.cache.is_a_file":
            return self.problems[0]
        if self.path is None:
            places = ", ".join(str(p) for p in self.searched[:6]) or "nowhere"
            more = f" (+{len(self.searched) - 6} more)" if len(self.searched) > 6 else ""
            return f"not found locally (looked in {places}{more})"
        size, where = human_bytes(self.size_bytes), self.where_words()
        if self.complete:
            return f"complete: {self.path} ({size}, {where})"
        head = "empty shell" if self.empty_shell else "incomplete"
        lines = [f"{head}: {self.path} ({size} on disk, {where}) — {len(self.problems)} problem(s):"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, read from the environment now (huggingface_hub freezes it at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def modelscope_cache() -> Path:
    """The ModelScope cache root (`MODELSCOPE_CACHE`, default ~/.cache/modelscope)."""
    return Path(os.environ.get("MODELSCOPE_CACHE") or Path.home() / ".cache" / "modelscope").expanduser()


# ---------------------------------------------------------------------------------------------------- checks
def _files(root: Path) -> list[Path]:
    """Every file below root, following the snapshot -> blob symlinks of the HF cache."""
    found = []
    for dirpath, _dirnames, filenames in os.walk(root, followlinks=True):
        found += [Path(dirpath) / name for name in filenames]
    return found


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # a dangling link: the blob it points at was never written
        return 0


def safetensors_problem(path: Path) -> tuple[Message | None, int]:
    """(what is wrong with a safetensors file or None, the size its header announces)."""
    problem, header, header_len = _read_safetensors_header(path)
    if problem is not None:
        return problem, 0
    actual, name = _size(path), path.name
    try:
        data_end = _tensors_end(header)
    except ValueError as exc:
        return Message("models.cache.corrupt_header", f"{name} has a corrupt header ({exc})",
                       {"file": name, "why": str(exc)}), 0
    expected = 8 + header_len + data_end
    if actual != expected:
        return Message("models.cache.size_differs", f"{name} is {human_bytes(actual)} but its header says "
                       f"{human_bytes(expected)}: truncated or corrupted, download it again",
                       {"file": name, "size": human_bytes(actual), "expected": human_bytes(expected)}), expected
    return None, expected


def safetensors_header(path: Path) -> dict | None:
    """The JSON header of a safetensors file, read within the format's limits, every tensor in it with whole,
    ordered data_offsets; None when there is no such header to read (``safetensors_problem`` says why)."""
    header = _read_safetensors_header(path)[1]
    try:
        _tensors_end(header)
    except ValueError:
        return None
    return header


def _read_safetensors_header(path: Path) -> tuple[Message | None, object, int]:
    """(what stops the header being read or None, the header, its length in bytes)."""
    actual, name = _size(path), path.name
    if not path.exists():
        return Message("models.cache.missing", f"{name} is missing", {"file": name}), None, 0
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            if head.startswith(LFS_POINTER[:8]):
                return Message("models.cache.lfs_pointer", f"{name} is a Git LFS pointer, not the weights (cloned "
                               "without git-lfs): download it again with `lf-assistant models download`",
                               {"file": name}), None, 0
            if len(head) < 8:
                return Message("models.cache.truncated_bytes", f"{name} is truncated ({actual} bytes)",
                               {"file": name, "bytes": actual}), None, 0
            (header_len,) = struct.unpack("<Q", head)
            if header_len > actual:
                return Message("models.cache.truncated", f"{name} is truncated ({human_bytes(actual)} on disk)",
                               {"file": name, "size": human_bytes(actual)}), None, 0
            if header_len > MAX_SAFETENSORS_HEADER:  # the safetensors library refuses larger ones too
                said, limit = human_bytes(header_len), human_bytes(MAX_SAFETENSORS_HEADER)
                return Message("models.cache.header_too_long", f"{name} has a corrupt header (its length field says "
                               f"{said}, more than the {limit} safetensors allows)",
                               {"file": name, "size": said, "limit": limit}), None, 0
            header = loads_json(fh.read(header_len).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) if type(exc) is ValueError else \
            exc.__class__.__name__
        return Message("models.cache.corrupt_header", f"{name} has a corrupt header ({why})",
                       {"file": name, "why": why}), None, 0
    return None, header, header_len


MAX_SAFETENSORS_HEADER = 100_000_000


def _tensors_end(header) -> int:
    """Where the last tensor's bytes end, from a safetensors header; ValueError when the header is not a map of
    tensors, each with a dtype, a shape and [begin, end] offsets of whole numbers, begin <= end."""
    if not isinstance(header, dict):
        raise ValueError("not an object")
    end = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int and o >= 0 for o in offsets)
                and offsets[0] <= offsets[1]):
            raise ValueError(f"tensor {name[:80]!r} has no valid data_offsets")
        end = max(end, offsets[1])
    return end


def require_intact_safetensors(paths: list[Path], what: str) -> None:
    """ModelError naming the first truncated or corrupt safetensors file among `paths` (missing ones are skipped:
    the callers report those themselves)."""
    from engine.errors import ModelError

    for path in paths:
        if not Path(path).is_file():
            continue
        problem, _size_announced = safetensors_problem(Path(path))
        if problem:
            raise ModelError(f"{what} {Path(path).parent} cannot be loaded: {problem}. The file {path} is damaged "
                             "(an interrupted copy or download); copy or download it again.")


def _empty(path: Path) -> Message:
    return Message("models.cache.empty", f"{path.name} is empty", {"file": path.name})


def _said(exc: Exception, code: str) -> Message:
    """An error the check read from a file (a config.json or a weight index that cannot be read), with its
    sentence as the detail: ``code`` says which file, the detail its own message where it has one."""
    return Message(code, str(exc), {"error": getattr(exc, "message", None) or str(exc)})


def _weight_problems(root: Path) -> tuple[list[Message], int | None, list[Path]]:
    """(problems, expected weight bytes, weight files) for the weights in a model folder."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = root / index_name
        if index.is_file():
            return _sharded_problems(root, index)
    single = root / "model.safetensors"
    loose = sorted(p for p in root.glob("*.safetensors") if not p.name.startswith("adapter_"))
    if single.exists() or loose:
        files = [single] if single.exists() else loose
        results = [safetensors_problem(p) for p in files]
        return [r[0] for r in results if r[0]], sum(r[1] for r in results), files
    bins = sorted(root.glob("pytorch_model*.bin"))
    if bins:
        return [_empty(p) for p in bins if _size(p) == 0], None, bins
    if (root / "adapter_config.json").is_file():
        return [Message("models.cache.adapter_folder", "no weight files: this is a LoRA adapter folder, not a base "
                        "model (use it as adapter_name_or_path, with its base model as model_name_or_path)")], None, []
    return [Message("models.cache.no_weights", "no weight files (model.safetensors, its shards, or "
                    "pytorch_model.bin)")], None, []


def _sharded_problems(root: Path, index: Path) -> tuple[list[Message], int | None, list[Path]]:
    from engine.errors import ModelError

    try:
        shards = index_shards(index)
    except ModelError as exc:
        return [_said(exc, "models.cache.index_unreadable")], None, []
    data = read_json_dict(index)
    problems, header_total, files = [], 0, [root / s for s in shards]
    missing = [s for s in shards if not (root / s).exists()]
    if missing:
        names = ", ".join(missing[:4]) + (" ..." if len(missing) > 4 else "")
        problems.append(Message("models.cache.shards_missing", f"{len(missing)} of {len(shards)} weight shards "
                                f"missing: {names}", {"missing": len(missing), "shards": len(shards),
                                                      "names": names}))
    for shard in files:
        if shard.exists() and shard.suffix == ".safetensors":
            problem, expected = safetensors_problem(shard)
            header_total += expected
            problems += [problem] if problem else []
        elif shard.exists() and _size(shard) == 0:
            problems.append(_empty(shard))
    metadata = data.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    total = total if type(total) is int and total > 0 else None
    return problems, total or header_total or None, files


def index_shards(index: Path) -> list[str]:
    """The shard files a weight index (model.safetensors.index.json) names; ModelError naming the index when it
    is not JSON, has no weight_map of tensor -> file name, or names a file outside the model's folder."""
    from engine.errors import ModelError
    from engine.jsonio import read_record

    fix = "Copy or download the model's index file again."
    data = read_record(index, {"weight_map": dict, "metadata": dict}, fix=fix, error=ModelError,
                       max_bytes=64 << 20, what="a weight index")
    weight_map = (data or {}).get("weight_map")
    fixing = Message("words", fix)
    if not weight_map:
        text = f"{index} has no weight_map. {fix}"
        raise ModelError(text, message=Message("models.index_no_map", text, {"path": str(index), "fix": fixing}))
    shards = set()
    for name in weight_map.values():
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
            shown = repr(str(name)[:80])
            text = f"{index} names the weight file {shown}, which is not a file in the model's folder. {fix}"
            raise ModelError(text, message=Message("models.index_outside", text,
                                                   {"path": str(index), "name": shown, "fix": fixing}))
        shards.add(name)
    return sorted(shards)


CONFIG_FIELDS = {"model_type": str, "architectures": list, "torch_dtype": str, "dtype": str, "text_config": dict,
                 "quantization_config": dict, "auto_map": dict, "num_hidden_layers": int, "hidden_size": int,
                 "intermediate_size": int, "num_attention_heads": int, "num_key_value_heads": int, "vocab_size": int,
                 "max_position_embeddings": int, "head_dim": int}
"""config.json fields lf-assistant reads itself (family, size and layer checks), with the types transformers gives
them; the text_config of a multimodal model is checked alike."""
CONFIG_FIX = "Copy or download the model's config.json again."


def read_model_config(root: Path) -> dict | None:
    """A model folder's config.json, checked before anything reads it: None when absent; ModelError naming the file
    and the field when it is not a JSON object, nests too deep, or a field above has another type."""
    from engine.errors import ModelError
    from engine.jsonio import read_record

    what = "a model's config.json"
    config = read_record(root / "config.json", CONFIG_FIELDS, fix=CONFIG_FIX, error=ModelError, what=what)
    if config and isinstance(config.get("text_config"), dict):
        inner = {name: kind for name, kind in CONFIG_FIELDS.items() if name != "text_config"}
        from engine.jsonio import fits, kind_words

        for name, kind in inner.items():
            value = config["text_config"].get(name)
            if value is not None and not fits(value, (kind,)):
                raise ModelError(f"{root / 'config.json'}: the field 'text_config.{name}' must be "
                                 f"{'a whole number' if kind is int else kind_words(kind())}, not {kind_words(value)}. "
                                 f"{CONFIG_FIX}")
    return config


def model_config_problem(root: Path) -> str | None:
    """What is wrong with a model folder's config.json (read_model_config), or None."""
    from engine.errors import ModelError

    try:
        read_model_config(root)
    except ModelError as exc:
        return str(exc)
    return None


def _config_problems(root: Path) -> tuple[list[Message], dict]:
    if not (root / "config.json").is_file():
        return [Message("models.cache.missing", "config.json is missing", {"file": "config.json"})], {}
    from engine.errors import ModelError

    try:
        return [], read_model_config(root) or {}
    except ModelError as exc:
        return [_said(exc, "models.cache.config_unreadable")], {}


def _dtype_bytes(config: dict) -> int:
    dtype = config.get("torch_dtype") or config.get("dtype") or (config.get("text_config") or {}).get("torch_dtype")
    return DTYPE_BYTES.get(str(dtype), 2)


def _size_problem(weight_bytes: int, params_b: float, config: dict) -> tuple[Message | None, int | None]:
    """Compare stored weight bytes with the published parameter count (skipped for quantized checkpoints)."""
    if config.get("quantization_config"):
        return None, None
    expected = int(params_b * 1e9 * _dtype_bytes(config))
    if weight_bytes < MIN_SIZE_RATIO * expected:
        size, needed = human_bytes(weight_bytes), human_bytes(expected)
        text = (f"the weights take {size}, but a {params_b:g}B-parameter model needs about {needed}: files are "
                "missing or this is not the model you meant")
        return Message("models.cache.too_small", text, {"size": size, "params": f"{params_b:g}B",
                                                        "expected": needed}), expected
    return None, expected


def _hf_blob_problems(root: Path) -> list[Message]:
    """Partial blobs of an HF cache snapshot live in ../../blobs, not in the snapshot folder itself."""
    if root.parent.name != "snapshots":
        return []
    blobs = root.parent.parent / "blobs"
    partial = [p.name for p in blobs.glob("*.incomplete")] if blobs.is_dir() else []
    if not partial:
        return []
    return [Message("models.cache.unfinished_blobs", f"{len(partial)} unfinished download(s) in {blobs} "
                    f"({partial[0]})", {"count": len(partial), "folder": str(blobs), "file": partial[0]})]


def check_model_dir(path: Path, *, params_b: float | None = None) -> CacheCheck:
    """Check one folder: config, tokenizer, every weight shard at its announced size, no partial downloads."""
    root = Path(path).expanduser()
    if not root.is_dir():
        return _found(root, [Message("models.cache.not_a_folder", f"{root} is not a folder", {"path": str(root)})])
    files = _files(root)
    problems, config = _config_problems(root)
    if not any((root / name).is_file() for name in TOKENIZER_FILES):
        problems.append(Message("models.cache.no_tokenizer", "no tokenizer files (tokenizer.json, tokenizer.model or "
                                "vocab.json)"))
    weight_problems, expected, weight_files = _weight_problems(root)
    problems += weight_problems
    partial = [p for p in files if p.name.endswith(PARTIAL_SUFFIXES)]
    if partial:
        first = str(partial[0].relative_to(root))
        problems.append(Message("models.cache.unfinished_files", f"{len(partial)} unfinished download file(s), e.g. "
                                f"{first}: a download is running or was interrupted",
                                {"count": len(partial), "file": first}))
    problems += _hf_blob_problems(root)
    if params_b and weight_files and not weight_problems:
        size_problem, estimate = _size_problem(sum(_size(p) for p in weight_files), params_b, config)
        problems += [size_problem] if size_problem else []
        expected = expected or estimate
    return _found(root, problems, sum(_size(p) for p in files), expected)


def _found(root: Path, problems: list[Message], size: int = 0, expected: int | None = None) -> CacheCheck:
    """The check of the folder ``root``, complete when nothing is wrong."""
    return CacheCheck(root, not problems, "local", [p.text for p in problems], size, expected, searched=[root],
                      problem_messages=problems)


# ---------------------------------------------------------------------------------------------------- search
def _looks_like_path(model: str) -> bool:
    """A hub id is exactly `org/name`; anything rooted, relative or deeper is meant as a folder."""
    return model.startswith((".", "/", "~")) or model.count("/") > 1 or "\\" in model


def _newest_snapshot(repo_dir: Path) -> Path | None:
    """The snapshot `refs/main` points at, else the most recently written one."""
    snapshots = repo_dir / "snapshots"
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        pinned = snapshots / ref.read_text(encoding="utf-8").strip()
        if pinned.is_dir():
            return pinned
    candidates = [p for p in snapshots.glob("*") if p.is_dir()] if snapshots.is_dir() else []
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def _hub_ids(model: str) -> tuple[list[str], float | None]:
    """Hub ids to look for (Hugging Face and ModelScope spellings) and the parameter count, via the registry."""
    from engine.models.registry import find_model

    entry = find_model(model)
    if entry is None:
        return ([model] if "/" in model else []), None
    ids = [i for i in (entry.hf_id, entry.ms_id, *entry.aliases) if i]
    return list(dict.fromkeys(ids)), entry.params_b


def _recorded(model: str, ids: list[str]) -> list[Path]:
    """The folders `models download` recorded for the model (under its registry id, a hub id, or as named)."""
    from engine.models.recorded import recorded_folders
    from engine.models.registry import find_model

    entry = find_model(model)
    return recorded_folders([entry.id] + ids if entry else [model, *ids])


def candidate_dirs(model: str, models_dir: Path) -> list[tuple[Where, Path]]:
    """Every folder where `model` (a hub id or bare name) could be, in search order."""
    ids, _ = _hub_ids(model)
    names = list(dict.fromkeys([i.split("/")[-1] for i in ids] + [model.split("/")[-1]]))
    out: list[tuple[Where, Path]] = [("models_dir", models_dir / n) for n in names]
    out += [("models_dir", models_dir / i) for i in ids] + [("models_dir", models_dir / i.replace("/", "--"))
                                                             for i in ids]
    out += [("recorded", folder) for folder in _recorded(model, ids)]
    for repo_id in ids:
        # Without a snapshot the repo folder itself is checked: blobs/*.incomplete there is a stalled download.
        repo_dir = hf_hub_cache() / f"models--{repo_id.replace('/', '--')}"
        out.append(("hf_cache", _newest_snapshot(repo_dir) or repo_dir))
    ms = modelscope_cache()
    for repo_id in ids:
        org, _, name = repo_id.partition("/")
        snapshot = _newest_snapshot(ms / "models" / f"{org}--{name}")
        if snapshot is not None:
            out.append(("modelscope_cache", snapshot))
        for legacy_name in dict.fromkeys([name.replace(".", "___"), name]):
            out += [("modelscope_cache", ms / sub / org / legacy_name)
                    for sub in ("models", "hub/models", "hub")]
    return list(dict.fromkeys(out))


def _kind(path: Path) -> str | None:
    """"folder", "file" or None (nothing there, or a name the file system refuses: too long, say)."""
    try:
        return "folder" if path.is_dir() else "file" if path.exists() else None
    except OSError:  # ENAMETOOLONG: pathlib lets it through, and no model can live there
        return None


def find_local_model(model: str, *, models_dir: Path = Path("models")) -> CacheCheck:
    """Find `model` (a folder, a hub id or a registry name) on this machine and check it.

    Returns the first complete copy; otherwise the most complete partial copy with its problems; otherwise a
    CacheCheck with path None listing where it looked.
    """
    given = Path(model).expanduser()
    if _kind(given) == "folder":
        return check_model_dir(given, params_b=_hub_ids(given.name)[1])
    if _kind(given) == "file":
        text = f"{model} is a file, not a model folder (a folder with config.json and the weights)"
        return CacheCheck(None, False, None, [text], searched=[given],
                          problem_messages=[Message("models.cache.is_a_file", text, {"model": model})])
    if _looks_like_path(model):
        text = f"{model} does not exist"
        return CacheCheck(None, False, None, [text], searched=[given],
                          problem_messages=[Message("models.cache.does_not_exist", text, {"model": model})])
    _, params_b = _hub_ids(model)
    candidates = candidate_dirs(model, Path(models_dir))
    partial: list[CacheCheck] = []
    for where, folder in candidates:
        if _kind(folder) != "folder":
            continue
        check = check_model_dir(folder, params_b=params_b)
        check.where = where
        if check.complete:
            return check
        partial.append(check)
    searched = [folder for _, folder in candidates]
    if partial:
        best = max(partial, key=lambda c: c.size_bytes)
        best.searched = searched
        return best
    text = f"{model} was not found on this machine"
    return CacheCheck(None, False, None, [text], searched=searched,
                      problem_messages=[Message("models.cache.not_found", text, {"model": model})])


def checkpoint_is_quantized(model_name_or_path: str) -> str | None:
    """The quantization method of a local checkpoint (GPTQ, AWQ, bnb...), or None when it is full precision."""
    config = read_json_dict(Path(model_name_or_path).expanduser() / "config.json")
    quant = config.get("quantization_config")
    if not quant:
        return None
    return str(quant.get("quant_method") or "quantized")
