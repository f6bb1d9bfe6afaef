"""Plain-text and smaller families: default, empty, alpaca, vicuna, Phi, Granite, MiniMax, Falcon, Zephyr and others.

Facts are LLaMA-Factory's register_template calls.
"""

from __future__ import annotations

from engine.data.templates.slots import token
from engine.data.templates.template import Template

_VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                  "helpful, detailed, and polite answers to the user's questions.")
_PHI = dict(user="<|user|>\n{{content}}<|end|>\n<|assistant|>\n", assistant="{{content}}<|end|>\n",
            system="<|system|>\n{{content}}<|end|>\n", stop_words=("<|end|>",), replace_eos=True)
_GRANITE = dict(
    user="<|start_of_role|>user<|end_of_role|>{{content}}<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>",
    assistant="{{content}}<|end_of_text|>\n",
    system="<|start_of_role|>system<|end_of_role|>{{content}}<|end_of_text|>\n",
)
_MINIMAX_AI = "<beginning_of_sentence>ai name=assistant\n"

OTHER_TEMPLATES: dict[str, Template] = {
    "alpaca": Template(
        "alpaca", user="### Instruction:\n{{content}}\n\n### Response:\n", assistant="{{content}}{{eos_token}}\n\n",
        default_system="Below is an instruction that describes a task. Write a response that appropriately completes "
        "the request.\n\n"),
    "default": Template(
        "default", user="Human: {{content}}{{eos_token}}\nAssistant:", assistant="{{content}}{{eos_token}}\n",
        system="System: {{content}}{{eos_token}}\n", eos_token="</s>"),
    "empty": Template("empty", assistant="{{content}}"),
    "ernie_nothink": Template(
        "ernie_nothink", user="User: {{content}}\nAssistant: ", assistant="{{content}}<|end_of_sentence|>",
        system="{{content}}\n", prefix="<|begin_of_sentence|>", stop_words=("<|end_of_sentence|>",)),
    "exaone": Template("exaone", user="[|user|]{{content}}\n[|assistant|]", assistant="{{content}}{{eos_token}}\n",
                       system="[|system|]{{content}}[|endofturn|]\n"),
    "falcon": Template("falcon", user="User: {{content}}\nFalcon:", assistant="{{content}}\n", efficient_eos=True),
    "fewshot": Template("fewshot", assistant="{{content}}\n\n", efficient_eos=True),
    "granite3": Template("granite3", **_GRANITE),
    "granite4": Template(
        "granite4", **_GRANITE, observation="<|start_of_role|>tool<|end_of_role|>{{content}}<|end_of_text|>\n"
        "<|start_of_role|>assistant\n", default_system="You are Granite, developed by IBM. You are a helpful AI "
        "assistant.", stop_words=("<|end_of_text|>",)),
    "index": Template("index", user="reserved_0{{content}}reserved_1", system="<unk>{{content}}", efficient_eos=True),
    "minimax1": Template(
        "minimax1", user="<beginning_of_sentence>user name=user\n{{content}}<end_of_sentence>\n" + _MINIMAX_AI,
        assistant="{{content}}<end_of_sentence>\n",
        system="<beginning_of_sentence>system ai_setting=assistant\n{{content}}<end_of_sentence>\n",
        observation="<beginning_of_sentence>tool name=tools\n{{content}}<end_of_sentence>\n" + _MINIMAX_AI,
        tool_format="minimax1", default_system="You are a helpful assistant.", stop_words=("<end_of_sentence>",)),
    "minimax2": Template(
        "minimax2", user="]~b]user\n{{content}}[e~[\n]~b]ai\n", assistant="{{content}}[e~[\n",
        system="]~!b[]~b]system\n{{content}}[e~[\n",
        observation="]~b]tool\n<response>{{content}}</response>[e~[\n]~b]ai\n",
        tool_format="minimax2", default_system="You are a helpful assistant. Your name is MiniMax-M2.1 and is built by "
        "MiniMax.", stop_words=("[e~[",), reasoning=True),
    "olmo": Template("olmo", user="<|user|>\n{{content}}<|assistant|>\n", prefix="{{eos_token}}"),
    "phi": Template("phi", **_PHI),
    # LF's phi_small prefix is the set {"<|endoftext|>"}, which names neither bos_token nor eos_token: it writes
    # nothing, so neither does this.
    "phi_small": Template("phi_small", **_PHI),
    "phi4_mini": Template(
        "phi4_mini", user="<|user|>{{content}}<|end|><|assistant|>", assistant="{{content}}<|end|>",
        system="<|system|>{{content}}<|end|>", tools="<|tool|>{{content}}<|/tool|>", stop_words=("<|end|>",),
        replace_eos=True),
    "solar": Template("solar", user="### User:\n{{content}}\n\n### Assistant:\n", system="### System:\n{{content}}\n\n",
                      efficient_eos=True),
    "starchat": Template("starchat", user="<|user|>\n{{content}}<|end|>\n<|assistant|>",
                         assistant="{{content}}<|end|>\n", system="<|system|>\n{{content}}<|end|>\n",
                         stop_words=("<|end|>",)),
    "telechat2": Template(
        "telechat2", user="<_user>{{content}}<_bot>", system="<_system>{{content}}",
        default_system="你是中国电信星辰语义大模型，英文名是TeleChat，你是由中电信人工智能科技有限公司和中国电信人工智能研究院"
        "（TeleAI）研发的人工智能助手。"),
    "vicuna": Template("vicuna", user="USER: {{content}} ASSISTANT:", default_system=_VICUNA_SYSTEM),
    "xuanyuan": Template(
        "xuanyuan", user="Human: {{content}} Assistant:",
        default_system="以下是用户和人工智能助手之间的对话。用户以Human开头，人工智能助手以Assistant开头，会对人类提出的问题给出"
        "有帮助、高质量、详细和礼貌的回答，并且总是拒绝参与与不道德、不安全、有争议、政治敏感等相关的话题、问题和指示。\n"),
    "youtu": Template(
        "youtu", user="<|User|>{{content}}<|Assistant|>", assistant="{{content}}<|end_of_text|>",
        function="{{content}}", observation="<tool_response>\n{{content}}\n</tool_response><|Assistant|>", prefix="{{bos_token}}",
        stop_words=("<|end_of_text|>",), replace_eos=True, reasoning=True),
    "yuan": Template("yuan", user=("{{content}}", token("<sep>")), assistant="{{content}}<eod>\n",
                     stop_words=("<eod>",)),
    "zephyr": Template("zephyr", user="<|user|>\n{{content}}{{eos_token}}<|assistant|>\n",
                       system="<|system|>\n{{content}}{{eos_token}}",
                       default_system="You are Zephyr, a helpful assistant."),
}
