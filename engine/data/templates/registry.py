"""Every template by name: LLaMA-Factory's text templates, its multimodal ones refused by name, and get_template."""

from __future__ import annotations

from functools import lru_cache

import difflib

from engine.data.auto_template import TokenizerTemplate
from engine.data.templates.family_chatml import CHATML_TEMPLATES
from engine.data.templates.family_glm import GLM_TEMPLATES
from engine.data.templates.family_llama import LLAMA_TEMPLATES
from engine.data.templates.family_other import OTHER_TEMPLATES
from engine.data.templates.template import Template
from engine.data.tools import check_tool_format
from engine.errors import DataError

TEMPLATES: dict[str, Template] = dict(sorted({
    **CHATML_TEMPLATES, **LLAMA_TEMPLATES, **GLM_TEMPLATES, **OTHER_TEMPLATES,
}.items()))

# LLaMA-Factory's templates for vision / audio / video models (a multimodal plugin, and no text-only family member
# trained here). Recognised so the refusal names the reason rather than "unknown template".
MULTIMODAL_TEMPLATES: tuple[str, ...] = (
    "dots_ocr", "ernie_vl", "glm4_5v", "glm4v", "glm_ocr", "granite3_vision", "intern_s1", "intern_vl", "keye_vl",
    "kimi_vl", "lfm2_vl", "llava", "llava_next", "llava_next_llama3", "llava_next_mistral", "llava_next_qwen",
    "llava_next_video", "llava_next_video_mistral", "llava_next_video_yi", "llava_next_yi", "mimo_vl", "minicpm_o",
    "minicpm_v", "minicpm_v_4_6", "mllama", "moss_vl", "paligemma", "paligemma_chat", "pixtral", "qwen2_audio",
    "qwen2_omni", "qwen2_vl", "qwen3_omni", "qwen3_omni_nothink", "qwen3_vl", "qwen3_vl_nothink", "video_llava",
    "yi_vl", "youtu_vl",
)


def get_template(name: str | None, tokenizer=None, *, default_system: str | None = None,
                 enable_thinking: bool | None = True, preserve_thinking: bool = False, tool_format: str | None = None,
                 allow_special_tokens_in_text: bool = False) -> Template | TokenizerTemplate:
    """A template by name with LLaMA-Factory's data settings, bound to `tokenizer` when given.

    None or "auto": the tokenizer's own chat template. `default_system` replaces the template's default system
    prompt; `enable_thinking` / `preserve_thinking` apply to reasoning templates (ignored by the others, as in LF);
    `tool_format` replaces the template's tool format (and its function slot, as LF does);
    `allow_special_tokens_in_text` lets control-token strings inside message text become control tokens.
    """
    if name in (None, "", "auto"):
        if tool_format is not None:
            raise DataError("tool_format applies to a named template; template auto uses the model's own chat "
                            "template, tool format included. Set template to the model's family.")
        return _auto(tokenizer, default_system=default_system, enable_thinking=enable_thinking,
                     special_tokens_in_text=allow_special_tokens_in_text)
    template = TEMPLATES.get(name)
    if template is None:
        if name in MULTIMODAL_TEMPLATES:
            raise DataError(f"{name} is a multimodal template; lf-assistant trains text models only. Use a text "
                            "model and its template (e.g. qwen3, llama3, gemma3).")
        close = difflib.get_close_matches(name, [*TEMPLATES, *MULTIMODAL_TEMPLATES], n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(close)}?" if close else ""
        raise DataError(f"Unknown template {name!r}.{hint} `lf-assistant data templates` lists all "
                        f"{len(TEMPLATES)}; template: auto uses the model's own chat template.")
    if tool_format is not None:
        check_tool_format(tool_format)
    template = template.with_settings(default_system=default_system, enable_thinking=enable_thinking,
                                      preserve_thinking=preserve_thinking, tool_format=tool_format,
                                      allow_special_tokens_in_text=allow_special_tokens_in_text)
    return template.bind(tokenizer) if tokenizer is not None else template


def _auto(tokenizer, **settings) -> TokenizerTemplate:
    if tokenizer is None:
        raise DataError("template: auto uses the model's chat template, so it needs the model's tokenizer.")
    if not isinstance(getattr(tokenizer, "chat_template", None), str):
        raise DataError("The model has no chat template (a base model?). Set template to one of: "
                        f"{', '.join(TEMPLATES)} (e.g. default for a base model).")
    return TokenizerTemplate(tokenizer, **settings)


TEMPLATE_SETTING_KEYS: tuple[str, ...] = ("default_system", "enable_thinking", "preserve_thinking", "tool_format",
                                          "allow_special_tokens_in_text")


def template_settings(config) -> dict:
    """The get_template keyword arguments a training, inference or export config sets (LF's data keys)."""
    return {key: getattr(config, key) for key in TEMPLATE_SETTING_KEYS if hasattr(config, key)}


def template_problems(name: str | None, settings: dict) -> list[str]:
    """What is wrong with a config's template name and settings, as sentences (empty: nothing)."""
    problems = []
    if name and name != "auto" and name not in TEMPLATES:
        try:
            get_template(name)
        except DataError as exc:
            problems.append(str(exc))
    tool_format = settings.get("tool_format")
    if tool_format is not None:
        try:
            check_tool_format(tool_format)
        except DataError as exc:
            problems.append(str(exc))
        if name in (None, "", "auto"):
            problems.append("tool_format applies to a named template; template auto uses the model's own chat "
                            "template, tool format included. Set template to the model's family.")
    return problems


@lru_cache(maxsize=1)
def registry_control_tokens() -> tuple[str, ...]:
    """Every control token a registered template writes (what checks without a tokenizer look for)."""
    from engine.data.special_tokens import template_control_tokens

    return tuple(sorted({token for template in TEMPLATES.values() for token in template_control_tokens(template)}))
