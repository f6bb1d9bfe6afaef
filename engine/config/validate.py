"""Every problem of a training config, listed before anything heavy loads; warnings apart.

``validate(config)`` returns the problems (a run with any of them is refused); ``warnings(config)`` returns what
is allowed but probably not meant (a LoRA rank as wide as the layers it adapts).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from engine.config.fields import field_problems
from engine.config.kernel_choice import parse_kernel_config
from engine.config.model_check import local_config, lora_rank_warning, lora_target_problems
from engine.readers import clip, comma_names, short_repr
from engine.config.train import TrainConfig
from engine.data.kinds import stage_data_problem
from engine.errors import ConfigError, EngineError



def _relation_problems(c: TrainConfig) -> list[str]:
    """Rules between keys (each key's own type and range are checked by ``field_problems``)."""
    problems = []
    if c.max_steps <= 0 and not c.num_train_epochs > 0:
        problems.append("Set max_steps > 0 or num_train_epochs > 0: otherwise nothing would be trained.")
    if c.val_size == 1:
        problems.append("val_size 1 is read as the share 1.0, i.e. every row held out (LLaMA-Factory refuses it "
                        "too): give a share below 1 (e.g. 0.1) or a count of 2 or more rows.")
    elif c.val_size >= 1 and not float(c.val_size).is_integer():
        problems.append(f"val_size {short_repr(c.val_size)}: a value of 1 or more is a row count and must be whole "
                        "(a share is below 1, e.g. 0.1).")
    if c.val_size > 0 and c.eval_dataset:
        problems.append("val_size and eval_dataset are both set: hold out rows (val_size) or name eval data "
                        "(eval_dataset), not both.")
    if c.mask_history and c.train_on_prompt:
        problems.append("mask_history and train_on_prompt are both true: one trains only the last answer, the other "
                        "every prompt too. Keep one.")
    if c.finetuning_type == "freeze" and c.freeze_trainable_layers == 0:
        problems.append("freeze_trainable_layers is 0: no layer would train. Use N > 0 (the last N layers) or "
                        "N < 0 (the first N).")
    if c.stage != "sft" and (c.train_on_prompt or c.mask_history):
        problems.append(f"train_on_prompt and mask_history choose which parts of a conversation SFT trains on; "
                        f"stage {c.stage} does not read them (LLaMA-Factory refuses them too). Remove them.")
    try:
        parse_kernel_config(c.kernel_config)
    except ConfigError as exc:
        problems.append(str(exc))
    if c.stage == "dpo" and c.pref_loss != "sigmoid" and c.dpo_label_smoothing > 0:
        problems.append(f"dpo_label_smoothing only applies to pref_loss: sigmoid (pref_loss is {c.pref_loss}); "
                        "set it to 0.")
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
        problems += _deepspeed_problems(c)
    from engine.trackers import missing_packages

    problems += missing_packages(c.report_to)
    from engine.config.method_check import method_problems

    return problems + _optimizer_problems(c) + method_problems(c)


def _optimizer_problems(c: TrainConfig) -> list[str]:
    from engine.config.choices import optimizer_problems, schedule_problems

    problems = optimizer_problems(c) + schedule_problems(c.lr_scheduler_type, c.lr_scheduler_kwargs,
                                                         c.learning_rate)
    if c.loraplus_lr_ratio is not None and c.finetuning_type not in ("lora", "qlora"):
        problems.append(f"loraplus_lr_ratio only applies to LoRA (finetuning_type is {c.finetuning_type}); remove "
                        "it or use finetuning_type: lora.")
    return problems


def _deepspeed_problems(c: TrainConfig) -> list[str]:
    from engine.config.paths import find_relative_file
    from engine.readers import read_json

    problems = []
    path = find_relative_file(c.deepspeed, c.base_dir())
    if path is None:
        problems.append(f"deepspeed: config file {clip(c.deepspeed, 200)} not found (looked in the working dir, "
                        f"{c.base_dir()} and the folders above it).")
    else:
        try:
            read_json(path, what="DeepSpeed config")
        except EngineError as exc:
            problems.append(f"deepspeed: {exc}")
    if importlib.util.find_spec("deepspeed") is None:
        problems.append("deepspeed is set but the deepspeed package is not installed: "
                        "`pip install 'lf-assistant[deepspeed]'` (needs a GPU), or remove the deepspeed key.")
    return problems


def _data_problems(c: TrainConfig) -> list[str]:
    from engine.data.tokenized import has_tokenized, saved_problem, tokenized_path_problem

    problem = tokenized_path_problem(c.tokenized_path)
    if problem:
        return [problem]
    if c.tokenized_path and has_tokenized(c.tokenized_path):
        problem = saved_problem(c.tokenized_path, c.stage)
        return [problem] if problem else []  # the saved samples are read; the dataset keys are not (as in LLaMA-Factory)
    if not c.dataset:
        return ["dataset is empty: name one or more datasets from dataset_info.json (for example identity)."]
    from engine.config.paths import dataset_dir_of
    from engine.data.registry import get_dataset_spec

    try:
        dataset_dir = dataset_dir_of(c)
    except EngineError as exc:
        return [str(exc)]
    names = [n.strip() for n in c.dataset.split(",") if n.strip()]
    eval_names = [n.strip() for n in (c.eval_dataset or "").split(",") if n.strip()]
    from engine.data.mixing import mix_problems

    problems = mix_problems(c.mix_strategy, c.interleave_probs, len(names), len(eval_names))
    for key, listed in (("dataset", names), ("eval_dataset", eval_names)):
        twice = sorted({n for n in listed if listed.count(n) > 1})
        if twice:  # LF keys its datasets by name: a repeated one loads once, and its probabilities shift
            problems.append(f"{key} names {', '.join(twice)} more than once; LLaMA-Factory reads a dataset once "
                            "whatever the count, so name each once (num_samples in dataset_info.json repeats rows).")
    names += eval_names
    for name in names:
        try:
            spec = get_dataset_spec(name, dataset_dir)
            _dataset_source_problem(spec, dataset_dir, c.cache_dir)
        except EngineError as exc:
            problems.append(str(exc))
            continue
        problem = stage_data_problem(c.stage, name, spec)
        if problem:
            problems.append(problem)
    return problems


def _dataset_source_problem(spec, dataset_dir, cache_dir) -> None:
    """Raise what stops a dataset from being read here: a missing file, a multimodal or unreadable hub entry, or a
    hub dataset that is neither cached nor downloadable (offline). A hub dataset that only needs a download is no
    problem: training downloads it (`train --check` lists it)."""
    from engine.data.formats import require_supported
    from engine.data.registry import dataset_file_path

    require_supported(spec)
    if spec.is_local:
        dataset_file_path(spec, dataset_dir)
        return
    from engine.data.hub import hub_dataset, is_cached, listing_damage, snapshot_dir
    from engine.errors import DataError
    from engine.models.download import is_offline

    ref = hub_dataset(spec)
    if ref.source != "script" and is_offline() and not is_cached(ref, cache_dir):
        folder = snapshot_dir(ref, cache_dir)
        damage = listing_damage(folder)
        where = damage or f"it is not in the cache ({folder})."
        raise DataError(f"Dataset {spec.name!r} ({ref.describe()}) needs a download and HF_HUB_OFFLINE is set: "
                        f"{where} Download it where there is network "
                        f"(`lf-assistant data download {spec.name}`), or put the file in dataset_dir.")


def _template_problems(c: TrainConfig) -> list[str]:
    from engine.data.templates import TEMPLATES, template_problems, template_settings

    problems = template_problems(c.template, template_settings(c))
    template = TEMPLATES.get(c.template or "")
    if c.train_on_prompt and template is not None and template.efficient_eos:
        problems.append(f"Template {template.name!r} cannot train on prompts (its answers share one EOS, as "
                        "LLaMA-Factory refuses too); set train_on_prompt: false.")
    return problems


def _model_problems(c: TrainConfig) -> list[str]:
    model = c.model_name_or_path
    problems = []
    if model:
        path = Path(model).expanduser()
        looks_local = model.startswith((".", "/", "~")) or path.exists()
        if path.exists() and not path.is_dir():
            problems.append(f"model_name_or_path {clip(model, 200)} is a file, not a model folder. Give the folder "
                            "that holds its config.json and weights (a .gguf file: `lf-assistant models import "
                            "FILE` makes one).")
        elif looks_local and not path.is_dir():
            problems.append(f"model_name_or_path {clip(model, 200)} does not exist. Give an existing folder, a hub id "
                            "(org/name), or leave it empty for the built-in demo model.")
        elif looks_local and not (path / "config.json").is_file():
            problems.append(f"model_name_or_path {clip(model, 200)} has no config.json: it is not a model folder "
                            "(or its download is incomplete).")
        elif looks_local:
            from engine.models.cache import model_config_problem
            from engine.models.loading import remote_code_problem, weights_problem

            problem = (model_config_problem(path) or weights_problem(path)
                       or remote_code_problem(path, trust_remote_code=c.trust_remote_code))
            if problem:
                problems.append(problem)
        elif not looks_local:
            from engine.models.offline import hub_id_problem

            problem = hub_id_problem(model)
            if problem:
                problems.append(problem)
    if model and local_config(model):
        from engine.models.cache import checkpoint_is_quantized

        method = checkpoint_is_quantized(model)
        if method:
            from engine.config.method_check import prequantized_problem

            problems.append(prequantized_problem(clip(model, 200), clip(method, 40)))
    if c.quantization_bit:
        from engine.models.offline import cuda_available

        if not cuda_available():
            problems.append("QLoRA (quantization_bit) needs a CUDA GPU and bitsandbytes; this machine has no GPU. "
                            "Remove quantization_bit to train plain LoRA on CPU.")
        elif importlib.util.find_spec("bitsandbytes") is None:
            problems.append("quantization_bit needs bitsandbytes: `pip install 'lf-assistant[bnb]'`.")
    if c.finetuning_type in ("lora", "qlora") and (not c.adapter_name_or_path or c.create_new_adapter):
        from engine.config.method_check import additional_target_problems

        problems += lora_target_problems(model, c.lora_target) + additional_target_problems(model,
                                                                                             c.additional_target)
    if c.finetuning_type == "freeze" and local_config(model) is not None:
        problems += _freeze_module_problems(c, model)
    return problems


def _freeze_module_problems(c: TrainConfig, model: str) -> list[str]:
    """Freeze's module names checked as training checks them, against the model built on the meta device."""
    from engine.config.model_check import linear_layers
    from engine.methods.freeze import module_problems

    layers = linear_layers(model)
    if layers is None or layers.parameters is None:
        return []
    names = list(layers.parameters)
    if c.stage == "rm" and layers.head:  # a reward model loads with a score head in place of the output head
        names = [name for name in names if not name.startswith(f"{layers.head}.")] + ["score.weight"]
    return module_problems(c, names, layers.num_layers)


def _output_problems(c: TrainConfig) -> list[str]:
    """output_dir never is, holds or lies inside the model, an adapter or the data; a non-empty one that is not
    ours, or holds another run's results, is never written into silently."""
    if not c.output_dir:
        return []
    from engine.config.paths import dataset_dir_of, output_overlap_problems
    from engine.ownership import output_dir_problem

    sources = [("model_name_or_path", c.model_name_or_path)]
    sources += [("adapter_name_or_path", a.strip()) for a in (c.adapter_name_or_path or "").split(",") if a.strip()]
    try:
        sources.append(("dataset_dir", dataset_dir_of(c)))
    except EngineError:
        pass  # reported by _data_problems
    problems = output_overlap_problems("output_dir", c.output_dir, sources)
    if problems:
        return problems
    problem = output_dir_problem(Path(c.output_dir).expanduser(), None, overwrite=c.overwrite_output_dir,
                                 resume=bool(c.resume_from_checkpoint))
    return [problem] if problem else []


def validate(config: TrainConfig) -> list[str]:
    """All problems of a training config, as sentences that say what to change. Empty list: good to go."""
    problems = field_problems(config)
    if not problems:  # relations between out-of-range numbers would only repeat those problems
        problems = _relation_problems(config)
    problems += _method_problems(config) + _template_problems(config) + _model_problems(config)
    problems += _output_problems(config)
    problems += _data_problems(config)
    return problems


def warnings(config: TrainConfig) -> list[str]:
    """What is allowed but probably not meant, as sentences; the CLI prints them before training."""
    out = []
    if config.finetuning_type in ("lora", "qlora") and not config.adapter_name_or_path:
        warning = lora_rank_warning(config.model_name_or_path, config.lora_target, config.lora_rank)
        if warning:
            out.append(warning)
    from engine.config.method_check import method_warnings

    out += method_warnings(config)
    out += _continued_adapter_warnings(config)
    if config.lr_scheduler_type == "constant" and (config.warmup_steps > 0 or config.warmup_ratio > 0):
        out.append("lr_scheduler_type: constant ignores warmup (as in Transformers); use constant_with_warmup to "
                   "warm up first.")
    if config.learning_rate > 0.01 and math.isfinite(config.learning_rate):
        out.append(f"learning_rate {config.learning_rate:g} is unusually high for fine-tuning (1e-5 to 5e-4 is usual); "
                   "the loss may diverge.")
    return out


def _continued_adapter_warnings(config: TrainConfig) -> list[str]:
    """A LoRA adapter that training continues (the last of adapter_name_or_path) keeps its own rank, alpha and
    dropout, as in LLaMA-Factory: say so when the config asks for others, rather than ignore them silently."""
    from engine.jsonio import read_json_dict

    adapters = comma_names(config.adapter_name_or_path)
    if config.finetuning_type not in ("lora", "qlora") or not adapters or config.create_new_adapter:
        return []
    saved = read_json_dict(Path(adapters[-1]).expanduser() / "adapter_config.json")
    asked = {"lora_rank": (config.lora_rank, saved.get("r")), "lora_alpha": (config.lora_alpha_value, saved.get(
        "lora_alpha")), "lora_dropout": (config.lora_dropout, saved.get("lora_dropout"))}
    differ = [f"{key} {mine} (the adapter's is {theirs})" for key, (mine, theirs) in asked.items()
              if isinstance(theirs, (int, float)) and not isinstance(theirs, bool) and theirs != mine]
    if not differ:
        return []
    return [f"adapter_name_or_path {clip(adapters[-1], 200)} is continued with its own settings, so "
            f"{'; '.join(differ)} {'is' if len(differ) == 1 else 'are'} not used. Set create_new_adapter: true to "
            "merge it into the base and train a new adapter with these settings."]


def check_notes(config: TrainConfig) -> list[str]:
    """What `train --check` tells besides problems: which packing trains, where tokenized data comes from, and
    which hub datasets need a download (and whether they are cached)."""
    from engine.config.method_check import packing_in_use

    notes = [f"packing: {packing_in_use(config)}"]
    from engine.data.tokenized import describe, has_tokenized

    if config.tokenized_path:
        if has_tokenized(config.tokenized_path):
            try:
                saved = describe(config.tokenized_path)
            except EngineError:  # a damaged record: listed as a problem
                saved = {}
            notes.append(f"tokenized_path: trains on the samples saved in {config.tokenized_path} "
                         f"({saved.get('train', '?')} train / {saved.get('eval', '?')} eval); dataset is not read")
        else:
            notes.append(f"tokenized_path: this run tokenizes into {config.tokenized_path} and stops there "
                         "(LLaMA-Factory's preprocessing); the next run trains on it")
    return notes + dataset_source_notes(config)


def dataset_source_notes(config: TrainConfig) -> list[str]:
    """One line per hub (or script_url) dataset the config names: where it comes from, downloaded or not."""
    from engine.config.paths import dataset_dir_of
    from engine.data.hub import download_status
    from engine.data.registry import get_dataset_spec

    try:
        dataset_dir = dataset_dir_of(config)
    except EngineError:
        return []
    names = [n.strip() for n in f"{config.dataset or ''},{config.eval_dataset or ''}".split(",") if n.strip()]
    notes = []
    for name in dict.fromkeys(names):
        try:
            spec = get_dataset_spec(name, dataset_dir)
        except EngineError:
            continue
        if not spec.is_local:
            notes.append(f"dataset {download_status(spec, config.cache_dir)}")
    return notes
