"""Export, top to bottom: plan, load, merge (LoRA/QLoRA) or re-save (full/freeze), write, verify, record.

The export is written into a new folder of its own beside export_dir and swapped into place only after every check
passed (engine.export.swap: files a user added to an earlier export are kept, nothing else is deleted), so a failed
export never leaves a folder that looks finished. ``<export_dir>/lfa_export.json`` records what was merged, the
template, the shards, each check with its tolerance, and the files the export wrote.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.errors import ConfigError, EngineError
from engine.export.config import BYTES_PER_GB, ExportConfig, check_export_config
from engine.export.merge import Check, merge_adapters
from engine.export.modelfile import write_modelfile
from engine.export.swap import check_target, discard, install, make_staging
from engine.export.writer import save_tokenizer, save_weights, verify_export, write_json_atomic
from engine.inference.source import (EXPORT_INFO_FILE, ModelPlan, checkpoint_is_quantized,
                                     load_tokenizer_and_template, pick_device, plan_model)
from engine.jsonio import read_json_dict as _read_json
from engine.messages import Message

EXPORT_RECORD = EXPORT_INFO_FILE
STEPS = ("checking the config", "loading the tokenizer and template", "loading the model", "merging",
         "writing the weights", "verifying the written files", "writing the tokenizer and Modelfile")
GGUF_STEP = "writing the GGUF file and comparing it with the export"  # an eighth step with export_format: gguf
MERGE_FAILED = Message("export.merge_failed", "The merge did not check out, so nothing was exported")
WRITTEN_FAILED = Message("export.written_failed", "The written export did not check out, so it was removed")
GGUF_FAILED = Message("export.gguf_failed", "The GGUF file did not check out, so nothing was exported")
PROBE_PROMPTS = ("Hello! Who are you?", "Explain in one sentence what a Python list is.", "Name three colours.")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class ExportResult:
    export_dir: Path
    operation: str
    """merge (LoRA/QLoRA adapters merged into the base) or re-save (a full/freeze model written anew)."""
    template: str
    files: list[str]
    checks: list[Check]
    notes: list[str] = field(default_factory=list)
    note_messages: list[Message] = field(default_factory=list)
    """The notes as engine.messages.Message, as lfa_export.json records them (the swap's own notes, which come
    after the record is written, are in ``notes`` only)."""
    gguf: str | None = None
    """The GGUF file in export_dir (export_format: gguf), which the Modelfile points at."""


def export_model(config: ExportConfig, on_progress: Callable[[int, int, str], None] | None = None) -> ExportResult:
    """Export as the config says; raises EngineError (nothing left at export_dir) when anything is refused."""
    steps = (*STEPS, GGUF_STEP) if config.gguf_quantization() else STEPS

    def progress(step: int, text: str | None = None) -> None:
        if on_progress:
            on_progress(step, len(steps), text or steps[step - 1])

    progress(1)
    plan, target, source = _plan(config)
    device, device_note = pick_device(config.export_device)
    notes = [n for n in (device_note, *plan.note_messages) if n]
    progress(2)
    tokenizer, template = load_tokenizer_and_template(plan, trust_remote_code=config.trust_remote_code,
                                                      config=config)
    padding_side = _saved_padding_side(plan.tokenizer_source)
    progress(3, f"loading {plan.base_model} on {device}")
    from engine.models.loading import load_model

    # Merging runs in the checkpoint's dtype on a GPU and in float32 on a CPU (16-bit math there is slow).
    model = load_model(plan.base_model, dtype="auto", device=device, trust_remote_code=config.trust_remote_code)
    save_dtype = _save_dtype(config.infer_dtype, source, model)
    checks: list[Check] = []
    prints = []
    if plan.adapters:
        progress(4, f"merging {len(plan.adapters)} adapter(s) into the full-precision base")
        probe = _probe_batch(tokenizer, template, device)
        model, checks, prints, merge_notes = merge_adapters(model, plan.adapters, probe, base_model=plan.base_model,
                                                            progress=lambda text: progress(4, text))
        notes += merge_notes
    else:
        progress(4, f"nothing to merge: {plan.method} output is re-saved as it is")
    _raise_on_failures(checks, MERGE_FAILED)
    staging = make_staging(target)
    try:
        result = _write(config, plan, model, tokenizer, template, staging, target, save_dtype, prints, checks, notes,
                        padding_side, progress)
    except BaseException:
        discard(staging)
        raise
    result.notes += install(staging, target)  # discards the staging folder itself when it refuses
    return result


def _plan(config: ExportConfig) -> tuple[ModelPlan, Path, str]:
    """(plan, export folder, local folder or hub id of the base), after every refusal that needs no weights."""
    problems = check_export_config(config)
    if problems:
        raise ConfigError("The export config has problems:\n- " + "\n- ".join(problems))
    plan = plan_model(config.model_name_or_path, config.adapters(), config.template,
                      finetuning_type=config.finetuning_type)
    from engine.models.loading import resolve_model_source

    # A hub id resolves to its cached snapshot, so its config.json can be read before any weights load.
    source = resolve_model_source(plan.base_model, trust_remote_code=config.trust_remote_code)
    quantized = checkpoint_is_quantized(source)
    if quantized:
        raise ConfigError(
            f"{plan.base_model} is a quantized checkpoint ({quantized}); merging an adapter into quantized weights "
            "gives a broken model. Point model_name_or_path at the full-precision (16/32-bit) version of the same "
            "model; the adapter, QLoRA ones included, merges into that.")
    if config.gguf_quantization():
        from engine.export.gguf import gguf_support_problem

        problem = gguf_support_problem(_read_json(Path(source).expanduser() / "config.json"))
        if problem:
            raise ConfigError(problem)
    from engine.config.paths import output_overlap_problems

    target = Path(config.export_dir).expanduser().resolve()
    # The plan's inputs, which may have been resolved from the training run rather than named in the config.
    inputs = [("model_name_or_path", plan.base_model)] + [("adapter_name_or_path", a) for a in plan.adapters]
    overlaps = output_overlap_problems("export_dir", target, inputs)
    if overlaps:
        raise ConfigError("\n".join(overlaps))
    check_target(target)
    return plan, target, source


def _write(config, plan, model, tokenizer, template, staging: Path, target: Path, save_dtype, prints, checks,
           notes, padding_side, progress) -> ExportResult:
    shard_bytes = max(1, int(config.export_size * BYTES_PER_GB))
    dtype_name = str(save_dtype).removeprefix("torch.")
    progress(5, f"writing {dtype_name} weights in shards of at most {config.export_size} GB")
    files, size_notes = save_weights(model, staging, shard_bytes=shard_bytes, dtype=save_dtype,
                                     legacy=config.export_legacy_format, stop_ids=template.stop_token_ids(tokenizer),
                                     pad_id=tokenizer.pad_token_id)
    notes += size_notes
    progress(6)
    label = "merged" if plan.adapters else "fine-tuned"
    checks = checks + verify_export(staging, files, model, prints, shard_bytes, label)
    _raise_on_failures(checks, WRITTEN_FAILED)
    progress(7)
    notes += save_tokenizer(tokenizer, template, staging, padding_side)
    gguf_name = None
    if config.gguf_quantization():
        from engine.export.gguf_check import export_gguf

        progress(8)
        gguf_name, gguf_checks = export_gguf(staging, model, tokenizer, template, name=target.name,
                                             quantization=config.gguf_quantization(),
                                             progress=lambda text: progress(8, text))
        checks = checks + gguf_checks
        _raise_on_failures(gguf_checks, GGUF_FAILED)
    modelfile_note = write_modelfile(staging, template, tokenizer, source=f"./{gguf_name}" if gguf_name else ".")
    if modelfile_note:
        notes.append(modelfile_note)
    operation = "merge" if plan.adapters else "re-save"
    result = ExportResult(export_dir=target, operation=operation, template=template.name, files=files,
                          checks=checks, notes=[note.text for note in notes], note_messages=notes, gguf=gguf_name)
    record = {
        "export_dir": str(target), "operation": operation, "method": plan.method, "base_model": plan.base_model,
        "adapters_merged": plan.adapters, "template": template.name, "template_origin": plan.template_origin,
        "dtype": str(save_dtype).removeprefix("torch."), "export_device": config.export_device,
        "export_size_gb": config.export_size, "weight_files": files,
        "index": next((p.name for p in staging.glob("*.index.json")), None),
        "tie_word_embeddings": bool(getattr(model.config, "tie_word_embeddings", False)),
        "checks": [c.as_dict() for c in checks], "notes": result.notes,
        "note_messages": [note.to_dict() for note in notes], "created_at": time.time(),
        "gguf": {"file": gguf_name, "quantization": config.gguf_quantization()} if gguf_name else None,
    }
    write_json_atomic(staging / EXPORT_RECORD, record)
    return result


def _raise_on_failures(checks: list[Check], headline: Message) -> None:
    failed = [Message("export.failed_check", f"{c.name}: {c.detail}", {"name": c.name_message or c.name,
                                                                        "detail": c.detail_message or c.detail})
              for c in checks if not c.passed]
    if failed:
        text = f"{headline.text}:\n- " + "\n- ".join(check.text for check in failed)
        raise EngineError(text, message=Message("export.checks_failed", text, {"headline": headline,
                                                                                "checks": failed}))


def _probe_batch(tokenizer, template, device: str) -> dict:
    """A few chat prompts, left-padded, for comparing logits before and after merging."""
    prompts = [template.encode_prompt(tokenizer, [{"role": "user", "content": text}]) for text in PROBE_PROMPTS]
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}


def _save_dtype(requested: str, source: str, model) -> torch.dtype:
    """auto: the base checkpoint's own dtype as its config.json says (an export is as large as its base; the
    loaded model's config says float32 after a CPU load), else what was asked."""
    if requested != "auto":
        return _DTYPES[requested]
    config = _read_json(Path(source).expanduser() / "config.json")
    name = config.get("dtype") or config.get("torch_dtype") or (config.get("text_config") or {}).get("dtype")
    return _DTYPES.get(str(name), next(model.parameters()).dtype)


def _saved_padding_side(folder: str) -> str:
    side = _read_json(Path(folder).expanduser() / "tokenizer_config.json").get("padding_side")
    return side if side in ("left", "right") else "right"
