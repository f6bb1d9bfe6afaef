"""Every problem in a training config, listed before anything heavy loads."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

from engine.config.train import TrainConfig
from engine.errors import EngineError


def _choices_problems(config: TrainConfig) -> list[str]:
    problems = []
    for f in dataclasses.fields(config):
        choices = f.metadata.get("choices")
        value = getattr(config, f.name)
        if choices and value is not None and value not in choices:
            problems.append(f"{f.name}: {value!r} is not one of {', '.join(map(str, choices))}.")
    return problems


def _number_problems(c: TrainConfig) -> list[str]:
    problems = []
    positive = ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                "cutoff_len", "logging_steps", "save_steps", "lora_rank")
    for name in positive:
        if getattr(c, name) <= 0:
            problems.append(f"{name} must be a positive integer, got {getattr(c, name)}.")
    if not c.learning_rate > 0:
        problems.append(f"learning_rate must be > 0, got {c.learning_rate}.")
    if c.max_steps <= 0 and not c.num_train_epochs > 0:
        problems.append("Set max_steps > 0 or num_train_epochs > 0: otherwise nothing would be trained.")
    if not 0 <= c.warmup_ratio < 1:
        problems.append(f"warmup_ratio must be in [0, 1), got {c.warmup_ratio}.")
    if c.max_grad_norm < 0:
        problems.append("max_grad_norm must be >= 0 (0 disables clipping).")
    if c.val_size < 0:
        problems.append("val_size must be >= 0 (a share below 1, or a row count).")
    if c.max_samples is not None and c.max_samples <= 0:
        problems.append("max_samples must be a positive integer (or empty for all rows).")
    if c.save_total_limit is not None and c.save_total_limit <= 0:
        problems.append("save_total_limit must be >= 1 (or empty to keep every checkpoint).")
    if not 0 <= c.lora_dropout < 1:
        problems.append("lora_dropout must be in [0, 1).")
    if c.cp_size < 1:
        problems.append("cp_size must be >= 1.")
    if not 0 <= c.dpo_label_smoothing <= 0.5:
        problems.append("dpo_label_smoothing must be in [0, 0.5].")
    return problems


def _method_problems(c: TrainConfig) -> list[str]:
    problems = []
    if not c.do_train:
        problems.append("do_train is false: this command trains; use `lf-assistant chat` or `export` otherwise.")
    if c.bf16 and c.fp16:
        problems.append("bf16 and fp16 are both true: pick one.")
    if c.quantization_bit and c.finetuning_type not in ("lora", "qlora"):
        problems.append(f"quantization_bit only works with LoRA (QLoRA); finetuning_type is {c.finetuning_type}. "
                        "Remove quantization_bit or use finetuning_type: lora.")
    if c.finetuning_type == "qlora" and not c.quantization_bit:
        problems.append("finetuning_type: qlora needs quantization_bit: 4 (or 8).")
    if c.adapter_name_or_path and c.finetuning_type not in ("lora", "qlora"):
        problems.append("adapter_name_or_path continues a LoRA adapter; it does not fit finetuning_type "
                        f"{c.finetuning_type}.")
    if c.deepspeed:
        path = Path(c.deepspeed)
        if not path.is_absolute() and not path.exists():
            path = c.base_dir() / path
        if not path.is_file():
            problems.append(f"deepspeed: config file {c.deepspeed} not found (looked in the working dir and "
                            f"{c.base_dir()}).")
        else:
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                problems.append(f"deepspeed: {path} is not valid JSON ({exc}).")
        if importlib.util.find_spec("deepspeed") is None:
            problems.append("deepspeed is set but the deepspeed package is not installed: "
                            "`pip install 'lf-assistant[deepspeed]'` (needs a GPU), or remove the deepspeed key.")
    return problems


def _data_problems(c: TrainConfig) -> list[str]:
    if not c.dataset:
        return ["dataset is empty: name one or more datasets from dataset_info.json (for example identity)."]
    from engine.data.registry import dataset_file_path, find_dataset_dir, get_dataset_spec

    problems = []
    try:
        dataset_dir = find_dataset_dir(c.dataset_dir, config_dir=Path(c.config_dir) if c.config_dir else None)
    except EngineError as exc:
        return [str(exc)]
    names = [n.strip() for n in c.dataset.split(",") if n.strip()]
    if c.eval_dataset:
        names += [n.strip() for n in c.eval_dataset.split(",") if n.strip()]
    for name in names:
        try:
            spec = get_dataset_spec(name, dataset_dir)
        except EngineError as exc:
            problems.append(str(exc))
            continue
        if spec.file_name:
            try:
                dataset_file_path(spec, dataset_dir)
            except EngineError as exc:
                problems.append(str(exc))
        wants_ranking = c.stage == "dpo"
        if bool(spec.ranking) != wants_ranking:
            need = "preference (ranking: true)" if wants_ranking else "supervised (not ranking)"
            problems.append(f"dataset {name!r} is {'a preference' if spec.ranking else 'a supervised'} dataset, "
                            f"but stage {c.stage} needs {need} data.")
    return problems


def _template_problems(c: TrainConfig) -> list[str]:
    from engine.data.templates import template_problems, template_settings

    return template_problems(c.template, template_settings(c))


def _model_problems(c: TrainConfig) -> list[str]:
    model = c.model_name_or_path
    problems = []
    if model:
        path = Path(model).expanduser()
        looks_local = model.startswith((".", "/", "~")) or path.exists()
        if looks_local and not path.is_dir():
            problems.append(f"model_name_or_path {model} does not exist. Give an existing folder, a hub id "
                            "(org/name), or leave it empty for the built-in demo model.")
        elif looks_local and not (path / "config.json").is_file():
            problems.append(f"model_name_or_path {model} has no config.json: it is not a model folder "
                            "(or its download is incomplete).")
        elif not looks_local:
            from engine.models.offline import hub_id_problem

            problem = hub_id_problem(model)
            if problem:
                problems.append(problem)
    if c.quantization_bit:
        from engine.models.offline import cuda_available

        if not cuda_available():
            problems.append("QLoRA (quantization_bit) needs a CUDA GPU and bitsandbytes; this machine has no GPU. "
                            "Remove quantization_bit to train plain LoRA on CPU.")
        elif importlib.util.find_spec("bitsandbytes") is None:
            problems.append("quantization_bit needs bitsandbytes: `pip install 'lf-assistant[bnb]'`.")
    return problems


def _output_problems(c: TrainConfig) -> list[str]:
    if not c.output_dir or c.overwrite_output_dir or c.resume_from_checkpoint:
        return []
    out = Path(c.output_dir)
    if out.is_dir() and any(out.iterdir()):
        return [f"output_dir {out} is not empty. Set overwrite_output_dir: true to write into it, "
                "resume_from_checkpoint: auto to continue it, or choose another output_dir."]
    return []


def validate(config: TrainConfig) -> list[str]:
    """All problems of a training config, as sentences that say what to change. Empty list: good to go."""
    problems = _choices_problems(config) + _number_problems(config) + _method_problems(config)
    problems += _template_problems(config) + _model_problems(config) + _output_problems(config)
    problems += _data_problems(config)
    return problems
