"""Pieces every recipe needs before its loop: model path, device and precision, template, output files."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.config import TrainConfig
from engine.devices import cpu_bf16_units
from engine.models.resolve import resolve_model_path, resolve_template  # noqa: F401 - the recipes' names


TRAINING_INFO_FILE = "lfa_training.json"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Precision:
    device: torch.device
    autocast_dtype: torch.dtype | None  # None: plain fp32
    note: str | None  # why the precision differs from what the config asked

    @property
    def load_dtype(self) -> str:
        """The dtype the base loads in: fp32 for fp32 training; under autocast the checkpoint's own on a GPU, and
        bf16 on a CPU (its frozen weights then feed the bf16 units without a cast at every product)."""
        if self.autocast_dtype is None:
            return "float32"
        return "bfloat16" if self.device.type == "cpu" else "auto"


def choose_precision(config: TrainConfig) -> Precision:
    """The device and the autocast dtype a run trains at, and a sentence when they differ from what was asked.

    GPU: bf16 or fp16 autocast as asked (fp16 on a GPU without bf16, before Ampere). CPU: bf16 autocast when
    the CPU has bf16 matrix units (AMX-BF16, AVX512-BF16: several times the fp32 rate of its products), else
    fp32, because emulated bf16 and fp16 train 10-20x slower than fp32 there."""
    kind = "bf16" if config.bf16 else "fp16" if config.fp16 else None
    if torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
        if config.bf16 and not torch.cuda.is_bf16_supported():
            return Precision(device, torch.float16, "bf16 was requested but this GPU has no bf16 support (before "
                                                    "Ampere): training in fp16 instead.")
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(kind or "")
        return Precision(device, dtype, None)
    device = torch.device("cpu")
    if kind == "bf16" and cpu_bf16_units():
        return Precision(device, torch.bfloat16, None)
    note = None
    if kind:
        units = "has no bf16 units (AMX-BF16 or AVX512-BF16)" if kind == "bf16" else "has no fp16 training path"
        note = (f"{kind} was requested but this machine has no GPU and its CPU {units}: training in fp32 instead "
                f"({kind} there trains 10-20x slower).")
    return Precision(device, None, note)


def save_tokenizer_with_template(tokenizer, template, out_dir: Path) -> None:
    """Save the tokenizer with the training template as its chat template, so any runtime renders prompts alike."""
    if hasattr(template, "fix_tokenizer"):
        template.fix_tokenizer(tokenizer)  # end-of-turn as eos, a pad token, the template as chat_template
    elif getattr(template, "jinja", None):
        tokenizer.chat_template = template.jinja
    tokenizer.save_pretrained(str(out_dir))


def write_training_info(out_dir: Path, *, base_model: str, method: str, template_name: str, stage: str,
                        run_id: str | None, continued_adapter: str | None = None) -> None:
    """Record what produced this folder; inference and export read the template from here, and the adapter this
    one continued (it holds that adapter's weights and more, so the two are never applied together)."""
    from engine.rundir import write_json_atomic

    info = {"base_model": base_model, "finetuning_type": method, "template": template_name, "stage": stage,
            "run_id": run_id}
    if continued_adapter:
        info["continued_adapter"] = str(Path(continued_adapter).expanduser().resolve())
    write_json_atomic(Path(out_dir) / TRAINING_INFO_FILE, info)


def write_run_outputs(output_dir: Path, *, tokenizer, template, config: TrainConfig, model_path: str, run,
                      stage: str) -> list[dict]:
    """Beside the saved weights: the tokenizer with the template, what produced the folder, the loss plot.
    Returns the run's metrics rows (for the recipe's closing summary)."""
    from engine.training.plot import plot_loss

    save_tokenizer_with_template(tokenizer, template, output_dir)
    from engine.readers import comma_names

    adapters = comma_names(config.adapter_name_or_path) if config.method in ("lora", "qlora") else []
    continued = adapters[-1] if adapters and not config.create_new_adapter else None  # see engine.methods.lora
    write_training_info(output_dir, base_model=model_path, method=config.method, template_name=template.name,
                        stage=stage, run_id=run.run_id, continued_adapter=continued)
    metrics = run.read_metrics()
    plot_path = plot_loss(metrics, Path(output_dir) / "training_loss.png") if config.plot_loss else None
    if plot_path:
        run.update_status(loss_plot=str(plot_path))
    return metrics
