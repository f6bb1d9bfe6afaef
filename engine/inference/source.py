"""What to load for inference or export: base weights, adapters, tokenizer, and the template training used.

The template guard lives here (pain point: a template different from training's gives garbled or endless answers).
Training records its template in ``lfa_training.json`` next to the adapter or model; a config that names another
template is refused with both names and the fix. With several adapters every one's record is read: they must agree
with each other and with the config. Without a record (a model trained elsewhere) the configured
template is used, and the plan says it could not be checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import ConfigError, ModelError
from engine.messages import Message
from engine.inference.config import ADAPTER_METHODS
from engine.models.cache import checkpoint_is_quantized  # noqa: F401 - export asks it here
from engine.jsonio import read_json_dict as _read_json, read_record

TRAINING_INFO_FILE = "lfa_training.json"  # written by engine.training.setup.write_training_info
EXPORT_INFO_FILE = "lfa_export.json"  # written by engine.export.run
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tiktoken.model")


@dataclass
class ModelPlan:
    """Everything decided before any weights load."""

    base_model: str
    """Folder or hub id whose weights load first."""
    adapters: list[str]
    """LoRA adapter folders applied on top, in order ([] for a whole model)."""
    method: str
    """lora | qlora | full | freeze; "exported" for an export folder; "base" for a model no run of ours produced."""
    template_name: str | None
    """Name for get_template; None means the tokenizer's own chat template."""
    template_origin: str
    """Where the template came from, in words (shown to the user and recorded in exports)."""
    tokenizer_source: str
    """Folder whose tokenizer loads (the adapter's when it carries one: it holds the training chat template)."""
    trained_base: str | None = None
    """The base model the run recorded (to find the base of a full fine-tune, for comparisons)."""
    notes: list[str] = field(default_factory=list)
    note_messages: list[Message] = field(default_factory=list)
    """``notes`` as engine.messages.Message, one per note."""


_TRAINING_FIELDS = {"base_model": str, "finetuning_type": str, "template": str, "stage": str, "run_id": str,
                    "continued_adapter": str}
_EXPORT_FIELDS = {"base_model": str, "template": str}


def _record_fix(path: Path) -> Message:
    writer = "training" if path.name == TRAINING_INFO_FILE else "export"
    return Message(f"record.fix_{writer}", f"The file is damaged: {writer} writes it, so run the {writer} again, or "
                   f"delete {path} to go on without it (the config's template is then used unchecked).",
                   {"path": str(path)})


def read_training_info(folder: str | Path) -> dict | None:
    """The training record of an output folder, or None (no record, or not a local folder).

    An exported model carries its template in lfa_export.json instead, so the guard also covers exports.
    A record that is there but damaged (not JSON, a field of the wrong type) is refused with a ConfigError naming it:
    the template guard must not quietly stand down.
    """
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return None
    path = folder / TRAINING_INFO_FILE
    info = read_record(path, _TRAINING_FIELDS, fix=_record_fix(path), error=ConfigError)
    continued = (info or {}).get("continued_adapter")
    if continued and Path(continued).expanduser().resolve() == folder.resolve():
        raise ConfigError(f"{path}: the field 'continued_adapter' names this same folder, which no training "
                          f"writes. {_record_fix(path)}")
    if info:
        return info
    path = folder / EXPORT_INFO_FILE
    export = read_record(path, _EXPORT_FIELDS, fix=_record_fix(path), error=ConfigError) or {}
    if export.get("template"):
        return {"template": export["template"], "base_model": export.get("base_model"), "exported": True}
    return None


def _refuse_an_adapter_beside_its_continuation(adapters: list[str]) -> None:
    """An adapter trained on from another (adapter_name_or_path without create_new_adapter) holds that adapter's
    weights and more: applied together, the earlier one's change would count twice."""
    listed = {str(Path(a).expanduser().resolve()): a for a in adapters}
    for adapter in adapters:
        continued = (read_training_info(adapter) or {}).get("continued_adapter")
        seen = set()
        while isinstance(continued, str) and continued not in listed and continued not in seen:
            seen.add(continued)  # follow the chain: C continued B, which continued A, holds A too
            continued = (read_training_info(continued) or {}).get("continued_adapter")
        if isinstance(continued, str) and continued in listed:
            rest = ",".join(a for a in adapters if a != listed[continued])
            raise ConfigError(
                f"{adapter} continued the training of {listed[continued]} (it holds that adapter's weights and "
                f"more), so the two together would apply {listed[continued]} twice. Leave it out: "
                f"adapter_name_or_path: {rest}.")


def plan_model(model_name_or_path: str | None, adapters: list[str], template: str | None, *,
               finetuning_type: str | None = None) -> ModelPlan:
    """Decide what loads, refusing impossible combinations (adapter on a full fine-tune, template mismatch)."""
    if not model_name_or_path:
        raise ConfigError("model_name_or_path is empty: set it to the base model (LoRA) or the fine-tuned folder.")
    model_dir = Path(model_name_or_path).expanduser()
    _refuse_adapter_as_model(model_dir)
    model_info = read_training_info(model_dir) if model_dir.is_dir() else None
    for adapter in adapters:
        _check_adapter_folder(adapter)
    _refuse_an_adapter_beside_its_continuation(adapters)
    whole_model_method = (model_info or {}).get("finetuning_type")
    if adapters and (whole_model_method in ("full", "freeze") or finetuning_type in ("full", "freeze")):
        kind = whole_model_method or finetuning_type
        raise ConfigError(
            f"{model_name_or_path} is the output of a {kind} fine-tune: a whole model, with no adapter to load. "
            "Remove adapter_name_or_path (model_name_or_path alone loads the fine-tuned model).")
    record_folder = adapters[-1] if adapters else str(model_dir)
    info = read_training_info(record_folder) if (adapters or model_info) else None
    if adapters:
        name, origin, notes = check_adapter_templates(template, adapters)
    else:
        name, origin, notes = check_template(template, info, record_folder)
    if adapters:
        method = (info or {}).get("finetuning_type") if (info or {}).get("finetuning_type") in ADAPTER_METHODS \
            else "lora"
    else:
        method = whole_model_method or ("exported" if (model_info or {}).get("exported") else "base")
    tokenizer_source = adapters[-1] if adapters and _has_tokenizer(Path(adapters[-1])) else str(model_name_or_path)
    return ModelPlan(base_model=str(model_name_or_path), adapters=list(adapters), method=method,
                     template_name=name, template_origin=origin, tokenizer_source=tokenizer_source,
                     trained_base=(info or {}).get("base_model"), notes=[note.text for note in notes],
                     note_messages=notes)


def check_adapter_templates(configured: str | None, adapters: list[str]) -> tuple[str | None, str, list[Message]]:
    """check_template for a list of adapters: every adapter answers in the one template chat and export use, so each
    recorded training template must agree with the others and with the configured one."""
    infos = {folder: read_training_info(folder) for folder in adapters}
    recorded = {folder: info["template"] for folder, info in infos.items() if info and info.get("template")}
    if len(set(recorded.values())) > 1:
        said = ", ".join(f"{folder}: {_template_words(name)}" for folder, name in recorded.items())
        config = f", and the config says template: {configured!r}" if configured not in (None, "", "auto") else ""
        raise ConfigError(
            f"Template mismatch: the adapters were trained with different templates ({said}){config}. Applied "
            "together they answer in a single template, and one other than an adapter's training template gives "
            "garbled or endless answers. Fix: use adapters trained with the same template (retrain one of them "
            "with the other's template).")
    # With the recorded ones agreeing, the last adapter that has a record speaks for all of them.
    folder = next((f for f in reversed(adapters) if f in recorded), adapters[-1])
    return check_template(configured, infos[folder], folder)


def _template_words(name: str) -> str:
    return "the model's own chat template (auto)" if name == "auto" else repr(name)


def check_template(configured: str | None, info: dict | None, folder: str) -> tuple[str | None, str, list[Message]]:
    """(template name to use, where it came from, notes). Refuses a configured name that differs from training's."""
    configured = None if configured in (None, "", "auto") else configured
    trained = (info or {}).get("template")
    trained = None if trained in (None, "", "auto") else trained
    if trained and configured and configured != trained:
        raise ConfigError(
            f"Template mismatch: {folder} was trained with template {trained!r}, but the config says template: "
            f"{configured!r}. A template other than training's gives garbled or endless answers. Fix: set "
            f"`template: {trained}` in the config, or add template={trained} to the command line.")
    if trained:
        record = EXPORT_INFO_FILE if (info or {}).get("exported") else TRAINING_INFO_FILE
        return trained, f"recorded in {Path(folder) / record}", []
    if info and info.get("template") == "auto":
        note = f"{folder} was trained with the model's own chat template (template: auto)"
        if configured:
            raise ConfigError(
                f"Template mismatch: {folder} was trained with the model's own chat template (template: auto), but "
                f"the config says template: {configured!r}. Fix: remove template from the config, or set "
                "`template: auto`.")
        return None, note, []
    if configured:
        note = Message("inference.template_unchecked", f"the template could not be checked against training: "
                       f"{folder} has no {TRAINING_INFO_FILE} (trained with another tool?); using template "
                       f"{configured!r} as configured.", {"folder": folder, "record": TRAINING_INFO_FILE,
                                                          "template": configured})
        return configured, "the config (not verified against training)", [note]
    return None, "the tokenizer's own chat template", [Message(
        "inference.tokenizer_template", f"no template configured and none recorded in {folder}: using the "
        "tokenizer's own chat template.", {"folder": folder})]


def _refuse_adapter_as_model(model_dir: Path) -> None:
    is_adapter = (model_dir / "adapter_config.json").is_file() and not (model_dir / "config.json").is_file()
    if model_dir.is_dir() and is_adapter:
        base = _read_json(model_dir / "adapter_config.json").get("base_model_name_or_path") or "its base model"
        raise ConfigError(
            f"model_name_or_path {model_dir} is a LoRA adapter, not a model. Set model_name_or_path to {base} and "
            f"adapter_name_or_path to {model_dir}.")


def _check_adapter_folder(adapter: str) -> None:
    folder = Path(adapter).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"adapter_name_or_path {adapter} is not a folder (resolved to {folder.resolve()}). "
                          "Point it at the training output_dir of a LoRA/QLoRA run.")
    if (folder / "adapter_config.json").is_file():
        return
    if (folder / "config.json").is_file():
        raise ConfigError(
            f"adapter_name_or_path {adapter} holds a whole model (config.json, no adapter_config.json): the output of "
            "a full fine-tune has no adapter. Set model_name_or_path to this folder and remove adapter_name_or_path.")
    raise ConfigError(f"adapter_name_or_path {adapter} has no adapter_config.json, so it is not a LoRA adapter. "
                      "Point it at the training output_dir (or one of its checkpoint-* folders).")


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in _TOKENIZER_FILES)


def pick_device(requested: str = "auto") -> tuple[str, Message | None]:
    """(device, note): the selected GPU (CUDA_VISIBLE_DEVICES decides which) for auto, else the CPU."""
    import torch

    if requested == "cpu":
        note = Message("inference.cpu_as_configured", "running on the CPU as configured; a GPU is available and "
                       "export_device: auto would use it.") if torch.cuda.is_available() else None
        return "cpu", note
    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.current_device()}", None
    return "cpu", Message("inference.no_gpu", "no GPU is visible, so this runs on the CPU (slower than a GPU for "
                          "large models).")


def load_tokenizer_and_template(plan: ModelPlan, *, trust_remote_code: bool, padding_side: str = "left",
                                config=None):
    """The tokenizer (pad token ensured) and the bound template the plan chose, with the config's template settings
    (default_system, enable_thinking, tool_format, ...) so chat and export render as training did."""
    from engine.data.templates import get_template, template_settings
    from engine.models.loading import load_tokenizer

    tokenizer = load_tokenizer(plan.tokenizer_source, trust_remote_code=trust_remote_code, padding_side=padding_side)
    settings = template_settings(config) if config is not None else {}
    return tokenizer, get_template(plan.template_name, tokenizer, **settings)


def attach_adapter(model, adapter: str, base_model: str):
    """A PeftModel of `model` with `adapter`; a shape mismatch says which base the adapter needs."""
    import warnings

    from peft import PeftModel

    from engine.models.cache import require_intact_safetensors

    require_intact_safetensors([Path(adapter) / "adapter_model.safetensors"], "The adapter")
    try:
        with warnings.catch_warnings():
            # peft asks the model a deprecated gradient-checkpointing question; nothing the user can act on.
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            return PeftModel.from_pretrained(model, adapter, is_trainable=False)
    except (RuntimeError, ValueError, KeyError, OSError) as exc:
        wanted = _read_json(Path(adapter) / "adapter_config.json").get("base_model_name_or_path") or "another model"
        raise ModelError(
            f"The adapter {adapter} does not fit the model {base_model}: it was trained on {wanted}. Set "
            f"model_name_or_path to the base the adapter was trained on. ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:300]})") from exc
