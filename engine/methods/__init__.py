"""Fine-tuning methods: one table that everything asks (training, inference, export, the wizard).

Each method has a folder of the same shape: ``prepare(model, config) -> model`` (sets what trains),
``save(model, out_dir)`` (writes what the method produces) and ``load_for_resume(model, checkpoint)``; optional
``begin``/``end`` hooks run on the main process before the first step and after the final save.
The table says what kind of result a method produces: an adapter on a frozen base (lora, qlora) or a whole
model (full, freeze). Importing this module does not import torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from engine.errors import ConfigError


@dataclass(frozen=True)
class Method:
    name: str
    adapter: bool
    """The result is an adapter for a base model (merge it to get a model); otherwise a whole model folder."""
    quantized_base: bool
    """The base is loaded in 4/8 bits (bitsandbytes, CUDA only)."""
    summary: str

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(f"engine.methods.{self.name}")

    @property
    def output_kind(self) -> str:
        return "adapter" if self.adapter else "model"

    @property
    def weights_file(self) -> str:
        """The file a saved result or checkpoint holds its trained weights in (the first shard's name)."""
        return "adapter_model.safetensors" if self.adapter else "model.safetensors"

    def prepare(self, model, config):
        return self.module.prepare(model, config)

    def save(self, model, out_dir: Path) -> None:
        self.module.save(model, out_dir)

    def load_for_resume(self, model, checkpoint: Path) -> None:
        self.module.load_for_resume(model, checkpoint)

    def begin(self, model, config, output_dir: Path, *, resumed: bool) -> str | None:
        """Before the first step (main process): what the method writes beside the run, as a note, or None."""
        hook = getattr(self.module, "begin", None)
        return hook(model, config, output_dir, resumed=resumed) if hook else None

    def end(self, model, config, output_dir: Path) -> str | None:
        """After the final save (main process): what the method changed in output_dir, as a note, or None."""
        hook = getattr(self.module, "end", None)
        return hook(model, config, output_dir) if hook else None


METHODS: dict[str, Method] = {
    "lora": Method("lora", adapter=True, quantized_base=False,
                   summary="low-rank adapters on the linear layers; only they train and only they are saved"),
    "qlora": Method("qlora", adapter=True, quantized_base=True,
                    summary="LoRA on a 4/8-bit base (bitsandbytes, CUDA only)"),
    "full": Method("full", adapter=False, quantized_base=False,
                   summary="every weight trains; the result is a whole model"),
    "freeze": Method("freeze", adapter=False, quantized_base=False,
                     summary="only the last N decoder layers train; the result is a whole model"),
}
ADAPTER_METHODS: tuple[str, ...] = tuple(name for name, method in METHODS.items() if method.adapter)


def get_method(name: str) -> Method:
    """The method for ``lora | qlora | full | freeze``."""
    if name not in METHODS:
        raise ConfigError(f"Unknown fine-tuning method {name!r}. Valid: {', '.join(METHODS)}.")
    return METHODS[name]


def is_adapter(name: str | None) -> bool:
    """Whether a method (a finetuning_type or a config's ``method``) produces an adapter."""
    return bool(name) and name in METHODS and METHODS[name].adapter


def count_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total
