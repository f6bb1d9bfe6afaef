"""The export config: LLaMA-Factory's merge/export YAML keys (examples/merge_lora/*.yaml), typed.

Declared here with the training and inference configs, so the one loader (engine.config.loader) knows all three;
engine.export loads, checks and runs it. Importing this module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config.fields import opt
from engine.config.model_source import ModelSource

EXPORT_DEVICES: tuple[str, ...] = ("cpu", "auto")


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
    export_quantization_bit: int | None = opt(
        None, "Not supported: export in full precision, then quantize with the runtime's own tool.",
        section="export", ge=1, le=16)
    export_hub_model_id: str | None = opt(
        None, "Not supported: upload the export folder with `hf upload`.", section="export")
