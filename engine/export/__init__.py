"""Export: merge LoRA/QLoRA adapters into the base (or re-save a full fine-tune) as a standalone model folder.

    python -m engine.export EXPORT.yaml [key=value ...]

Importing this package does not import torch; the work is in ``engine.export.run.export_model``.
"""

from engine.export.config import (ExportConfig, check_export_config, default_export_dir, load_export_config,
                                  make_export_config)

__all__ = ["ExportConfig", "check_export_config", "default_export_dir", "load_export_config", "make_export_config"]
