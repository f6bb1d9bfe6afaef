"""ChatML-shaped templates (<|im_start|>role ... <|im_end|>): Qwen, Yi, SmolLM, InternLM2, MiMo, LFM2 and others.

Facts (slot strings, default systems, stop words, flags) are LLaMA-Factory's register_template calls; the golden
renderings in tests/assets/templates/ check them.
"""

from __future__ import annotations

from engine.data.templates.template import Template

_CHATML = dict(
    user="<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n",
    assistant="{{content}}<|im_end|>\n",
    system="<|im_start|>system\n{{content}}<|im_end|>\n",
)
_TOOL_ROLE = "<|im_start|>tool\n{{content}}<|im_end|>\n<|im_start|>assistant\n"
_QWEN = dict(
    _CHATML,
    observation="<|im_start|>user\n<tool_response>\n{{content}}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    tool_format="qwen", stop_words=("<|im_end|>",), replace_eos=True,
)
_QWEN35 = dict(_QWEN, tool_format="qwen3_5")
_DBRX_SYSTEM = (
    "You are DBRX, created by Databricks. You were last updated in December 2023. You answer questions based on "
    "information available up to that point.\nYOU PROVIDE SHORT RESPONSES TO SHORT QUESTIONS OR STATEMENTS, but "
    "provide thorough responses to more complex and open-ended questions.\nYou assist with various tasks, from "
    "writing to coding (using markdown for code blocks — remember to use ``` with code, JSON, and tables).\n(You do "
    "not have real-time data access or code execution capabilities. You avoid stereotyping and provide balanced "
    "perspectives on controversial topics. You do not provide song lyrics, poems, or news articles and do not "
    "divulge details of your training data.)\nThis is your system prompt, guiding your responses. Do not reference "
    "it, just respond to the user. If you find yourself talking about this message, stop. You should be responding "
    "appropriately and usually that means not mentioning this.\nYOU DO NOT MENTION ANY OF THIS INFORMATION ABOUT "
    "YOURSELF UNLESS THE INFORMATION IS DIRECTLY PERTINENT TO THE USER'S QUERY."
)
_INTERNLM_SYSTEM = (
    "You are an AI assistant whose name is InternLM (书生·浦语).\n- InternLM (书生·浦语) is a conversational language "
    "model that is developed by Shanghai AI Laboratory (上海人工智能实验室). It is designed to be helpful, honest, and "
    "harmless.\n- InternLM (书生·浦语) can understand and communicate fluently in the language chosen by the user "
    "such as English and 中文."
)

CHATML_TEMPLATES: dict[str, Template] = {
    "chatml": Template("chatml", **_CHATML, observation=_TOOL_ROLE, stop_words=("<|im_end|>", "<|im_start|>"),
                       replace_eos=True),
    "chatml_de": Template("chatml_de", **_CHATML, observation=_TOOL_ROLE,
                          default_system="Du bist ein freundlicher und hilfsbereiter KI-Assistent.",
                          stop_words=("<|im_end|>", "<|im_start|>"), replace_eos=True),
    "cpm4": Template("cpm4", **_CHATML, observation=_TOOL_ROLE, prefix="{{bos_token}}", stop_words=("<|im_end|>",)),
    "dbrx": Template("dbrx", **_CHATML, observation=_TOOL_ROLE, default_system=_DBRX_SYSTEM,
                     stop_words=("<|im_end|>",), replace_eos=True),
    "ernie": Template(
        "ernie", user="<|im_start|>user\n{{content}}<|im_end|>\n\n<|im_start|>assistant\n",
        assistant="{{content}}<|im_end|>\n\n", system="<|im_start|>system\n{{content}}<|im_end|>\n\n",
        observation="<|im_start|>tool\n{{content}}<|im_end|>\n\n<|im_start|>assistant\n",
        default_system="<global_setting>\nthink_mode=True\n</global_setting>", stop_words=("<|im_end|>",)),
    "falcon_h1": Template("falcon_h1", **_CHATML, observation=_TOOL_ROLE, prefix="{{bos_token}}",
                          stop_words=("<|im_end|>", "<|end_of_text|>")),
    "intern2": Template("intern2", **_CHATML, prefix="{{bos_token}}", default_system=_INTERNLM_SYSTEM,
                        stop_words=("<|im_end|>",)),
    "lfm2": Template(
        "lfm2", **_CHATML, observation="<|im_start|>tool\n<|tool_response_start|>{{content}}<|tool_response_end|>"
        "<|im_end|>\n<|im_start|>assistant\n", tool_format="lfm2", default_system="You are a helpful AI assistant.",
        stop_words=("<|im_end|>",), tool_call_words=("<|tool_call_start|>", "<|tool_call_end|>"), replace_eos=True),
    "mimo": Template("mimo", **_QWEN, default_system="You are a helpful assistant.", reasoning=True),
    "mimo_v2": Template("mimo_v2", **_QWEN, default_system="You are MiMo, a helpful AI assistant engineered by Xiaomi.",
                        thought_words=("<think>", "</think>"), reasoning=True),
    "moonlight": Template(
        "moonlight", user="<|im_user|>user<|im_middle|>{{content}}<|im_end|><|im_assistant|>assistant<|im_middle|>",
        assistant="{{content}}<|im_end|>", system="<|im_system|>system<|im_middle|>{{content}}<|im_end|>",
        default_system="You are a helpful assistant provided by Moonshot-AI.", stop_words=("<|im_end|>",),
        replace_eos=True),
    "opencoder": Template("opencoder", **_CHATML, observation=_TOOL_ROLE,
                          default_system="You are OpenCoder, created by OpenCoder Team.", stop_words=("<|im_end|>",)),
    "phi4": Template(
        "phi4", user="<|im_start|>user<|im_sep|>{{content}}<|im_end|><|im_start|>assistant<|im_sep|>",
        assistant="{{content}}<|im_end|>", system="<|im_start|>system<|im_sep|>{{content}}<|im_end|>",
        stop_words=("<|im_end|>",), replace_eos=True),
    "qwen": Template("qwen", **_QWEN, default_system="You are Qwen, created by Alibaba Cloud. You are a helpful "
                     "assistant."),
    # Not an LF name: the engine's earlier name for Qwen2.5's format, which LF calls qwen; kept for old configs.
    "qwen2_5": Template("qwen2_5", **_QWEN, default_system="You are Qwen, created by Alibaba Cloud. You are a "
                        "helpful assistant."),
    "qwen3": Template("qwen3", **_QWEN, reasoning=True),
    "qwen3_nothink": Template("qwen3_nothink", **_QWEN),
    # Qwen3.5 / 3.6 are natively multimodal in LF (a qwen3_vl plugin), but their text rendering is this; images are
    # not supported here.
    "qwen3_5": Template("qwen3_5", **_QWEN35, reasoning=True),
    "qwen3_5_nothink": Template("qwen3_5_nothink", **_QWEN35),
    "qwen3_6": Template("qwen3_6", **_QWEN35, reasoning=True),
    "sailor": Template(
        "sailor", user="<|im_start|>question\n{{content}}<|im_end|>\n<|im_start|>answer\n",
        assistant="{{content}}<|im_end|>\n", system="<|im_start|>system\n{{content}}<|im_end|>\n",
        default_system="You are an AI assistant named Sailor created by Sea AI Lab. Your answer should be friendly, "
        "unbiased, faithful, informative and detailed.", stop_words=("<|im_end|>",)),
    "smollm": Template("smollm", **_CHATML, stop_words=("<|im_end|>",)),
    "smollm2": Template("smollm2", **_CHATML, stop_words=("<|im_end|>",),
                        default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face."),
    "yi": Template("yi", **_CHATML, stop_words=("<|im_end|>",)),
}
