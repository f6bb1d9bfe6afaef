"""An Ollama Modelfile carrying the training chat template (pain point: the template is lost on the way to Ollama).

Ollama templates are Go templates, not Jinja. Rather than translate Jinja, the template is rendered on marker
messages and cut into its literal pieces (system block, user turn, assistant turn, generation prompt). The pieces
are kept only if they re-render the training template exactly on several conversations; otherwise the Modelfile
is written without TEMPLATE and says why, instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.messages import Message

_SYS, _U1, _A1, _U2 = "SYSMARK7f3a", "USERMARK7f3a", "ANSWERMARK7f3a", "USERTWOMARK7f3a"


@dataclass(frozen=True)
class ChatParts:
    """A chat format as literal pieces around the message contents."""

    prefix: str
    system_prefix: str
    system_suffix: str
    system_in_user: bool
    default_system: str
    user_prefix: str
    user_suffix: str
    assistant_prefix: str
    assistant_suffix: str
    generation_prompt: str

    def render(self, messages: list[dict], system: str | None = None) -> str:
        """What the pieces give for a conversation, with the generation prompt (as Ollama would render)."""
        system_text = system or self.default_system
        out = self.prefix
        if system_text and not self.system_in_user:
            out += self.system_prefix + system_text + self.system_suffix
        first_user = True
        for message in messages:
            if message["role"] == "user":
                lead = self.system_prefix + system_text + self.system_suffix \
                    if first_user and system_text and self.system_in_user else ""
                out += self.user_prefix + lead + message["content"] + self.user_suffix
                first_user = False
            elif message["role"] == "assistant":
                out += self.assistant_prefix + message["content"] + self.assistant_suffix
        return out + self.generation_prompt


def extract_parts(template) -> ChatParts | None:
    """The template's pieces, or None when it does not decompose into fixed pieces."""
    def render(messages, system=None, gen=False):
        messages = [{"role": r, "content": c} for r, c in messages]
        if not gen and hasattr(template, "render_history"):  # answers as a chat prompt shows them, not as trained
            return template.render_history(messages, system)
        return template.render(messages, system, add_generation_prompt=gen)

    try:
        only_user = render([("user", _U1)])
        with_gen = render([("user", _U1)], gen=True)
        with_answer = render([("user", _U1), ("assistant", _A1)])
        two_users = render([("user", _U1), ("assistant", _A1), ("user", _U2)])
        with_system = render([("user", _U1)], system=_SYS)
    except Exception:  # noqa: BLE001 - a template that cannot render markers has no fixed pieces
        return None
    if not with_gen.startswith(only_user):
        return None
    user_suffix = _after(only_user, _U1)
    generation_prompt = with_gen[len(only_user):]
    between = _between(with_answer, _U1, _A1)
    if not between.startswith(user_suffix):
        return None
    assistant_prefix, assistant_suffix = between[len(user_suffix):], _after(with_answer, _A1)
    user_prefix = _between(two_users, _A1, _U2)
    if not user_prefix.startswith(assistant_suffix):
        return None
    user_prefix = user_prefix[len(assistant_suffix):]
    head = only_user[:only_user.find(_U1)]
    at = head.rfind(user_prefix)
    if at < 0:
        return None
    # head = preamble + user_prefix + lead, where lead is a default system inside the first user turn (Llama 2)
    parts = _system_parts(head[:at], head[at + len(user_prefix):], with_system, user_prefix,
                          dict(user_prefix=user_prefix, user_suffix=user_suffix, assistant_prefix=assistant_prefix,
                               assistant_suffix=assistant_suffix, generation_prompt=generation_prompt))
    return parts if parts is not None and _reproduces(parts, template) else None


def _system_parts(preamble: str, lead: str, with_system: str, user_prefix: str, turns: dict) -> ChatParts | None:
    at = with_system.find(_SYS)
    if at < 0:
        return None
    before, after = with_system[:at], with_system[at + len(_SYS):]
    in_user = before.startswith(preamble + user_prefix) and _U1 in after and not after.startswith(user_prefix)
    if in_user:  # the system text opens the first user message, after its own prefix (Mistral: none, Llama 2)
        system_prefix, system_suffix = before[len(preamble + user_prefix):], after[:after.find(_U1)]
        if lead and not (lead.startswith(system_prefix) and lead.endswith(system_suffix)):
            return None
        default = lead[len(system_prefix):len(lead) - len(system_suffix)] if lead else ""
        return ChatParts(preamble, system_prefix, system_suffix, True, default, **turns)
    if lead:
        return None
    system_suffix = after[:after.find(_U1)]
    if not system_suffix.endswith(user_prefix):
        return None
    system_suffix = system_suffix[:len(system_suffix) - len(user_prefix)]
    if preamble.startswith(before) and preamble.endswith(system_suffix) and len(preamble) >= len(before) + len(
            system_suffix) and preamble != before:
        default = preamble[len(before):len(preamble) - len(system_suffix)]
        return ChatParts("", before, system_suffix, False, default, **turns)
    if before.startswith(preamble):
        return ChatParts(preamble, before[len(preamble):], system_suffix, False, "", **turns)
    return None


def _reproduces(parts: ChatParts, template) -> bool:
    conversations = [
        [{"role": "user", "content": "Hi"}],
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
         {"role": "user", "content": "What is 2 + 2?"}],
    ]
    for messages in conversations:
        for system in (None, "Answer briefly."):
            if parts.render(messages, system) != template.render(messages, system, add_generation_prompt=True):
                return False
    return True


def _after(text: str, marker: str) -> str:
    return text[text.find(marker) + len(marker):]


def _between(text: str, first: str, second: str) -> str:
    start = text.find(first) + len(first)
    return text[start:text.find(second, start)]


def _go_literal(text: str) -> str:
    return text.replace("{{", '{{ "{{" }}')


def go_template(parts: ChatParts, bos_token: str | None) -> str:
    """The pieces as an Ollama (Go) template; a leading BOS is left to the runtime, which adds it itself."""
    prefix = parts.prefix
    if bos_token and prefix.startswith(bos_token):
        prefix = prefix[len(bos_token):]
    system_block = _go_literal(parts.system_prefix) + "{{ $.System }}" + _go_literal(parts.system_suffix)
    if parts.system_in_user:
        head, user_lead = "", "{{ if and $first $.System }}" + system_block + "{{ end }}"
    else:
        head, user_lead = "{{ if .System }}" + system_block + "{{ end }}", ""
    return (_go_literal(prefix) + head + "{{ $first := true }}{{ range .Messages }}"
            + '{{ if eq .Role "user" }}' + _go_literal(parts.user_prefix) + user_lead + "{{ .Content }}"
            + _go_literal(parts.user_suffix) + "{{ $first = false }}"
            + '{{ else if eq .Role "assistant" }}' + _go_literal(parts.assistant_prefix) + "{{ .Content }}"
            + _go_literal(parts.assistant_suffix) + "{{ end }}{{ end }}" + _go_literal(parts.generation_prompt))


def write_modelfile(folder: Path, template, tokenizer, source: str = ".") -> Message | None:
    """Write <folder>/Modelfile whose FROM is `source` (the folder, or a GGUF file in it); returns a note when the
    chat template could not be carried over."""
    parts = extract_parts(template)
    stops = [w for w in dict.fromkeys([*getattr(template, "stop_words", ()), tokenizer.eos_token]) if w]
    lines = [f"# Ollama: run `ollama create <name> -f Modelfile` in this folder. Chat template: {template.name}.",
             f"FROM {source}"]
    note = None
    if parts is None or '"""' in go_template(parts, tokenizer.bos_token) + parts.default_system:
        note = Message("export.no_modelfile_template", f"the chat template {template.name!r} does not split into "
                       "fixed pieces, so the Modelfile has no TEMPLATE: add one by hand before `ollama create`.",
                       {"template": template.name})
        lines.append(f"# No TEMPLATE: {note.text}")
    else:
        lines.append(f'TEMPLATE """{go_template(parts, tokenizer.bos_token)}"""')
        if parts.default_system:
            lines.append(f'SYSTEM """{parts.default_system}"""')
    lines += [f"PARAMETER stop {_quote(word)}" for word in stops]
    (folder / "Modelfile").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return note


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
