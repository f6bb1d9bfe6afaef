"""Chat templates by name: every text template LLaMA-Factory registers, rendering exactly as LLaMA-Factory does.

    from engine.data.templates import get_template, TEMPLATES, Template

    template = get_template("qwen3", tokenizer, enable_thinking=False)    # tokenizer optional for text
    template.render_turns(messages, system=None, tools=None)   # [(prompt text, answer text)] per assistant turn
    template.render(messages, system, tools)                   # the whole conversation as trained
    template.render(messages, add_generation_prompt=True)      # the chat prompt (messages end with a user turn)
    template.render_oneturn(messages)                          # (prompt, answer) of the last answer (DPO, chat)
    template.encode_multiturn(tokenizer, messages, system, tools) -> [(prompt_ids, answer_ids)]
    template.encode_oneturn(tokenizer, messages, system, tools)   -> (prompt_ids, answer_ids)

The ids equal LLaMA-Factory's Template.encode_multiturn / encode_oneturn after its get_template_and_fix_tokenizer:
every slot is tokenized on its own, {{bos_token}} / {{eos_token}} / {{token:...}} slots become single ids, and with
replace_eos the first stop word is the EOS. Text is the same slots joined, with special slots as their token strings
(bind a tokenizer, or call `with_tokens(bos, eos)`, for templates that write BOS/EOS).

Messages: LLaMA-Factory's internal form [{"role": "user" | "assistant" | "observation" | "function", "content"}],
alternating user-side / assistant-side, or the OpenAI-ish form (a leading "system" message, "tool" for results,
assistant messages with "tool_calls"), or sharegpt role names. `system` and `tools` (a JSON list of function
descriptions) are strings; a conversation's own system message is used when `system` is None.

Settings (LLaMA-Factory's data keys): `default_system` replaces the template's default system prompt;
`enable_thinking` True/False/None and `preserve_thinking` steer reasoning templates (see thinking.py); `tool_format`
replaces the tool format; `allow_special_tokens_in_text` lets control-token strings inside message text become
control tokens (by default they are encoded as the text they spell, see engine.data.special_tokens).

Multimodal templates (LF's vision/audio ones) are refused by name; "auto" uses the tokenizer's own chat template.
The golden renderings in tests/assets/templates/ come from LLaMA-Factory's own template code.
"""

from engine.data.auto_template import TokenizerTemplate
from engine.data.templates.registry import (MULTIMODAL_TEMPLATES, TEMPLATE_SETTING_KEYS, TEMPLATES, get_template,
                                           template_problems, template_settings)
from engine.data.templates.template import Template, normalize_messages

__all__ = ["MULTIMODAL_TEMPLATES", "TEMPLATES", "TEMPLATE_SETTING_KEYS", "Template", "TokenizerTemplate",
           "get_template", "normalize_messages", "template_problems", "template_settings"]
