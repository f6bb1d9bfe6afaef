"""The export config: LLaMA-Factory's merge/export YAML keys (examples/merge_lora/*.yaml), typed. No torch here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.loader import build_dataclass, parse_overrides, read_yaml
from engine.config.train import opt
from engine.errors import ConfigError
from engine.inference.config import ADAPTER_METHODS, INFER_DTYPES

EXPORT_DEVICES: tuple[str, ...] = ("cpu", "auto")
EXPORT_FORMATS: tuple[str, ...] = ("safetensors", "gguf")
# GGUF storage types written (engine.export.gguf.QUANTIZATIONS; repeated here so the config needs no torch).
GGUF_QUANTIZATIONS: tuple[str, ...] = ("f32", "f16", "q8_0")
BYTES_PER_GB = 10**9  # the unit transformers and the hub use for shard sizes ("5GB")


@dataclass
class ExportConfig:
    """What to export and where. Unknown keys are errors."""

    model_name_or_path: str | None = opt(
        None, "The base model (LoRA/QLoRA) or the fine-tuned model folder (full/freeze).", section="model")
    adapter_name_or_path: str | None = opt(
        None, "LoRA adapter folder(s) to merge, comma-separated, in order. Never set for a full fine-tune.",
        section="model")
    template: str | None = opt(
        None, "Chat template written into the export; must be training's. Empty: the one training recorded.",
        section="model")
    finetuning_type: str | None = opt(
        None, "How the model was trained; read from the run when empty.", choices=("lora", "qlora", "full", "freeze"),
        section="model")
    trust_remote_code: bool = opt(
        False, "Run Python code shipped inside the model folder. Only with your explicit consent.", section="model")
    quantization_bit: int | None = opt(
        None, "Must stay empty: adapters are merged into the full-precision base, never a quantized one.",
        section="model")
    infer_dtype: str = opt(
        "auto", "dtype of the exported weights; auto keeps the base checkpoint's dtype.", choices=INFER_DTYPES,
        section="model")
    export_dir: str | None = opt(None, "Folder the exported model is written to (new or empty).", section="export")
    export_size: float = opt(5, "Largest weight shard, in GB; a single tensor bigger than this gets its own shard.",
                             section="export")
    export_device: str = opt(
        "cpu", "Where merging runs: auto (the selected GPU) or cpu (works everywhere, slower).",
        choices=EXPORT_DEVICES, section="export")
    export_legacy_format: bool = opt(
        False, "Write PyTorch .bin shards instead of safetensors (only for tools that need them).", section="export")
    export_format: str = opt(
        "safetensors", "safetensors: the model folder. gguf: the folder plus one .gguf file of it for llama.cpp and "
        "Ollama (llama, mistral, qwen2, qwen3 models), loaded back and compared before the export counts.",
        choices=EXPORT_FORMATS, section="export")
    export_quantization: str | None = opt(
        None, "How the GGUF stores weights: f32, f16, or q8_0 (8-bit, half of f16's size, nearly lossless). Empty "
        "means q8_0. Only with export_format: gguf.", choices=GGUF_QUANTIZATIONS, section="export")
    export_quantization_bit: int | None = opt(
        None, "Not supported: export in full precision, then quantize with the runtime's own tool.",
        section="export")
    export_hub_model_id: str | None = opt(
        None, "Not supported: upload the export folder with `hf upload`.", section="export")

    def gguf_quantization(self) -> str | None:
        """The GGUF storage type to write, or None when no GGUF is wanted."""
        return (self.export_quantization or "q8_0") if self.export_format == "gguf" else None

    def adapters(self) -> list[str]:
        if not self.adapter_name_or_path:
            return []
        return [part.strip() for part in str(self.adapter_name_or_path).split(",") if part.strip()]


ACCEPTED_FOREIGN_EXPORT_KEYS = {
    "stage", "do_train", "flash_attn", "use_fast_tokenizer", "cache_dir", "model_revision", "hf_hub_token",
    "ms_hub_token", "low_cpu_mem_usage", "infer_backend", "export_quantization_dataset",
    "export_quantization_nsamples", "export_quantization_maxlen", "enable_thinking", "default_system",
    "quantization_method", "print_param_status", "use_unsloth", "enable_liger_kernel",
}


def load_export_config(source: str | Path | dict[str, Any], *overrides: str, **kw_overrides: Any) -> ExportConfig:
    """An ExportConfig from a YAML path or dict with ``key=value`` overrides; every problem raised at once."""
    data = dict(source) if isinstance(source, dict) else read_yaml(source)
    data.update(parse_overrides(list(overrides)))
    data.update(kw_overrides)
    label = "config" if isinstance(source, dict) else str(source)
    config, _ignored = build_dataclass(ExportConfig, data, accepted_foreign=ACCEPTED_FOREIGN_EXPORT_KEYS,
                                       source=label)
    problems = check_export_config(config)
    if problems:
        raise ConfigError(f"{label} has problems:\n- " + "\n- ".join(problems))
    return config


def check_export_config(config: ExportConfig) -> list[str]:
    """Every problem of an export config, as sentences that say what to change."""
    problems = []
    if not config.model_name_or_path:
        problems.append("model_name_or_path is empty: the base model (LoRA) or the fine-tuned folder (full).")
    if not config.export_dir:
        problems.append("export_dir is empty: name the folder the exported model goes to (e.g. models/<name>-merged).")
    if config.quantization_bit is not None:
        problems.append(
            f"quantization_bit: {config.quantization_bit} would merge the adapter into a quantized base, which gives a "
            "broken model. Remove quantization_bit: the adapter (QLoRA too) is merged into the full-precision base; "
            "quantize the export afterwards if needed.")
    if config.export_quantization_bit is not None:
        problems.append("export_quantization_bit is not supported: export in full precision, then quantize with your "
                        "runtime's tool (llama.cpp, AutoGPTQ, ...). Remove the key.")
    if config.export_hub_model_id:
        upload = f"hf upload {config.export_hub_model_id} {config.export_dir or 'EXPORT_DIR'}"
        problems.append(f"export_hub_model_id is not supported: after exporting, upload with `{upload}`. "
                        "Remove the key.")
    if config.export_format not in EXPORT_FORMATS:
        problems.append(f"export_format must be safetensors or gguf (got {config.export_format!r}).")
    if config.export_quantization is not None and config.export_quantization not in GGUF_QUANTIZATIONS:
        problems.append(f"export_quantization must be one of {', '.join(GGUF_QUANTIZATIONS)} "
                        f"(got {config.export_quantization!r}).")
    if config.export_quantization is not None and config.export_format != "gguf":
        problems.append("export_quantization applies to GGUF files only: add export_format: gguf, or remove it.")
    if config.export_size <= 0:
        problems.append(f"export_size must be a positive number of GB per shard (got {config.export_size}).")
    if config.export_device not in EXPORT_DEVICES:
        problems.append(f"export_device must be cpu or auto (got {config.export_device!r}).")
    if config.infer_dtype not in INFER_DTYPES:
        problems.append(f"infer_dtype must be one of {', '.join(INFER_DTYPES)} (got {config.infer_dtype!r}).")
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
    if method in ADAPTER_METHODS:
        config: dict[str, Any] = {"model_name_or_path": str(base_model), "adapter_name_or_path": str(output_dir)}
    elif method in ("full", "freeze"):
        config = {"model_name_or_path": str(output_dir)}
    else:
        raise ConfigError(f"Unknown fine-tuning method {method!r}; use one of lora, qlora, full, freeze.")
    if template:
        config["template"] = template
    config.update({"trust_remote_code": trust_remote_code, "export_dir": str(export_dir), "export_size": export_size,
                   "export_device": export_device, "export_legacy_format": False})
    return config
