"""Resolve a user's model (hub id, local folder, or folder name) to a family and a chat template.

Rules, first match wins, and the Resolution says which one matched:
1. `demo`: a built-in demo model name, or a folder holding a demo build.
2. `registry`: the id, or the folder's name (`./models/Qwen3-4B`, `models--Qwen--Qwen3-4B/snapshots/<rev>`), or
   the registry id a GGUF import recorded in the folder, is in the model registry.
3. `config.json`: the model folder's `model_type` / `architectures` belong to a known family (unless the
   model_type is one several families share, like llama, and the chat template names another one).
4. `chat_template`: the tokenizer's own chat template carries a family's tell-tale tokens.
A template the user names wins over all of these (rule `user` when nothing else matched), with a warning when it
differs from what the model suggests: a wrong template is the classic cause of garbled or endless answers.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from engine.errors import ModelError
from engine.messages import Message
from engine.readers import clip
from engine.jsonio import read_json_dict as _read_json
from engine.models.cache import find_local_model
from engine.models.gguf_file import IMPORT_RECORD
from engine.models.registry import FAMILIES, MODELS, ModelEntry, find_model

log = logging.getLogger("engine")

Rule = Literal["registry", "config.json", "chat_template", "demo", "user"]

# Tokens that only one family's chat template writes; checked in this order (Phi-4 and Qwen3 also use
# <|im_start|>, so they come before the plain ChatML signatures; Qwen2.5 and Qwen2 differ only by their default
# system prompt, and any other ChatML model gets the neutral `chatml`).
CHAT_TEMPLATE_SIGNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("llama3", ("<|start_header_id|>",), "llama3"),
    ("gemma3", ("<start_of_turn>",), "gemma3"),
    ("deepseek_r1", ("<｜Assistant｜>",), "deepseekr1"),
    ("glm4", ("[gMASK]<sop>",), "glm4"),
    ("phi4", ("<|im_sep|>",), "phi4"),
    ("mistral", ("[INST]",), "mistral"),
    ("smollm2", ("<|im_start|>", "named SmolLM"), "smollm2"),
    ("qwen3", ("<|im_start|>", "<think>"), "qwen3"),
    ("qwen2_5", ("<|im_start|>", "You are Qwen, created by Alibaba Cloud"), "qwen2_5"),
    ("qwen2_5", ("<|im_start|>", "You are a helpful assistant"), "qwen"),
    ("qwen2_5", ("<|im_start|>",), "chatml"),
)
# config.json model_types that several families share (Llama 3, SmolLM2, Mistral as llama.cpp writes it,
# DeepSeek-R1-Distill-Llama all say llama): for these the chat template names the family when it disagrees.
SHARED_MODEL_TYPES = ("llama",)
_BASE_NAME = re.compile(r"([-_.](base|pt)([-_.]|$))", re.IGNORECASE)


@dataclass
class Resolution:
    """What a model is and how to talk to it."""

    family: str
    """Family key in FAMILIES, or `custom` for an unknown model with a user-given template."""
    template: str
    """Chat template to use."""
    rule: Rule
    """Which rule decided the family."""
    entry: ModelEntry | None
    """The registry entry, when the model is a registered one."""
    warnings: list[str] = field(default_factory=list)
    """Things the user should know before training (base model with a chat template, incomplete folder...)."""
    warning_messages: list[Message] = field(default_factory=list)
    """``warnings`` as engine.messages.Message, one per warning (``warn`` adds both)."""
    local_path: Path | None = None
    """The folder holding the model on this machine, if any (see `local_complete`)."""
    local_complete: bool = False
    """Whether that folder passed the completeness check."""
    local_where: str | None = None
    """Which kind of place that folder is (engine.models.cache.Where): "recorded" for one `models download` put
    somewhere other than ./models, which the front ends name."""
    detail: str = ""
    """One sentence on why this rule matched, for the UI."""

    def warn(self, message: Message) -> None:
        self.warnings.append(message.text)
        self.warning_messages.append(message)


def known_templates() -> list[str] | None:
    """Template names the engine implements, or None while engine.data.templates is unavailable."""
    try:
        from engine.data.templates import TEMPLATES
    except ImportError:
        return None
    return sorted(TEMPLATES)


def read_chat_template(folder: Path) -> str | None:
    """The tokenizer's chat template text (chat_template.jinja, chat_template.json or tokenizer_config.json)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8", errors="replace")
    for name in ("chat_template.json", "tokenizer_config.json"):
        value = _read_json(folder / name).get("chat_template")
        if isinstance(value, list):  # several named templates: the default one, or all of them joined
            value = " ".join(str(t.get("template", "")) for t in value if isinstance(t, dict))
        if isinstance(value, str) and value.strip():
            return value
    return None


def _demo_entry(model: str) -> ModelEntry | None:
    try:
        from engine.models.demo import is_demo_model, marker_name
    except ImportError:
        return MODELS.get(model) if model in MODELS and MODELS[model].family == "demo" else None
    if not is_demo_model(model):
        return None
    return MODELS.get(model if model in MODELS else marker_name(Path(model)) or "")


def _registry_entry(model: str, folder: Path | None) -> ModelEntry | None:
    entry = find_model(model)
    if entry is not None or folder is None:
        return entry
    imported = _read_json(folder / IMPORT_RECORD).get("registry_id")  # a folder `models import` wrote
    if isinstance(imported, str) and find_model(imported) is not None:
        return find_model(imported)
    for part in (folder.name, folder.parent.parent.name if folder.parent.name == "snapshots" else ""):
        if part.startswith("models--"):  # HF cache folder: models--org--name
            part = part[len("models--"):].replace("--", "/", 1)
        elif "--" in part:  # ModelScope cache folder: org--name
            part = part.replace("--", "/", 1)
        entry = find_model(part.replace("___", ".")) if part else None
        if entry is not None:
            return entry
    return None


def _family_from_config(config: dict) -> str | None:
    model_type = config.get("model_type")
    architectures = set(config.get("architectures") or [])
    for fam in FAMILIES.values():
        if model_type in fam.model_types or architectures & set(fam.architectures):
            return fam.name
    return None


def _family_from_chat_template(text: str) -> tuple[str, str] | None:
    for family, signs, template in CHAT_TEMPLATE_SIGNS:
        if all(sign in text for sign in signs):
            return family, template
    return None


def _detect(model: str, folder: Path | None) -> Resolution | None:
    """Apply rules 1-4; None when none of them recognises the model."""
    entry = _demo_entry(model) or (_demo_entry(str(folder)) if folder else None)
    if entry is not None:
        return Resolution(entry.family, entry.template, "demo", entry, detail=f"built-in demo model {entry.id}")
    config = _read_json(folder / "config.json") if folder else {}
    entry = _registry_entry(model, folder)
    if entry is not None:
        res = Resolution(entry.family, entry.template, "registry", entry, detail=f"registry entry {entry.id}")
        found = _family_from_config(config) if config else None
        if config and found != entry.family and FAMILIES[entry.family].model_types:
            text = (f"{folder} is named like {entry.id}, but its config.json says model_type "
                    f"{config.get('model_type')!r}: check that the folder holds the model you mean.")
            res.warn(Message("models.folder_name_mismatch", text, {"folder": str(folder), "model": entry.id,
                                                                   "model_type": config.get("model_type")}))
        return res
    family = _family_from_config(config) if config else None
    chat = read_chat_template(folder) if folder else None
    by_chat = _family_from_chat_template(chat) if chat else None
    if family is not None and by_chat and by_chat[1] != FAMILIES[family].template \
            and config.get("model_type") in SHARED_MODEL_TYPES:
        return Resolution(by_chat[0], by_chat[1], "chat_template", None,
                          detail=f"config.json model_type {config.get('model_type')!r} is shared by several families, "
                                 f"and the tokenizer's chat template uses {FAMILIES[by_chat[0]].display} tokens")
    if family is not None:
        res = Resolution(family, FAMILIES[family].template, "config.json", None,
                         detail=f"config.json model_type {config.get('model_type')!r}")
        if by_chat and by_chat[1] != res.template:
            text = (f"config.json says {FAMILIES[family].display}, but the tokenizer's chat template looks like "
                    f"{FAMILIES[by_chat[0]].display}: if the model was tuned from that, use template {by_chat[1]!r}.")
            res.warn(Message("models.chat_template_mismatch", text, {
                "family": FAMILIES[family].display, "chat_family": FAMILIES[by_chat[0]].display,
                "template": by_chat[1]}))
        return res
    if by_chat is not None:
        return Resolution(by_chat[0], by_chat[1], "chat_template", None,
                          detail=f"the tokenizer's chat template uses {FAMILIES[by_chat[0]].display} tokens")
    return None


def _instruct_variant(entry: ModelEntry) -> str | None:
    for guess in (entry.id.replace("-Base", ""), entry.id.replace("-pt", "-it"), entry.id + "-Instruct"):
        if guess != entry.id and guess in MODELS:
            return guess
    return None


def _base_warning(res: Resolution, model: str, folder: Path | None) -> Message | None:
    """Warn when a base (non-instruct) model is paired with an instruct chat template."""
    if res.template == "default" or res.rule == "demo":
        return None
    if res.entry is not None:
        is_base, name = not res.entry.instruct, res.entry.id
    else:
        name = folder.name if folder else model
        no_chat = folder is not None and read_chat_template(folder) is None
        is_base = bool(_BASE_NAME.search(name)) or no_chat
    if not is_base:
        return None
    variant = _instruct_variant(res.entry) if res.entry else None
    tip = f" For a model that already chats, pick {variant}." if variant else ""
    text = (f"{name} is a base model (pre-trained, not instruct), but template {res.template!r} is a chat format it "
            "has not learned: fine-tuning must teach it (use enough data and epochs), or use template 'default' "
            f"for plain text continuation.{tip}")
    return Message("models.base_with_chat_template" + ("_variant" if variant else ""), text,
                   {"name": name, "template": res.template, "variant": variant})


def _unknown_message(model: str, folder: Path | None) -> Message:
    where = (f"its folder {folder} has no config.json model_type or chat template we recognise" if folder
             else "it is not on this machine, so its config.json could not be read "
                  "(download it first with `lf-assistant models download ID`, then try again)")
    model = clip(model, 200)  # a mistyped argument can be any length; the message quotes its start
    text = (f"Cannot tell which model family and chat template {model!r} needs: it is not in the model registry "
            f"and {where}. Two ways forward: (1) pick a supported model (`lf-assistant models list`, e.g. "
            "Qwen/Qwen3-4B-Instruct-2507); or (2) keep this model and name its chat template yourself "
            "(template: qwen3, llama3, mistral, gemma3, ... in the config, or --template).")
    return Message("models.unknown_in_folder" if folder else "models.unknown_not_here", text,
                   {"model": model, "folder": str(folder) if folder else None})


def _check_template_name(template: str | None) -> None:
    names = known_templates()
    if template and names is not None and template not in names:
        text = f"Unknown chat template {template!r}. Known templates: {', '.join(names)}."
        raise ModelError(text, message=Message("models.unknown_template", text,
                                               {"template": template, "names": ", ".join(names)}))


def resolve_model(model: str, *, template: str | None = None) -> Resolution:
    """Family and chat template of a hub id, local folder or folder name; ModelError when unknown.

    `template`, when given, is the user's choice: it wins, and makes an unknown model usable (rule `user`).
    """
    model = model.strip()
    _check_template_name(template)
    local = find_local_model(model)
    folder = local.path
    res = _detect(model, folder)
    if res is None:
        if not template:
            message = _unknown_message(model, folder)
            raise ModelError(message.text, message=message)
        res = Resolution("custom", template, "user", None, detail="chat template named by the user")
    elif template and template != res.template:
        text = (f"template {template!r} overrides {res.template!r} (from {res.detail}): a template that does not "
                "match how the model was trained gives garbled or endless answers; keep it only if the model was "
                f"trained with {template!r}.")
        res.warn(Message("models.template_overrides", text, {"template": template, "detected": res.template,
                                                              "rule": res.rule}))
        res.template = template
    res.local_path, res.local_complete, res.local_where = folder, local.complete, local.where
    base = _base_warning(res, model, folder)
    if base:
        res.warn(base)
    if folder is not None and not local.complete:
        problems = "; ".join(local.problems[:3]).rstrip(".")
        res.warn(Message("models.local_copy_unusable", f"The local copy at {folder} is not usable yet: {problems}.",
                         {"folder": str(folder), "problems": local.problem_messages[:3]}))
    return res


def resolve_model_path(config) -> str:
    """The model to load: the config's, or the built-in demo model (built on first use)."""
    if config.model_name_or_path:
        return config.model_name_or_path
    from engine.models.demo import build_demo_model

    return str(build_demo_model())


def resolve_template(config, model_path: str, tokenizer):
    """The chat template by name, else the model's family default, else the tokenizer's own chat_template; with the
    config's template settings (default_system, enable_thinking, tool_format, ...)."""
    from engine.data.templates import get_template, template_settings

    settings = template_settings(config)
    if config.template and config.template != "auto":
        return get_template(config.template, tokenizer, **settings)
    try:
        name = resolve_model(model_path).template
        if name:
            return get_template(name, tokenizer, **settings)
    except Exception as exc:  # noqa: BLE001 - fall back to the tokenizer's own template, and say why
        log.info("template not resolved from the model registry (%s); using the tokenizer's chat template", exc)
    return get_template(None, tokenizer, **settings)
