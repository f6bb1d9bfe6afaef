"""Freeze tuning on models with numbered parts besides the layer number: LLaMA-Factory picks layer N's parameters
by ".N." anywhere in their names, so a mixture of experts whose experts are a list (experts.N, as transformers 4
and remote-code MoE models name them) or a layer of parallel sublayers (LongCat-Flash) would train parts outside
the chosen layers there. Such settings are refused by name, before the run and when the model loads; fused experts
(transformers 5) have no such parts and train as in LLaMA-Factory. Tiny models built from their configs."""

import json

import pytest
import torch

import engine
from engine.methods import get_method

from tests.engine.test_config_model_check import config

TINY = {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 64,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def qwen3_moe(expert_list: bool):
    """A 2-layer Qwen3-MoE with 4 experts; `expert_list`: its experts as a list of MLPs, as transformers 4 built it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(
        "qwen3_moe", num_hidden_layers=2, intermediate_size=32, moe_intermediate_size=16, num_experts=4,
        num_experts_per_tok=2, **TINY))
    if expert_list:
        for layer in model.model.layers:
            layer.mlp.experts = torch.nn.ModuleList(torch.nn.ModuleDict(
                {"gate_proj": torch.nn.Linear(32, 16, bias=False), "up_proj": torch.nn.Linear(32, 16, bias=False),
                 "down_proj": torch.nn.Linear(16, 32, bias=False)}) for _ in range(4))
    return model


def trained(model) -> set[str]:
    return {name for name, parameter in model.named_parameters() if parameter.requires_grad}


def test_experts_numbered_like_layers_are_refused_by_name(demo_model_dir):
    settings = config(demo_model_dir, finetuning_type="freeze", freeze_trainable_layers=1)
    with pytest.raises(engine.ConfigError) as refused:
        get_method("freeze").prepare(qwen3_moe(expert_list=True), settings)
    message = str(refused.value)
    assert message.startswith("freeze_trainable_layers: 1 is refused on this model.")
    assert "model.layers.0.mlp.experts.1.down_proj.weight" in message  # layer 0's expert 1: '.1.' in LF
    suggested = "input_layernorm,mlp,post_attention_layernorm,self_attn"
    assert f"freeze_trainable_modules: {suggested}" in message
    model = get_method("freeze").prepare(qwen3_moe(expert_list=True), config(
        demo_model_dir, finetuning_type="freeze", freeze_trainable_layers=1, freeze_trainable_modules=suggested))
    names = [name for name, _ in model.named_parameters()]
    assert trained(model) == {name for name in names if name.startswith("model.layers.1.")}
    assert "model.layers.1.mlp.experts.0.gate_proj.weight" in trained(model)


def test_fused_experts_train_only_the_chosen_layers(demo_model_dir):
    model = get_method("freeze").prepare(qwen3_moe(expert_list=False), config(
        demo_model_dir, finetuning_type="freeze", freeze_trainable_layers=1))
    names = [name for name, _ in model.named_parameters()]
    assert trained(model) == {name for name in names if name.startswith("model.layers.1.")}
    assert "model.layers.1.mlp.experts.gate_up_proj" in trained(model)


def test_parallel_sublayers_are_refused_before_the_run(tmp_path):
    from transformers import AutoConfig

    # LongCat-Flash (a MoE architecture): each layer holds self_attn.0/.1, mlps.0/.1, input_layernorm.0/.1.
    AutoConfig.for_model(
        "longcat_flash", num_layers=2, n_routed_experts=4, zero_expert_num=2, moe_topk=2, expert_ffn_hidden_size=16,
        ffn_hidden_size=16, q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
        **{**TINY, "head_dim": 8, "num_key_value_heads": 2}).save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "longcat_flash"
    problems = engine.validate(config(tmp_path, finetuning_type="freeze", freeze_trainable_layers=-1))
    assert len(problems) == 1 and problems[0].startswith("freeze_trainable_layers: -1 is refused on this model.")
    assert "model.layers.1.mlps.0.down_proj.weight" in problems[0]  # layer 1's sublayer 0: '.0.' in LF
    assert engine.validate(config(tmp_path, finetuning_type="freeze", freeze_trainable_layers=-1,
                                  freeze_trainable_modules="self_attn")) == []
