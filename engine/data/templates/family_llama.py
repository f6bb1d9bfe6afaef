"""Llama 2/3/4, Mistral / Ministral, Gemma 1-4, Cohere, OpenChat and Breeze templates.

`system_in_user` marks LLaMA-Factory's Llama2Template (the system text opens the first user message). Gemma 3/4,
Llama 4, Mistral-Small and Ministral 3 carry a multimodal plugin in LF; their text rendering is this (no images).
Facts are LLaMA-Factory's; bos/eos here are only the family's usual tokens for rendering without a tokenizer.
"""

from __future__ import annotations

from engine.data.templates.template import Template

_LLAMA = dict(bos_token="<s>", eos_token="</s>")
_LLAMA2 = dict(_LLAMA, user="{{bos_token}}[INST] {{content}} [/INST]", system="<<SYS>>\n{{content}}\n<</SYS>>\n\n",
               system_in_user=True)
_HEADER = "<|start_header_id|>{role}<|end_header_id|>\n\n"
_LLAMA3 = dict(
    user=_HEADER.format(role="user") + "{{content}}<|eot_id|>" + _HEADER.format(role="assistant"),
    assistant="{{content}}<|eot_id|>", system=_HEADER.format(role="system") + "{{content}}<|eot_id|>",
    function="{{content}}<|eot_id|>",
    observation=_HEADER.format(role="ipython") + "{{content}}<|eot_id|>" + _HEADER.format(role="assistant"),
    prefix="{{bos_token}}", tool_format="llama3", stop_words=("<|eot_id|>", "<|eom_id|>"), replace_eos=True,
    bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>",
)
_LLAMA4_HEADER = "<|header_start|>{role}<|header_end|>\n\n"
_TEKKEN = dict(  # Mistral tokenizer v3 tekken and later: no spaces around [INST]
    _LLAMA, user="[INST]{{content}}[/INST]", system="{{content}}\n\n", function="[TOOL_CALLS]{{content}}{{eos_token}}",
    observation='[TOOL_RESULTS]{"content": {{content}}}[/TOOL_RESULTS]', prefix="{{bos_token}}",
    tool_format="mistral", system_in_user=True,
)
_GEMMA = dict(
    user="<start_of_turn>user\n{{content}}<end_of_turn>\n<start_of_turn>model\n",
    assistant="{{content}}<end_of_turn>\n", system="{{content}}\n\n",
    observation="<start_of_turn>tool\n{{content}}<end_of_turn>\n<start_of_turn>model\n", prefix="{{bos_token}}",
    stop_words=("<end_of_turn>",), replace_eos=True, system_in_user=True, bos_token="<bos>", eos_token="<eos>",
)
_GEMMA4 = dict(
    user="<|turn>user\n{{content}}<turn|>\n<|turn>model\n", assistant="{{content}}<turn|>\n",
    system="<|turn>system\n<|think|>{{content}}<turn|>\n",  # the thinking switch rides in every system turn
    function="<|tool>{{content}}<tool|>", observation="<|turn>tool\n{{content}}<turn|>\n<|turn>model\n",
    prefix="{{bos_token}}", tool_format="gemma4", default_system="You are a helpful assistant.",
    stop_words=("<turn|>",), thought_words=("<|channel>thought\n", "<channel|>"), replace_eos=True, reasoning=True,
    bos_token="<bos>", eos_token="<eos>",
)

LLAMA_TEMPLATES: dict[str, Template] = {
    "breeze": Template("breeze", user="[INST] {{content}} [/INST] ", prefix="{{bos_token}}", efficient_eos=True,
                       **_LLAMA),
    "cohere": Template(
        "cohere", user="<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{content}}<|END_OF_TURN_TOKEN|>"
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
        system="<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{content}}<|END_OF_TURN_TOKEN|>", prefix="{{bos_token}}"),
    "gemma": Template("gemma", **_GEMMA),
    "gemma2": Template("gemma2", **dict(_GEMMA, stop_words=("<eos>", "<end_of_turn>"), replace_eos=False),
                       efficient_eos=True),
    "gemma3": Template("gemma3", **_GEMMA),
    "gemma3n": Template("gemma3n", **_GEMMA),
    "gemma4": Template("gemma4", **_GEMMA4),
    "gemma4n": Template("gemma4n", **_GEMMA4),
    "llama2": Template("llama2", **_LLAMA2),
    "llama2_zh": Template("llama2_zh", **_LLAMA2, default_system="You are a helpful assistant. 你是一个乐于助人的助手。"),
    "llama3": Template("llama3", **_LLAMA3),
    "llama4": Template(
        "llama4", **dict(
            _LLAMA3,
            user=_LLAMA4_HEADER.format(role="user") + "{{content}}<|eot|>" + _LLAMA4_HEADER.format(role="assistant"),
            assistant="{{content}}<|eot|>", system=_LLAMA4_HEADER.format(role="system") + "{{content}}<|eot|>",
            function="{{content}}<|eot|>", observation=_LLAMA4_HEADER.format(role="ipython") + "{{content}}<|eot|>"
            + _LLAMA4_HEADER.format(role="assistant"), stop_words=("<|eot|>", "<|eom|>"))),
    "ministral": Template("ministral", **_TEKKEN),
    "ministral3": Template("ministral3", **_TEKKEN),
    # Mistral tokenizer v3 (Mistral-7B-Instruct-v0.3, Mixtral): spaces around [INST] and before the answer.
    "mistral": Template(
        "mistral", **dict(_TEKKEN, user="[INST] {{content}}[/INST]", assistant=" {{content}}{{eos_token}}",
                          function="[TOOL_CALLS] {{content}}{{eos_token}}",
                          observation='[TOOL_RESULTS] {"content": {{content}}}[/TOOL_RESULTS]')),
    # Mistral tokenizer v7 tekken: a real system turn, so not system_in_user.
    "mistral_small": Template(
        "mistral_small", **dict(_TEKKEN, system="[SYSTEM_PROMPT]{{content}}[/SYSTEM_PROMPT]", system_in_user=False)),
    "openchat": Template("openchat", user="GPT4 Correct User: {{content}}{{eos_token}}GPT4 Correct Assistant:",
                         prefix="{{bos_token}}"),
    "openchat-3.6": Template(
        "openchat-3.6", user=_HEADER.format(role="GPT4 Correct User") + "{{content}}<|eot_id|>"
        + _HEADER.format(role="GPT4 Correct Assistant"), prefix="{{bos_token}}", stop_words=("<|eot_id|>",)),
}
