"""Thoughts in reasoning templates, with LLaMA-Factory's ReasoningTemplate semantics.

An answer without a thought gets an empty one (thought_words joined, e.g. "<think>\\n\\n</think>\\n\\n"):
- enable_thinking True: it is part of the answer, so it is trained;
- enable_thinking False: every thought is removed first, and the empty one goes into the prompt (not trained);
- enable_thinking None: thoughts stay, and the empty one goes into the prompt.
Training every turn (encode_multiturn) keeps earlier thoughts unless `discard` (LF's mask_history); the last-turn
view (encode_oneturn: DPO pairs, chat prompts) drops earlier thoughts unless preserve_thinking, and only the last
answer gets an empty thought. Non-reasoning templates pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from engine.errors import DataError

Turns = list[tuple[str, str]]


def empty_thought(template) -> str:
    """What an answer without a thought gets (GLM-4.7: only the closing word)."""
    if template.empty_thought is not None:
        return template.empty_thought
    return template.thought_words[0] + template.thought_words[1]


def has_thought(template, content: str) -> bool:
    """LF's test: either thought word (without its surrounding whitespace) appears in the content."""
    opening, closing = template.thought_words
    return opening.strip() in content or closing.strip() in content


def remove_thought(template, content: str) -> str:
    """The content without any thought block, and without the newlines that followed it."""
    opening, closing = (re.escape(word) for word in template.thought_words)
    return re.sub(f"{opening}(.*?){closing}", "", content, flags=re.DOTALL).lstrip("\n")


def _strip(template, turns: Turns, indices) -> Turns:
    turns = list(turns)
    for index in indices:
        role, content = turns[index]
        turns[index] = (role, remove_thought(template, content))
    return turns


def strip_if_disabled(template, turns: Turns) -> Turns:
    """With enable_thinking False, every answer's thought removed (no-op otherwise)."""
    if template.reasoning and template.enable_thinking is False:
        return _strip(template, turns, range(1, len(turns), 2))
    return turns


def history_view(template, turns: Turns) -> Turns:
    """A conversation ending with a user turn, as the chat prompt shows it: every answer is history, so its thought
    goes unless preserve_thinking (and always with enable_thinking False)."""
    if template.reasoning and (not template.preserve_thinking or template.enable_thinking is False):
        return _strip(template, turns, range(1, len(turns), 2))
    return turns


def multiturn(template, turns: Turns, elements_of: Callable[[Turns], list], discard: bool) -> list[tuple]:
    """(prompt elements, answer elements) for every turn (SFT)."""
    if len(turns) % 2:
        raise DataError("The conversation ends with a user-side message: every user or tool message needs the "
                        "answer that follows it (for a generation prompt use render(..., add_generation_prompt=True)).")
    if not turns:
        return []
    if template.reasoning:
        turns = strip_if_disabled(template, turns)
        if discard:
            turns = _strip(template, turns, range(1, len(turns) - 2, 2))
    groups = elements_of(turns)
    if template.reasoning:
        for index in [len(turns) - 2] if discard else range(0, len(turns), 2):
            if not has_thought(template, turns[index + 1][1]):
                if not template.enable_thinking:
                    groups[index] = groups[index] + [empty_thought(template)]
                else:
                    groups[index + 1] = [empty_thought(template)] + groups[index + 1]
    return [(groups[i], groups[i + 1]) for i in range(0, len(groups), 2)]


def oneturn(template, turns: Turns, elements_of: Callable[[Turns], list]) -> tuple[list, list]:
    """(prompt elements, answer elements) of the last message, everything before it being the prompt."""
    if not turns:
        raise DataError("A conversation needs at least one message.")
    if template.reasoning:
        if not template.preserve_thinking:
            turns = _strip(template, turns, range(1, len(turns) - 2, 2))
        if template.enable_thinking is False:
            turns = _strip(template, turns, [len(turns) - 1])
    groups = elements_of(turns)
    prompt = [element for group in groups[:-1] for element in group]
    answer = list(groups[-1])
    if template.reasoning and not has_thought(template, turns[-1][1]):
        if not template.enable_thinking:
            prompt.append(empty_thought(template))
        else:
            answer = [empty_thought(template)] + answer
    return prompt, answer
