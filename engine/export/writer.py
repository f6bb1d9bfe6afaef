"""Write an exported model folder, then read it back to prove it holds what was merged.

The folder loads in plain transformers and other runtimes without extra flags: weights in shards of at most
export_size (a single larger tensor sits alone in its shard), config.json, generation_config.json whose stop
tokens are the template's, the tokenizer with the training chat template both in tokenizer_config.json (older
runtimes read it there) and in chat_template.jinja (transformers 5 reads it there).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.checks import with_faults
from engine.export.merge import Check, Fingerprint, entries_match
from engine.jsonio import write_text_atomic
from engine.messages import Message

SAFE_INDEX = "model.safetensors.index.json"
LEGACY_INDEX = "pytorch_model.bin.index.json"


def save_weights(model, folder: Path, *, shard_bytes: int, dtype: torch.dtype, legacy: bool,
                 stop_ids: list[int], pad_id: int | None) -> tuple[list[str], list[Message]]:
    """(weight file names, notes). Casts the model to `dtype` in place first."""
    model.to(dtype)
    notes = []
    unique = {_storage(t): (name, t) for name, t in reversed(list(model.state_dict().items()))}  # tied: once
    oversized = [(name, t.numel() * t.element_size()) for name, t in unique.values()
                 if t.numel() * t.element_size() > shard_bytes]
    for name, size in oversized[:3]:
        notes.append(Message("export.tensor_alone", f"tensor {name} ({size / 1e9:.3g} GB) is larger than export_size, "
                             "so it sits alone in its shard.", {"tensor": name, "size": f"{size / 1e9:.3g}"}))
    generation = model.generation_config
    generation.eos_token_id = stop_ids if len(stop_ids) > 1 else stop_ids[0]
    if pad_id is not None:
        generation.pad_token_id = pad_id
    model.save_pretrained(str(folder), max_shard_size=shard_bytes)
    files = weight_files(folder)
    if legacy:
        files = _to_legacy_bin(folder, files)
    return files, notes


def weight_files(folder: Path) -> list[str]:
    """The weight files of an export folder, from its index when it has one."""
    for index_name in (SAFE_INDEX, LEGACY_INDEX):
        index = folder / index_name
        if index.is_file():
            return sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    return [name for name in ("model.safetensors", "pytorch_model.bin") if (folder / name).is_file()]


def _to_legacy_bin(folder: Path, files: list[str]) -> list[str]:
    """Rewrite safetensors shards as PyTorch .bin shards with the matching index (export_legacy_format: true)."""
    from safetensors.torch import load_file

    renamed = {name: name.replace("model", "pytorch_model", 1).replace(".safetensors", ".bin") for name in files}
    for old, new in renamed.items():
        torch.save(load_file(str(folder / old)), str(folder / new))
        (folder / old).unlink()
    index = folder / SAFE_INDEX
    if index.is_file():
        data = json.loads(index.read_text(encoding="utf-8"))
        data["weight_map"] = {k: renamed[v] for k, v in data["weight_map"].items()}
        write_json_atomic(folder / LEGACY_INDEX, data)
        index.unlink()
    return sorted(renamed.values())


def save_tokenizer(tokenizer, template, folder: Path, padding_side: str) -> list[Message]:
    """Save the tokenizer serving the training template; returns a note for each thing that had to change on the
    tokenizer."""
    changes = [Message("export.tokenizer_change", f"tokenizer: {change.text}", {"change": change})
               for change in template.fix_tokenizer(tokenizer)]
    jinja = template.jinja
    tokenizer.padding_side = padding_side
    tokenizer.save_pretrained(str(folder))
    if jinja is None:  # the template cannot be Jinja (see template.jinja_problem): the model's own one stays
        return changes
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    config["chat_template"] = jinja
    write_json_atomic(config_path, config)
    (folder / "chat_template.jinja").write_text(jinja, encoding="utf-8")
    return changes


def read_weights(folder: Path, files: list[str]):
    """(name, tensor) for every tensor in the weight files, one file at a time."""
    from safetensors import safe_open

    for name in files:
        path = folder / name
        if name.endswith(".bin"):
            yield from torch.load(str(path), map_location="cpu", weights_only=True).items()
            continue
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            for key in handle.keys():
                yield key, handle.get_tensor(key)


def verify_export(folder: Path, files: list[str], model, prints: list[Fingerprint], shard_bytes: int,
                  label: str = "merged") -> list[Check]:
    """Read the written files back: they hold exactly the in-memory (`label`) weights, the adapters' changes, and
    every shard is within size.

    `prints` come from merge_adapters: one per adapter and adapted matrix, each already summing the updates of the
    adapters merged after it, so a matrix several adapters touch is checked at every adapter's entries."""
    state = {name: tensor.detach() for name, tensor in model.state_dict().items()}
    saved, differing = set(), []
    by_param: dict[str, list[Fingerprint]] = {}
    for fingerprint in prints:
        by_param.setdefault(fingerprint.param, []).append(fingerprint)
    carried = 0
    for name, tensor in read_weights(folder, files):
        saved.add(name)
        if name not in state or not torch.equal(tensor, state[name].to("cpu")):
            differing.append(name)
        flat = tensor.flatten()
        carried += sum(entries_match(flat[p.index], p) for p in by_param.get(name, []))
    stored = {_storage(t) for n, t in state.items() if n in saved}
    missing = [n for n in state if n not in saved and _storage(state[n]) not in stored]  # tied aliases are fine
    read_back = Message("export.check.read_back", f"{len(saved)} tensors read back from {len(files)} file(s)",
                        {"tensors": len(saved), "files": len(files)})
    faults = [Message(code, f"{word}: {', '.join(names[:5])}", {"names": ", ".join(names[:5])})
              for code, word, names in (("export.check.differ", "differ", differing),
                                        ("export.check.missing", "missing", missing)) if names]
    detail = with_faults(read_back, faults)
    name = f"export files hold the {label} weights"
    checks = [Check(name=name, passed=not differing and not missing, detail=detail.text,
                    name_message=Message(f"export.check.files_hold_{'merged' if label == 'merged' else 'tuned'}",
                                         name),
                    detail_message=detail)]
    if prints:
        overlapping = len(by_param) < len(prints)  # adapters that share a matrix: their updates add up there
        detail = (f"{carried} of {len(prints)} (adapter, matrix) pairs in the files carry base + the sum of the "
                  "adapters' B·A at that adapter's largest-update entries" if overlapping else
                  f"{carried} of {len(prints)} adapted matrices in the files carry base + B·A")
        name = "exported weights differ from the base where the adapter is non-zero"
        checks.append(Check(name=name, passed=carried == len(prints), detail=detail,
                            name_message=Message("export.check.exported_differ", name),
                            detail_message=Message("export.check.carried_" + ("pairs" if overlapping else "matrices"),
                                                   detail, {"carried": carried, "total": len(prints)})))
    checks.append(_check_shard_sizes(folder, files, shard_bytes))
    return checks


def _check_shard_sizes(folder: Path, files: list[str], shard_bytes: int) -> Check:
    # export_size bounds a shard's tensor bytes, as transformers' max_shard_size does (the file adds its header);
    # a shard may hold more only as a single tensor that is itself larger.
    contents = {name: _shard_contents(folder / name) for name in files}
    over = [n for n, (count, data) in contents.items() if data > shard_bytes and (count is None or count > 1)]
    largest = max((data for _, data in contents.values()), default=0)
    sizes_text = f"{len(files)} shard(s), largest {largest / 1e9:.4g} GB, export_size {shard_bytes / 1e9:.4g} GB"
    sizes = Message("export.check.shard_sizes", sizes_text, {
        "shards": len(files), "largest": f"{largest / 1e9:.4g}", "limit": f"{shard_bytes / 1e9:.4g}"})
    detail = with_faults(sizes, [Message("export.check.too_large", f"too large: {', '.join(over)}",
                                         {"names": ", ".join(over)})] if over else [])
    return Check(name="weight shards within export_size", passed=not over, measured=float(largest),
                 tolerance=float(shard_bytes), detail=detail.text,
                 name_message=Message("export.check.shards", "weight shards within export_size"),
                 detail_message=detail)


def _shard_contents(path: Path) -> tuple[int | None, int]:
    """(tensor count, tensor bytes) of a weight file, without its header; (None, the file's size) when its
    header cannot be read (the file's bytes bound its tensors' then; the reload checks fail such a file)."""
    from engine.models.cache import safetensors_header

    if path.name.endswith(".bin"):
        tensors = [tensor for _, tensor in read_weights(path.parent, [path.name])]
        return len(tensors), sum(t.numel() * t.element_size() for t in tensors)
    header = safetensors_header(path)
    if header is None:
        return None, path.stat().st_size
    spans = [entry["data_offsets"] for key, entry in header.items() if key != "__metadata__"]
    return len(spans), sum(end - start for start, end in spans)


def _storage(tensor: torch.Tensor) -> tuple:
    return (tensor.device.type, tensor.untyped_storage().data_ptr())


def write_json_atomic(path: Path, data) -> None:
    """Temp file in the same folder, then os.replace: readers see the old file or the new one, never half."""
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
