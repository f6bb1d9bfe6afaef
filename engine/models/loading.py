"""Load a tokenizer and a causal LM, with every check that can fail made before anything heavy loads.

Checks, in order: QLoRA needs CUDA and bitsandbytes (refused before any weights are read); the path is a local
folder, or a hub id that is cached when the hub is offline; the folder holds a config, weights (every shard) and
tokenizer files; custom model code runs only with explicit consent (`trust_remote_code: true`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from engine.errors import ConfigError, DeviceError, ModelError
from engine.jsonio import read_json_dict as _read_json
from engine.models.options import LoadOptions

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DtypeName = Literal["auto", "float32", "bfloat16", "float16"]
DTYPE_NAMES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_SINGLE_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model", "tokenizer.tiktoken")
_ANNOUNCED_CODE: set[str] = set()


def hub_offline() -> bool:
    """True when the hub must not be contacted (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, read now, not at import)."""
    from huggingface_hub import is_offline_mode

    flags = (os.environ.get(k, "").strip().lower() for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return is_offline_mode() or any(f in ("1", "true", "yes", "on") for f in flags)


def check_quantization(quantization_bit: int | None, device: str) -> None:
    """QLoRA (bitsandbytes 4/8-bit) needs a CUDA GPU and bitsandbytes; refuse early with the way forward."""
    if quantization_bit is None:
        return
    if quantization_bit not in (4, 8):
        raise ConfigError(f"quantization_bit must be 4 or 8 (got {quantization_bit}); remove it to train unquantized.")
    import torch

    if not torch.cuda.is_available() or not device.startswith("cuda"):
        raise DeviceError(
            "QLoRA needs a CUDA GPU and bitsandbytes; on this machine use finetuning_type: lora without "
            f"quantization_bit (device here: {device}, CUDA available: {torch.cuda.is_available()})."
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        raise DeviceError(
            f"quantization_bit: {quantization_bit} needs the bitsandbytes package, which is not installed. "
            "Install it with `pip install lf-assistant[bnb]`, or remove quantization_bit to train in LoRA without it."
        )


def resolve_model_source(
    path: str | Path, *, trust_remote_code: bool = False, need_weights: bool = True, need_tokenizer: bool = False,
    revision: str | None = None, cache_dir: str | None = None,
) -> str:
    """The local folder to load from (a cached snapshot for a hub id), or the hub id when online and not cached.

    Raises ModelError for a missing path, an uncached or incomplete id while offline, an incomplete folder, or
    custom code without consent.
    """
    text = str(path)
    folder = Path(text).expanduser()
    needs = {"need_weights": need_weights, "need_tokenizer": need_tokenizer}
    if folder.is_dir():
        check_model_folder(folder, trust_remote_code=trust_remote_code, **needs)
        return str(folder)
    if not folder.exists() and _built_demo(text) is not None:
        return str(_built_demo(text))
    if folder.exists():
        raise ModelError(f"{text} is a file; model_name_or_path must be a model folder (with config.json) or a hub id.")
    if not _HUB_ID.match(text):
        raise ModelError(_missing_path_message(text))
    snapshot = _cached_snapshot(text, revision, cache_dir)
    if snapshot is not None and (hub_offline() or not folder_problems(snapshot, **needs)):
        check_model_folder(snapshot, trust_remote_code=trust_remote_code, **needs)
        return str(snapshot)
    if hub_offline():
        raise ModelError(_offline_message(text))
    return text  # online: transformers downloads what the cache lacks


def check_model_folder(
    folder: Path, *, trust_remote_code: bool = False, need_weights: bool = True, need_tokenizer: bool = False
) -> None:
    """Raise ModelError unless `folder` loads as asked and runs no custom code without consent."""
    problems = folder_problems(folder, need_weights=need_weights, need_tokenizer=need_tokenizer)
    if "config.json" in problems:
        raise ModelError(_no_config_message(folder))
    from engine.models.cache import model_config_problem

    config_problem = model_config_problem(folder)
    if config_problem:
        raise ModelError(f"{folder} cannot be loaded: {config_problem}")
    index_problem = weight_index_problem(folder) if need_weights else None
    if index_problem:
        raise ModelError(f"{folder} cannot be loaded: {index_problem}")
    if problems:
        tokenizer_hint = " (a full fine-tune checkpoint may lack the tokenizer)" if "tokenizer" in problems[-1] else ""
        raise ModelError(
            f"{folder} is not a complete model folder; missing: " + "; ".join(problems) + ". "
            "Finish or repeat the download (`lf-assistant models download ID`), or copy the missing files "
            f"from the base model{tokenizer_hint}."
        )
    if need_weights:
        from engine.models.cache import require_intact_safetensors

        require_intact_safetensors(weight_paths(folder), "The model")
    from engine.models.remote_code import remote_code_files

    problem = remote_code_problem(folder, trust_remote_code=trust_remote_code)
    if problem:
        raise ModelError(problem)
    code = remote_code_files(folder) if trust_remote_code else None
    if code is None or not (code.files or code.elsewhere) or str(folder) in _ANNOUNCED_CODE:
        return
    _ANNOUNCED_CODE.add(str(folder))  # the tokenizer and the model check the same folder: say it once
    # Consent given: say which files run, in the run log (stderr lands there) and on the terminal.
    logging.getLogger("engine").warning("trust_remote_code: true runs Python code from %s: %s", folder,
                                        code.describe())


def weight_index_problem(folder: Path) -> str | None:
    """What is wrong with a model folder's weight index (not JSON, no weight_map, a file outside the folder)."""
    from engine.models.cache import index_shards

    for index_name in _WEIGHT_INDEXES:
        if (folder / index_name).is_file():
            try:
                index_shards(folder / index_name)
            except ModelError as exc:
                return str(exc)
    return None


def weights_problem(folder: Path) -> str | None:
    """A damaged weight index or safetensors header in a model folder, in words (missing files are not looked
    for: a folder being filled is told apart elsewhere)."""
    from engine.models.cache import safetensors_problem

    problem = weight_index_problem(folder)
    if problem:
        return f"{folder} cannot be loaded: {problem}"
    for path in weight_paths(folder):
        damage = safetensors_problem(path)[0] if path.is_file() else None
        if damage:
            return (f"{folder} cannot be loaded: {damage}. The file {path} is damaged (an interrupted copy or "
                    "download); copy or download it again.")
    return None


def remote_code_problem(folder: Path, *, trust_remote_code: bool) -> str | None:
    """Why `folder` may not load: it ships Python code of its own (naming the files) and consent was not given."""
    from engine.models.remote_code import remote_code_files

    reason = None if trust_remote_code else custom_code_reason(folder)
    if not reason:
        return None
    return (f"{folder} ships its own Python code ({reason}: {remote_code_files(folder).describe()}), and running it "
            "needs your consent. If you trust its author, set `trust_remote_code: true` in the config; otherwise "
            "pick a model transformers supports natively.")


def weight_paths(folder: Path) -> list[Path]:
    """The safetensors weight files of a model folder (every shard its index names, else model.safetensors)."""
    index = folder / _WEIGHT_INDEXES[0]
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        names = sorted({str(v) for v in weight_map.values()}) if isinstance(weight_map, dict) else []
        return [folder / name for name in names if name.endswith(".safetensors") and "/" not in name]
    return [folder / _SINGLE_WEIGHT_FILES[0]]


def folder_problems(folder: Path, *, need_weights: bool = True, need_tokenizer: bool = False) -> list[str]:
    """The parts `folder` lacks for the load asked for ("config.json", weights, tokenizer); [] when complete."""
    has_tokenizer = any((folder / name).is_file() for name in _TOKENIZER_FILES)
    # A tokenizer alone loads without config.json (adapter folders carry one); weights never do.
    if not (folder / "config.json").is_file() and (need_weights or not has_tokenizer):
        return ["config.json"]
    missing = _missing_weights(folder) if need_weights else []
    if need_tokenizer and not has_tokenizer:
        missing.append("tokenizer files (tokenizer.json, or tokenizer.model, or vocab.json + merges.txt)")
    return missing


def custom_code_reason(folder: Path) -> str | None:
    """Why loading `folder` would run code from the folder itself, or None when transformers has the classes."""
    from transformers import CONFIG_MAPPING

    config = _read_json(folder / "config.json")
    if config.get("auto_map") and config.get("model_type") not in CONFIG_MAPPING:
        # An auto_map next to a model_type transformers knows is ignored without consent: the native class loads.
        return f"config.json auto_map for model_type {config.get('model_type')!r}"
    tok_config = _read_json(folder / "tokenizer_config.json")
    tok_class = str(tok_config.get("tokenizer_class") or "")
    if tok_config.get("auto_map") and not _is_transformers_class(tok_class):
        return f"tokenizer_config.json auto_map for tokenizer_class {tok_class!r}"
    return None


def load_tokenizer(
    path: str | Path, *, trust_remote_code: bool = False, padding_side: Literal["right", "left"] = "right",
    revision: str | None = None, cache_dir: str | None = None,
) -> PreTrainedTokenizerBase:
    """AutoTokenizer with a pad token (the eos token when the model has none) and the given padding side."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoTokenizer

    source = resolve_model_source(path, trust_remote_code=trust_remote_code, need_weights=False, need_tokenizer=True,
                                  revision=revision, cache_dir=cache_dir)
    hub = {} if Path(source).is_dir() else {"revision": revision, "cache_dir": cache_dir}
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, **hub)
    except (OSError, ValueError, StrictDataclassError) as exc:  # the last: a config.json field of the wrong type
        raise ModelError(f"Could not load the tokenizer from {source}: {exc}") from exc
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelError(
                f"The tokenizer in {source} has neither a pad nor an eos token, so batches cannot be padded. "
                "Set pad_token / eos_token in its tokenizer_config.json."
            )
        # Labels of padding are masked (-100) by the collator, so sharing the id with eos does not hide real eos.
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = padding_side
    # Whole texts are tokenized before cutoff_len cuts them, so transformers' "longer than the specified maximum
    # sequence length ... will result in indexing errors" would be false here: marked as said already.
    getattr(tokenizer, "deprecation_warnings", {})["sequence-length-is-longer-than-the-specified-maximum"] = True
    return tokenizer


def load_model(
    path: str | Path,
    *,
    dtype: DtypeName = "auto",
    device: str = "cpu",
    trust_remote_code: bool = False,
    quantization_bit: int | None = None,
    head: str = "causal_lm",
    options: LoadOptions | None = None,
    notes: list[str] | None = None,
) -> PreTrainedModel:
    """AutoModelForCausalLM on `device` (``head="score"``: AutoModelForSequenceClassification with one label, a
    reward model whose score head starts fresh). dtype "auto": the checkpoint's dtype on a GPU, float32 on CPU.
    ``options``: a training config's load settings (engine.models.options); what they change lands in ``notes``."""
    check_quantization(quantization_bit, device)
    if dtype not in DTYPE_NAMES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPE_NAMES)} (got {dtype!r}).")
    options = options or LoadOptions()
    source = resolve_model_source(path, trust_remote_code=trust_remote_code, revision=options.revision,
                                  cache_dir=options.cache_dir)
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    kwargs: dict = {"dtype": _torch_dtype(dtype, device), "trust_remote_code": trust_remote_code}
    kwargs.update(_option_kwargs(source, options, device, trust_remote_code, notes if notes is not None else []))
    auto_class = AutoModelForCausalLM
    if head == "score":
        auto_class, kwargs["num_labels"] = AutoModelForSequenceClassification, 1
    if quantization_bit is not None:
        kwargs["quantization_config"] = _bnb_config(quantization_bit, options)
        kwargs["device_map"] = {"": device}  # bitsandbytes quantizes while placing; .to() is refused afterwards
    from huggingface_hub.errors import StrictDataclassError
    from safetensors import SafetensorError

    quiet = _FreshScoreHead() if head == "score" else None
    report_logger = logging.getLogger("transformers.modeling_utils")
    if quiet:
        report_logger.addFilter(quiet)
    try:
        model = auto_class.from_pretrained(source, **kwargs)
    except (OSError, ValueError, RuntimeError, SafetensorError, StrictDataclassError) as exc:
        raise ModelError(f"Could not load the model from {source}: {exc}") from exc
    finally:
        if quiet:
            report_logger.removeFilter(quiet)
    if quantization_bit is None:
        model = model.to(device)
    return model


class _FreshScoreHead(logging.Filter):
    """Drops transformers' load report when all it says is what a reward model's load means by design: the score
    head is missing from the checkpoint (it starts fresh) and an untied language-model head in the checkpoint is
    unused. The raw table in train.log read as a fault. Any other missing, unexpected or mismatched weight keeps
    the report."""

    EXPECTED = (("score.", "MISSING"), ("lm_head.", "UNEXPECTED"))

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "LOAD REPORT" not in message:
            return True
        rows = [[cell.strip() for cell in line.split("|")] for line in message.splitlines() if "|" in line][1:]
        expected = [len(r) > 1 and any(r[0].startswith(k) and status in r[1] for k, status in self.EXPECTED)
                    for r in rows]
        return not (rows and all(expected))


def _torch_dtype(dtype: DtypeName, device: str):
    import torch

    if dtype == "auto":
        return torch.float32 if device.startswith("cpu") else "auto"
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def _bnb_config(quantization_bit: int, options: LoadOptions):
    import torch
    from transformers import BitsAndBytesConfig

    if quantization_bit == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    compute = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type=options.quantization_type,
        bnb_4bit_use_double_quant=options.double_quantization, bnb_4bit_compute_dtype=compute
    )


def _option_kwargs(source: str, options: LoadOptions, device: str, trust_remote_code: bool,
                   notes: list[str]) -> dict:
    """from_pretrained arguments for a training config's settings: a RoPE-scaled config, the attention kernel,
    the hub revision and cache of a hub id."""
    from engine.models.options import attention, scale_rope

    kwargs: dict = {}
    if options.rope_scaling:
        from transformers import AutoConfig

        model_config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
        note = scale_rope(model_config, options.rope_scaling, options.model_max_length)
        if note:
            notes.append(note)
        kwargs["config"] = model_config
    implementation, note = attention(options.flash_attn, device)
    if note:
        notes.append(note)
    if implementation:
        kwargs["attn_implementation"] = implementation
    if not Path(source).is_dir():  # a hub id transformers downloads
        kwargs.update(revision=options.revision, cache_dir=options.cache_dir)
    return kwargs


def _missing_weights(folder: Path) -> list[str]:
    """What is missing for the weights: nothing, the listed shards of an index, or any weight file at all."""
    for index_name in _WEIGHT_INDEXES:
        index = folder / index_name
        if index.is_file():
            weight_map = _read_json(index).get("weight_map")
            shards = sorted({str(v) for v in weight_map.values()}) if isinstance(weight_map, dict) else []
            absent = [s for s in shards if not (folder / s).is_file()]
            return [f"{len(absent)} of {len(shards)} weight shards ({', '.join(absent[:4])})"] if absent else []
    if any((folder / name).is_file() for name in _SINGLE_WEIGHT_FILES):
        return []
    partial = sorted(p.name for p in folder.glob("*.incomplete"))
    hint = f" ({len(partial)} unfinished download files *.incomplete)" if partial else ""
    return [f"the weights (model.safetensors, model-*-of-*.safetensors with its index, or pytorch_model.bin){hint}"]


def _no_config_message(folder: Path) -> str:
    adapter = _read_json(folder / "adapter_config.json")
    if adapter:
        base = adapter.get("base_model_name_or_path") or "its base model"
        return (
            f"{folder} is a LoRA adapter, not a full model. Set model_name_or_path to {base} and "
            f"adapter_name_or_path to {folder}, or merge it first (`lf-assistant export`)."
        )
    present = ", ".join(sorted(p.name for p in folder.iterdir())[:8]) or "nothing"
    return (
        f"{folder} has no config.json, so it is not a transformers model folder (it holds: {present}). "
        "Point model_name_or_path at the folder that contains config.json and the weights."
    )


def _built_demo(name: str) -> Path | None:
    """./models/<name> for a demo model name that has been built there (`lf-assistant demo-model`)."""
    from engine.models.demo import DEMO_MODELS, demo_model_path, is_built

    return demo_model_path(name) if name in DEMO_MODELS and is_built(name) else None


def _missing_path_message(text: str) -> str:
    from engine.models.demo import DEMO_MODELS

    if text in DEMO_MODELS:
        return f"The demo model {text} is not built yet. Build it with `lf-assistant demo-model {text}` (offline)."
    return (
        f"No model folder at {text} (resolved to {Path(text).expanduser().resolve()}), and it is not a hub id "
        "of the form org/name. Check the path, or use `lf-assistant demo-model` for an offline demo model."
    )


def _offline_message(repo_id: str) -> str:
    local_hint = f" There is no local folder named {repo_id} either." if "/" in repo_id else ""
    return (
        f"{repo_id} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set, so it cannot be downloaded."
        f"{local_hint} Two ways forward: (1) download it on a machine with network access "
        f"(`lf-assistant models download {repo_id}`) and unset HF_HUB_OFFLINE, or copy the cache here; "
        "(2) point model_name_or_path at a local folder with the weights (or `lf-assistant demo-model` for a "
        "tiny offline model)."
    )


def _cached_snapshot(repo_id: str, revision: str | None = None, cache_dir: str | None = None) -> Path | None:
    """The snapshot folder of a hub id (at ``revision``) in the local HF cache, without touching the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True))
    except (LocalEntryNotFoundError, ValueError, OSError):
        return None


def _is_transformers_class(name: str) -> bool:
    import transformers

    return bool(name) and (hasattr(transformers, name) or hasattr(transformers, name.removesuffix("Fast")))


