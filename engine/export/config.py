"""The export config: LLaMA-Factory's merge/export YAML keys (examples/merge_lora/*.yaml), typed. No torch here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.config.export import EXPORT_DEVICES, EXPORT_FORMATS, GGUF_QUANTIZATIONS, ExportConfig  # noqa: F401
from engine.config.fields import field_problems
from engine.config.loader import load_checked
from engine.config.model_source import INFER_DTYPES
from engine.readers import clip
from engine.inference.config import ADAPTER_METHODS, result_model_keys

BYTES_PER_GB = 10**9  # the unit transformers and the hub use for shard sizes ("5GB")
__all__ = ["EXPORT_DEVICES", "ExportConfig", "INFER_DTYPES", "check_export_config", "default_export_dir",
           "load_export_config", "make_export_config"]


def load_export_config(source: str | Path | dict[str, Any], *overrides: str, **kw_overrides: Any) -> ExportConfig:
    """An ExportConfig from a YAML path or dict with ``key=value`` overrides; every problem raised at once."""
    return load_checked("export", check_export_config, source, *overrides, **kw_overrides)


def check_export_config(config: ExportConfig) -> list[str]:
    """Every problem of an export config, as sentences that say what to change."""
    from engine.config.paths import output_overlap_problems

    problems = field_problems(config)
    if not config.model_name_or_path:
        problems.append("model_name_or_path is empty: the base model (LoRA) or the fine-tuned folder (full).")
    if not config.export_dir:
        problems.append("export_dir is empty: name the folder the exported model goes to (e.g. models/<name>-merged).")
    else:
        sources = [("model_name_or_path", config.model_name_or_path)]
        sources += [("adapter_name_or_path", adapter) for adapter in config.adapters()]
        problems += output_overlap_problems("export_dir", config.export_dir, sources)
    if config.quantization_bit is not None:
        problems.append(
            f"quantization_bit: {config.quantization_bit} would merge the adapter into a quantized base, which gives a "
            "broken model. Remove quantization_bit: the adapter (QLoRA too) is merged into the full-precision base; "
            "quantize the export afterwards if needed.")
    if config.export_quantization_bit is not None:
        problems.append("export_quantization_bit is not supported: export in full precision, then quantize with your "
                        "runtime's tool (llama.cpp, AutoGPTQ, ...). Remove the key.")
    if config.export_hub_model_id:
        upload = f"hf upload {clip(config.export_hub_model_id, 80)} {clip(config.export_dir or 'EXPORT_DIR', 200)}"
        problems.append(f"export_hub_model_id is not supported: after exporting, upload with `{upload}`. "
                        "Remove the key.")
    if config.export_quantization is not None and config.export_format != "gguf":
        problems.append("export_quantization applies to GGUF files only: add export_format: gguf, or remove it.")
    if config.finetuning_type in ("full", "freeze") and config.adapters():
        problems.append(f"finetuning_type is {config.finetuning_type}: its output is a whole model with nothing to "
                        "merge. Remove adapter_name_or_path and set model_name_or_path to the training output_dir.")
    return problems


def default_export_dir(base_model: str, method: str) -> str:
    """models/<base>-merged for LoRA/QLoRA (an adapter was merged); models/<base>-sft for full/freeze (nothing was)."""
    name = Path(str(base_model).rstrip("/")).name or "model"
    return str(Path("models") / f"{name}-{'merged' if method in ADAPTER_METHODS else 'sft'}")


def make_export_config(output_dir: str | Path, *, base_model: str, method: str, template: str | None,
                       export_dir: str | Path, export_device: str = "auto", trust_remote_code: bool = False,
                       export_size: float = 5) -> dict[str, Any]:
    """The LLaMA-Factory-shaped export dict: LoRA/QLoRA merge base + adapter; full/freeze re-save output_dir."""
    config = result_model_keys(output_dir, base_model=base_model, method=method, template=template)
    config.update({"trust_remote_code": trust_remote_code, "export_dir": str(export_dir), "export_size": export_size,
                   "export_device": export_device, "export_legacy_format": False})
    return config
