"""A Template as a Jinja chat template (written into tokenizer_config.json on export), rendering chats as LF's chat.

The Jinja renders what `Template.render_oneturn` / `render(..., add_generation_prompt=True)` give: the default
system unless a leading system message replaces it, the prefix and system slot before the first message (or the
system text inside the first user message), each role's slot, and for reasoning templates the thoughts of earlier
answers removed (unless preserve_thinking) and the empty thought where LF puts it; `enable_thinking` may be passed
at render time, as with Qwen3's own template. Tool descriptions and function calls need the template's tool format
(Python), so the Jinja refuses them with raise_exception instead of rendering them wrongly.

Templates that insert tokens by id ({{token:...}}, ChatGLM3 and Yuan) cannot be written as text: `jinja_problem`
says so and export keeps the tokenizer's own chat template.
"""

from __future__ import annotations

import json

from engine.data.templates import slots, thinking
from engine.data.templates.slots import CONTENT
from engine.messages import Message


def jinja_problem(template) -> str | None:
    """Why `template` cannot be a Jinja chat template, or None."""
    problem = jinja_problem_message(template)
    return problem.text if problem else None


def jinja_problem_message(template) -> Message | None:
    """``jinja_problem`` as an engine.messages.Message."""
    tokens = sorted({element[1] for fmt in template._formats() for element in slots.parse(fmt)
                     if not isinstance(element, str) and element[0] == "token"})
    if tokens:
        return Message("template.not_jinja", f"template {template.name!r} inserts {', '.join(tokens)} by token id, "
                       "which a Jinja chat template (text, tokenized as a whole) cannot reproduce",
                       {"template": template.name, "tokens": ", ".join(tokens)})
    return None


def _lit(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _expr(template, fmt, content: str | None = "content") -> str:
    """A Jinja expression for the filled format; `content` is the Jinja expression that replaces {{content}}."""
    parts = []
    for element in slots.parse(fmt):
        if isinstance(element, str):
            before, found, after = element.partition(CONTENT)
            parts += [_lit(before)] if before else []
            parts += [content] if found and content else []
            parts += [_lit(after)] if after else []
        else:
            kind = element[0]
            known = template.bos_token if kind == "bos" else template.eos_token
            parts.append(_lit(known) if known is not None else f"({kind}_token or '')")
    return " + ".join(parts) or "''"


def _remove_thought_macro(template) -> str:
    opening, closing = template.thought_words
    return (
        "{%- macro remove_thought(text) -%}"
        "{%- set ns = namespace(out='', rest=text, done=false) -%}"
        f"{{%- for _ in range(text.count({_lit(opening)})) -%}}{{%- if not ns.done -%}}"
        f"{{%- set i = ns.rest.find({_lit(opening)}) -%}}"
        f"{{%- set j = ns.rest.find({_lit(closing)}, i + {len(opening)}) if i >= 0 else -1 -%}}"
        f"{{%- if i >= 0 and j >= 0 -%}}{{%- set ns.out = ns.out + ns.rest[:i] -%}}"
        f"{{%- set ns.rest = ns.rest[j + {len(closing)}:] -%}}"
        "{%- else -%}{%- set ns.done = true -%}{%- endif -%}{%- endif -%}{%- endfor -%}"
        "{{- (ns.out + ns.rest).lstrip('\\n') -}}"
        "{%- endmacro -%}"
    )


def _assistant_block(template) -> str:
    """Sets `lead`: the empty thought LF puts before the last answer's slot (in prompt or answer, same place)."""
    if not template.reasoning:
        return "{%- set lead = '' -%}"
    opening, closing = (_lit(word.strip()) for word in template.thought_words)
    history = "" if template.preserve_thinking else "{%- set content = remove_thought(content) -%}"
    return (
        "{%- set lead = '' -%}{%- if not loop.last -%}" + history +
        "{%- else -%}"
        "{%- if thinking is false -%}{%- set content = remove_thought(content) -%}{%- endif -%}"
        f"{{%- if {opening} not in content and {closing} not in content -%}}"
        f"{{%- set lead = {_lit(thinking.empty_thought(template))} -%}}{{%- endif -%}}"
        "{%- endif -%}"
    )


def to_jinja(template) -> str:
    """The Jinja source; check `jinja_problem(template)` first."""
    first_system = (f"{{%- if system_message and message['role'] == 'user' -%}}"
                    f"{{%- set content = {_expr(template, template.system, 'system_message')} + content -%}}"
                    "{%- endif -%}") if template.system_in_user else \
        f"{{%- if system_message -%}}{{{{ {_expr(template, template.system, 'system_message')} }}}}{{%- endif -%}}"
    parts = [
        _remove_thought_macro(template) if template.reasoning else "",
        "{%- if tools -%}{{- raise_exception('This chat template cannot describe tools; format them with the "
        "training template (lf-assistant chat).') -}}{%- endif -%}",
        f"{{%- set system_message = {_lit(template.default_system)} -%}}",
        "{%- if messages and messages[0]['role'] == 'system' -%}"
        "{%- if messages[0]['content'] -%}{%- set system_message = messages[0]['content'] -%}{%- endif -%}"
        "{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set loop_messages = messages -%}{%- endif -%}",
        ("{%- set thinking = enable_thinking if enable_thinking is defined else "
         f"{json.dumps(template.enable_thinking)} -%}}") if template.reasoning else "",
        "{%- for message in loop_messages -%}{%- set content = message['content'] or '' -%}",
        f"{{%- if loop.first -%}}{{{{ {_expr(template, template.prefix, None)} }}}}{first_system}{{%- endif -%}}",
        "{%- if message['role'] == 'user' -%}",
        f"{{{{ {_expr(template, template.user)} }}}}",
        "{%- elif message['role'] == 'assistant' and not message.get('tool_calls') -%}",
        _assistant_block(template),
        f"{{{{ lead + {_expr(template, template.assistant_format)} }}}}",
        "{%- elif message['role'] in ('tool', 'observation') -%}",
        f"{{{{ {_expr(template, template.observation_format)} }}}}",
        "{%- else -%}{{- raise_exception('This chat template cannot write ' + message['role'] + ' messages or tool "
        "calls; use the training template (lf-assistant chat).') -}}",
        "{%- endif -%}{%- endfor -%}",
        ("{%- if add_generation_prompt and not thinking -%}"
         f"{{{{ {_lit(thinking.empty_thought(template))} }}}}{{%- endif -%}}") if template.reasoning else "",
    ]
    return "".join(parts)
