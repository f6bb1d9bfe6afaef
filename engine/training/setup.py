"""Pieces every recipe needs before its loop: model path, device and precision, template, output files."""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.config import TrainConfig

log = logging.getLogger("engine")

TRAINING_INFO_FILE = "lfa_training.json"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_model_path(config: TrainConfig) -> str:
    """The model to load: the config's, or the built-in demo model (built on first use)."""
    if config.model_name_or_path:
        return config.model_name_or_path
    from engine.models.demo import build_demo_model

    return str(build_demo_model())


@dataclass
class Precision:
    device: torch.device
    autocast_dtype: torch.dtype | None  # None: plain fp32
    note: str | None  # why the precision differs from what the config asked


def choose_precision(config: TrainConfig) -> Precision:
    """fp32 on CPU (bf16 there trains 10-20x slower on CPUs without bf16 units); autocast on GPU as asked."""
    if torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
        if config.bf16:
            return Precision(device, torch.bfloat16, None)
        if config.fp16:
            return Precision(device, torch.float16, None)
        return Precision(device, None, None)
    note = None
    if config.bf16 or config.fp16:
        kind = "bf16" if config.bf16 else "fp16"
        note = (f"{kind} was requested but this machine has no GPU: training in fp32 instead "
                f"({kind} on this CPU trains 10-20x slower).")
    return Precision(torch.device("cpu"), None, note)


def resolve_template(config: TrainConfig, model_path: str, tokenizer):
    """The chat template by name, else the model's family default, else the tokenizer's own chat_template; with the
    config's template settings (default_system, enable_thinking, tool_format, ...)."""
    from engine.data.templates import get_template, template_settings

    settings = template_settings(config)
    if config.template and config.template != "auto":
        return get_template(config.template, tokenizer, **settings)
    try:
        from engine.models.resolve import resolve_model

        name = resolve_model(model_path).template
        if name:
            return get_template(name, tokenizer, **settings)
    except Exception as exc:  # noqa: BLE001 - fall back to the tokenizer's own template, and say why
        log.info("template not resolved from the model registry (%s); using the tokenizer's chat template", exc)
    return get_template(None, tokenizer, **settings)


def save_tokenizer_with_template(tokenizer, template, out_dir: Path) -> None:
    """Save the tokenizer with the training template as its chat template, so any runtime renders prompts alike."""
    if hasattr(template, "fix_tokenizer"):
        template.fix_tokenizer(tokenizer)  # end-of-turn as eos, a pad token, the template as chat_template
    elif getattr(template, "jinja", None):
        tokenizer.chat_template = template.jinja
    tokenizer.save_pretrained(str(out_dir))


def write_training_info(out_dir: Path, *, base_model: str, method: str, template_name: str, stage: str,
                        run_id: str | None) -> None:
    """Record what produced this folder; inference and export read the template from here."""
    info = {"base_model": base_model, "finetuning_type": method, "template": template_name, "stage": stage,
            "run_id": run_id}
    (Path(out_dir) / TRAINING_INFO_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")


def write_run_outputs(output_dir: Path, *, tokenizer, template, config: TrainConfig, model_path: str, run,
                      stage: str) -> list[dict]:
    """Beside the saved weights: the tokenizer with the template, what produced the folder, the loss plot.
    Returns the run's metrics rows (for the recipe's closing summary)."""
    from engine.training.plot import plot_loss

    save_tokenizer_with_template(tokenizer, template, output_dir)
    write_training_info(output_dir, base_model=model_path, method=config.method, template_name=template.name,
                        stage=stage, run_id=run.run_id)
    metrics = run.read_metrics()
    plot_path = plot_loss(metrics, Path(output_dir) / "training_loss.png") if config.plot_loss else None
    if plot_path:
        run.update_status(loss_plot=str(plot_path))
    return metrics
