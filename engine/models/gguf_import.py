"""`models import FILE.gguf`: turn a GGUF into a model folder (safetensors, tokenizer, chat template) and check it.

Top to bottom: check the file and the output folder before any work (nothing is written when either is wrong);
dequantize with transformers; write the folder into a staging folder beside the target; reload the written folder
and require the same weights and the same greedy tokens as the GGUF-loaded model on a few prompts; record what
was done in `lfa_import.json`; only then rename the staging folder into place. A failure leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import ModelError
from engine.checks import Check
from engine.jsonio import write_text_atomic
from engine.messages import Message
from engine.models.gguf_file import IMPORT_RECORD, GgufInfo, check_importable, read_gguf_info
from engine.models.registry import MODELS, ModelEntry, find_model

STEPS = ("reading the GGUF header", "dequantizing the weights", "writing the weights", "writing the tokenizer",
         "checking the folder against the GGUF")
CHECK_PROMPTS = ("What is the capital of France?", "Who are you?", "Name three colours.")
CHECK_TOKENS = 12
# llama.cpp's quantization suffixes on file names: Model.Q4_K_M.gguf, model-f16.gguf, model.IQ3_XS.gguf
_QUANT_SUFFIX = re.compile(r"[.-](f32|f16|bf16|q\d(_[a-z0-9]+)*|iq\d(_[a-z0-9]+)*)$", re.IGNORECASE)
_DTYPES = ("float32", "bfloat16", "float16")

Progress = Callable[[int, int, str], None]
StepMessages = Callable[[int, int, Message], None]
_STEP_CODES = ("gguf.reading_header", "gguf.dequantizing", "gguf.writing_weights", "gguf.writing_tokenizer",
               "gguf.checking")


@dataclass
class ImportResult:
    folder: Path
    info: GgufInfo
    registry_id: str | None
    template: str | None
    checks: list[Check]
    seconds: float
    notes: list[str] = field(default_factory=list)


def sha256_of(path: Path, chunk: int = 2**22) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def registry_match(path: Path, size: int) -> ModelEntry | None:
    """The registry entry this file belongs to: a pinned package file (same size and sha256), else the entry
    named like the file without its quantization suffix (SmolLM2-135M-Instruct.Q4_1.gguf)."""
    pinned = [e for e in MODELS.values() if e.package is not None and e.package.size_bytes == size]
    if pinned:
        digest = sha256_of(path)
        for entry in pinned:
            if entry.package.sha256 == digest:
                return entry
    entry = find_model(_QUANT_SUFFIX.sub("", path.stem))
    return entry if entry is not None and entry.family != "demo" else None  # demo models are built, not fetched


def default_folder(path: Path, entry: ModelEntry | None, models_dir: Path) -> Path:
    return Path(models_dir) / (entry.name if entry else _QUANT_SUFFIX.sub("", path.stem) or "imported-model")


def check_target(source: Path, target: Path) -> None:
    """ModelError when the output folder would touch the input or anything already there."""
    source, target = source.resolve(), target.resolve()
    if target == source or source in target.parents:
        raise ModelError(f"The output folder {target} is the GGUF file itself or inside it; choose a new folder "
                         "such as models/<name>.")
    if target.is_file():
        raise ModelError(f"{target} is a file; the import writes a folder. Choose a new folder path.")
    if target.is_dir() and any(target.iterdir()):
        raise ModelError(f"{target} already exists and is not empty; nothing was written. Choose a new folder "
                         f"(e.g. {target.parent / (target.name + '-2')}) or remove that one first.")


def _check_space(info: GgufInfo, target: Path, dtype: str) -> None:
    need = info.parameters * (4 if dtype == "float32" else 2)
    parent = next(p for p in (target, *target.parents) if p.exists())
    free = shutil.disk_usage(parent).free
    if need and free < need * 1.1:
        raise ModelError(f"The folder needs about {need / 1e9:.1f} GB ({dtype}), but {parent} has {free / 1e9:.1f} GB "
                         "free. Free some space or import to another disk (-o).")


def import_gguf(path: str | Path, out_dir: str | Path | None = None, *, models_dir: str | Path = "models",
                dtype: str = "float32", on_progress: Progress | None = None,
                on_message: StepMessages | None = None) -> ImportResult:
    """Import a GGUF file into a new model folder; ModelError (nothing written) when anything is wrong.
    ``on_progress`` gets each step's English text, ``on_message`` the same as an engine.messages.Message."""
    start = time.monotonic()

    def report(step: int, total: int, message: Message) -> None:
        if on_progress is not None:
            on_progress(step, total, message.text)
        if on_message is not None:
            on_message(step, total, message)

    return _import(path, out_dir, models_dir, dtype, report, start)


def _step(step: int, suffix: str = "", code: str = "", **fields) -> Message:
    """Step ``step`` (1-based) of STEPS, ``suffix`` added to its English text; ``code`` a variant's own code."""
    return Message(code or _STEP_CODES[step - 1], STEPS[step - 1] + suffix, fields)


@contextmanager
def _quiet_transformers():
    """transformers' own bars (loading, writing shards) would interleave with the caller's progress."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _import(path, out_dir, models_dir, dtype: str, report: StepMessages, start: float) -> ImportResult:
    if dtype not in _DTYPES:
        raise ModelError(f"dtype must be one of {', '.join(_DTYPES)} (got {dtype!r}).")
    source = Path(path).expanduser()
    report(1, len(STEPS), _step(1))
    info = read_gguf_info(source)
    check_importable(info)
    entry = registry_match(source, info.size_bytes)
    target = Path(out_dir).expanduser() if out_dir else default_folder(source, entry, Path(models_dir))
    check_target(source, target)
    _check_space(info, target, dtype)
    target = target.resolve()
    staging = target.with_name(f".{target.name}.import-partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        with _quiet_transformers():
            checks, template = convert_gguf(info, staging, entry=entry, dtype=dtype, on_progress=report)
        failed = [c for c in checks if not c.passed]
        if failed:
            raise ModelError("The written folder does not match the GGUF, so it was removed:\n- "
                             + "\n- ".join(f"{c.name}: {c.detail}" for c in failed))
        result = ImportResult(target, info, entry.id if entry else None, template, checks,
                              time.monotonic() - start)
        write_record(staging, result, dtype)
        for file in staging.iterdir():
            file.chmod(0o644)  # safetensors writes owner-only files; a server running as another user reads them
        if target.is_dir():
            target.rmdir()  # checked empty above
        target.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result


def convert_gguf(info: GgufInfo, folder: Path, *, entry: ModelEntry | None, dtype: str,
                 on_progress: StepMessages) -> tuple[list[Check], str | None]:
    """Write the model folder for `info` into the empty `folder`; returns (checks, chat template name)."""
    import torch

    from engine.models.gguf_file import load_gguf_model, load_gguf_tokenizer

    total = len(STEPS)
    tensors = info.tensor_count
    megabytes = f"{info.size_bytes / 1e6:.0f}"
    on_progress(2, total, _step(2, f": {tensors} tensors ({megabytes} MB)", "gguf.dequantizing_size",
                                tensors=tensors, megabytes=megabytes))
    model = load_gguf_model(info.path, on_tensor=lambda done, n: on_progress(
        2, total, _step(2, f": tensor {done} of {n}", "gguf.dequantizing_tensor", done=done, tensors=n)))
    tokenizer = load_gguf_tokenizer(info.path)
    model.to(getattr(torch, dtype))
    model.config.dtype = dtype
    prompts = _check_prompts(tokenizer)
    stop_ids = [i for i in (tokenizer.eos_token_id,) if i is not None] or [0]
    expected = [_greedy(model, prompt, stop_ids) for prompt in prompts]
    on_progress(3, total, _step(3, f" ({dtype} safetensors)", dtype=dtype))
    model.save_pretrained(str(folder))
    on_progress(4, total, _step(4, " and its chat template", "gguf.writing_tokenizer_template")
                if tokenizer.chat_template else _step(4))
    tokenizer.save_pretrained(str(folder))
    on_progress(5, total, _step(5))
    checks = [_check_weights(model, folder)]
    del model
    checks.append(_check_greedy(folder, prompts, expected, stop_ids, dtype))
    return checks, entry.template if entry else _template_of(folder)


def _check_prompts(tokenizer) -> list[list[int]]:
    if tokenizer.chat_template:
        return [tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                              tokenize=True, return_dict=True)["input_ids"] for text in CHECK_PROMPTS]
    return [tokenizer(text)["input_ids"] for text in CHECK_PROMPTS]


def _greedy(model, prompt: list[int], stop_ids: list[int]) -> list[int]:
    import torch

    inputs = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(input_ids=inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=CHECK_TOKENS,
                             do_sample=False, eos_token_id=stop_ids, pad_token_id=stop_ids[0])
    return out[0, len(prompt):].tolist()


def _check_weights(model, folder: Path) -> Check:
    """Every tensor in the written files equals the GGUF-loaded one (tied weights are stored once)."""
    import torch
    from safetensors import safe_open

    state = model.state_dict()
    differing, read = [], 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                read += 1
                if key not in state or not torch.equal(handle.get_tensor(key), state[key]):
                    differing.append(key)
    return Check(name="folder holds the GGUF's weights", passed=read > 0 and not differing,
                 detail=f"{read} tensors read back" + (f"; differ: {', '.join(differing[:5])}" if differing else ""))


def _check_greedy(folder: Path, prompts: list[list[int]], expected: list[list[int]], stop_ids: list[int],
                  dtype: str) -> Check:
    import torch
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=getattr(torch, dtype))
    got = [_greedy(reloaded, prompt, stop_ids) for prompt in prompts]
    same = sum(a == b for a, b in zip(expected, got))
    return Check(name="folder answers like the GGUF", passed=same == len(prompts),
                 detail=f"{same} of {len(prompts)} greedy answers ({CHECK_TOKENS} tokens) identical to the "
                        "GGUF-loaded model's")


def _template_of(folder: Path) -> str | None:
    from engine.models.resolve import resolve_model

    try:
        return resolve_model(str(folder)).template
    except ModelError:
        return None


def write_record(folder: Path, result: ImportResult, dtype: str) -> None:
    import json

    info = result.info
    record = {
        "source_gguf": str(info.path.resolve()), "source_bytes": info.size_bytes,
        "architecture": info.architecture, "gguf_name": info.name, "tensor_types": info.tensor_types,
        "registry_id": result.registry_id, "template": result.template, "dtype": dtype,
        "checks": [c.as_dict() for c in result.checks], "seconds": round(result.seconds, 1),
        "created_at": time.time(),
    }
    write_text_atomic(folder / IMPORT_RECORD, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
