"""The export config: LLaMA-Factory's merge/export YAML keys (examples/merge_lora/*.yaml), typed.

Declared here with the training and inference configs, so the one loader (engine.config.loader) knows all three;
engine.export loads, checks and runs it. Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config.fields import opt
from engine.config.model_source import ModelSource

EXPORT_DEVICES: tuple[str, ...] = ("cpu", "auto")
EXPORT_FORMATS: tuple[str, ...] = ("safetensors", "gguf")
# GGUF storage types written (engine.export.gguf.QUANTIZATIONS; repeated here so the config needs no torch).
GGUF_QUANTIZATIONS: tuple[str, ...] = ("f32", "f16", "q8_0")


@dataclass
class ExportConfig(ModelSource):
    """What to export (``ModelSource``) and where. Unknown keys are errors."""

    export_dir: str | None = opt(None, "Folder the exported model is written to (new or empty).", section="export")
    export_size: float = opt(5, "Largest weight shard, in GB; a single tensor bigger than this gets its own shard.",
                             section="export", gt=0, le=10**4)
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
        section="export", ge=1, le=16)
    export_hub_model_id: str | None = opt(
        None, "Not supported: upload the export folder with `hf upload`.", section="export")

    def gguf_quantization(self) -> str | None:
        """The GGUF storage type to write, or None when no GGUF is wanted."""
        return (self.export_quantization or "q8_0") if self.export_format == "gguf" else None
