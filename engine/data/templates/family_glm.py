"""GLM (ChatGLM3, GLM-4 and newer), DeepSeek, Hunyuan, Seed, Bailing and gpt-oss templates.

Most here use efficient_eos (no end token per answer: one EOS closes the sequence) and several reason in <think>.
Facts are LLaMA-Factory's register_template calls.
"""

from __future__ import annotations

from engine.data.templates.slots import token
from engine.data.templates.template import Template

_GLM4 = dict(
    user="<|user|>\n{{content}}<|assistant|>", assistant="\n{{content}}", system="<|system|>\n{{content}}",
    function="{{content}}", observation="<|observation|>\n{{content}}<|assistant|>", prefix="[gMASK]<sop>",
    tool_format="glm4", stop_words=("<|user|>", "<|observation|>"), efficient_eos=True,
)
_GLM47 = dict(_GLM4, tool_format="glm4_moe", thought_words=("<think>", "</think>"), reasoning=True,
              empty_thought="</think>")  # GLM-4.7 marks an empty thought with the closing word alone
_DEEPSEEK = dict(bos_token="<｜begin▁of▁sentence｜>", eos_token="<｜end▁of▁sentence｜>")
_DEEPSEEK3 = dict(_DEEPSEEK, user="<｜User｜>{{content}}<｜Assistant｜>", prefix="{{bos_token}}")
_SEED_USER = "{{bos_token}}user\n{{content}}{{eos_token}}{{bos_token}}assistant\n"
_SEED_SYSTEM = "{{bos_token}}system\n{{content}}{{eos_token}}"
_CODER_SYSTEM = (
    "You are an AI programming assistant, utilizing the {model} model, developed by {by}, and you only answer "
    "questions related to computer science. For politically sensitive questions, security and privacy issues, and "
    "other non-computer science questions, you will refuse to answer.\n"
)
_HY_NO = "<｜hy_place▁holder▁no▁{}｜>"

GLM_TEMPLATES: dict[str, Template] = {
    "aeva": Template("aeva", **_GLM47, default_system="You are an AI assistant named Aeva created by Zongzhi Lou. Your "
                     "answer should be friendly, unbiased, faithful, informative and detailed."),
    "bailing": Template(
        "bailing", user="<role>HUMAN</role>{{content}}<role>ASSISTANT</role>", system="<role>SYSTEM</role>{{content}}",
        observation="<role>OBSERVATION</role>{{content}}<role>ASSISTANT</role>", stop_words=("<|endoftext|>",),
        efficient_eos=True),
    "bailing_v2": Template(
        "bailing_v2", user="<role>HUMAN</role>{{content}}<|role_end|><role>ASSISTANT</role>",
        assistant="{{content}}<|role_end|>", system="<role>SYSTEM</role>{{content}}<|role_end|>",
        observation="<role>OBSERVATION</role>\n<tool_response>\n{{content}}\n</tool_response><|role_end|>"
        "<role>ASSISTANT</role>", tool_format="ling", stop_words=("<|endoftext|>",), efficient_eos=True),
    # ChatGLM3 inserts its role tokens by id and keeps "\n" a slot of its own (each slot is tokenized alone).
    "chatglm3": Template(
        "chatglm3", user=(token("<|user|>"), "\n", "{{content}}", token("<|assistant|>")),
        assistant=("\n", "{{content}}"), system=(token("<|system|>"), "\n", "{{content}}"), function="{{content}}",
        observation=(token("<|observation|>"), "\n", "{{content}}", token("<|assistant|>")),
        prefix=token("[gMASK]") + token("sop"), tool_format="glm4", stop_words=("<|user|>", "<|observation|>"),
        efficient_eos=True),
    "deepseek": Template("deepseek", user="User: {{content}}\n\nAssistant:", system="{{content}}\n\n",
                         prefix="{{bos_token}}", **_DEEPSEEK),
    "deepseek3": Template("deepseek3", **_DEEPSEEK3),
    "deepseekcoder": Template(
        "deepseekcoder", user="### Instruction:\n{{content}}\n### Response:", assistant="\n{{content}}\n<|EOT|>\n",
        prefix="{{bos_token}}", default_system=_CODER_SYSTEM.format(model="DeepSeek Coder", by="DeepSeek Company"),
        **_DEEPSEEK),
    "deepseekr1": Template("deepseekr1", **_DEEPSEEK3, reasoning=True),
    "glm4": Template("glm4", **_GLM4),
    "glm4_7": Template("glm4_7", **_GLM47),
    "glm4_moe": Template("glm4_moe", **dict(_GLM4, tool_format="glm4_moe"), reasoning=True),
    "glmz1": Template("glmz1", **_GLM4, reasoning=True),
    "gpt_oss": Template(
        "gpt_oss", user="<|start|>user<|message|>{{content}}<|end|><|start|>assistant",
        system="<|start|>system<|message|>{{content}}<|end|>",
        default_system="You are ChatGPT, a large language model trained by OpenAI.",
        thought_words=("<|channel|>analysis<|message|>", "<|end|><|start|>assistant<|channel|>final<|message|>"),
        efficient_eos=True, reasoning=True),
    "hunyuan": Template("hunyuan", user="{{content}}<|extra_0|>", assistant="{{content}}<|eos|>",
                        system="{{content}}<|extra_4|>", prefix="<|startoftext|>", stop_words=("<|eos|>",)),
    "hunyuan_small": Template(
        "hunyuan_small", user="<｜hy_User｜>{{content}}" + _HY_NO.format(8), assistant="{{content}}" + _HY_NO.format(2),
        system="{{content}}" + _HY_NO.format(3), prefix="<｜hy_begin▁of▁sentence｜>", stop_words=(_HY_NO.format(2),)),
    "hy3": Template("hy3", user="<｜hy_User｜>{{content}}<｜hy_Assistant｜>", assistant="{{content}}<｜hy_eos｜>",
                    prefix="{{bos_token}}", stop_words=("<｜hy_eos｜>",), thought_words=("<think>", "</think>"),
                    replace_eos=True, reasoning=True),
    "hy_dense_1_8b": Template(
        "hy_dense_1_8b", user="<｜hy_User｜>{{content}}", assistant="<｜hy_Assistant｜>{{content}}",
        system="{{content}}" + _HY_NO.format(3), prefix="{{bos_token}}", stop_words=(_HY_NO.format(2),),
        efficient_eos=True),
    "hy_dense_7b": Template("hy_dense_7b", user="{{content}}<|extra_0|>", system="{{content}}<|extra_4|>",
                            prefix="{{bos_token}}", stop_words=("<|eos|>",), efficient_eos=True),
    "seed_coder": Template(
        "seed_coder", user=_SEED_USER, system=_SEED_SYSTEM,
        default_system=_CODER_SYSTEM.format(model="Seed-Coder", by="ByteDance Seed") + "\n"),
    "seed_oss": Template("seed_oss", user=_SEED_USER, system=_SEED_SYSTEM,
                         function="{{bos_token}}\n{{content}}{{eos_token}}", tool_format="seed_oss",
                         thought_words=("<seed:think>", "</seed:think>"), reasoning=True),
}
