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


def gpt2_like(model_type: str, tmp_path=None):
    """A tiny 3-layer model whose decoder layers are not named `.layers.N.`: GPT-2 (transformer.h.N) or
    GPT-NeoX (gpt_neox.layers.N); saved to tmp_path as a model folder when given."""
    from transformers import AutoConfig, AutoModelForCausalLM

    keys = ({"n_layer": 3, "n_embd": 32, "n_head": 2, "n_positions": 64} if model_type == "gpt2" else
            {"num_hidden_layers": 3, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64})
    cfg = AutoConfig.for_model(model_type, vocab_size=64, bos_token_id=1, eos_token_id=2, **keys)
    if tmp_path is not None:
        cfg.save_pretrained(tmp_path)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg)


@pytest.mark.parametrize("model_type, prefix", [("gpt2", "transformer.h"), ("gpt_neox", "gpt_neox.layers")])
def test_layers_named_otherwise_train_as_in_llamafactory(demo_model_dir, model_type, prefix):
    from engine.methods.freeze import lf_layer_selection

    model = gpt2_like(model_type)
    names = [name for name, _ in model.named_parameters()]
    model = get_method("freeze").prepare(model, config(demo_model_dir, finetuning_type="freeze",
                                                       freeze_trainable_layers=1))
    last = {name for name in names if name.startswith(f"{prefix}.2.")}
    assert last and trained(model) == last  # the last of 3 layers, nothing else
    assert trained(model) == lf_layer_selection(names, [2], ["all"])
    first_two = get_method("freeze").prepare(gpt2_like(model_type), config(
        demo_model_dir, finetuning_type="freeze", freeze_trainable_layers=-2))
    assert {name for name in names if name.startswith((f"{prefix}.0.", f"{prefix}.1."))} == trained(first_two)


def test_gpt2_modules_are_checked_by_their_own_names_before_the_run(tmp_path):
    gpt2_like("gpt2", tmp_path)
    assert engine.validate(config(tmp_path, finetuning_type="freeze", freeze_trainable_layers=1,
                                  freeze_trainable_modules="attn,mlp")) == []
    problems = engine.validate(config(tmp_path, finetuning_type="freeze", freeze_trainable_layers=1,
                                      freeze_trainable_modules="self_attn"))
    assert problems == ["freeze_trainable_modules: self_attn is no module of this model's layers; they have: "
                        "attn, ln_1, ln_2, mlp (or all)."]
    model = get_method("freeze").prepare(gpt2_like("gpt2"), config(
        tmp_path, finetuning_type="freeze", freeze_trainable_layers=1, freeze_trainable_modules="mlp"))
    assert trained(model) == {f"transformer.h.2.mlp.{m}.{p}" for m in ("c_fc", "c_proj") for p in ("weight", "bias")}


def test_the_layer_list_is_the_one_as_long_as_the_model_is_deep():
    from engine.methods.freeze import layer_pattern

    # a vision tower with more blocks and more names than the 2 decoder layers
    names = [f"visual.blocks.{i}.{p}" for i in range(4) for p in ("attn.weight", "mlp.weight", "norm.weight")]
    names += [f"model.language_model.layers.{i}.{p}" for i in range(2) for p in ("self_attn.q.weight", "mlp.up.weight")]
    assert layer_pattern(names, 2).pattern == r"^model\.language_model\.layers\.(\d+)\."
    assert layer_pattern(names).pattern == r"^model\.language_model\.layers\.(\d+)\."  # no count: not the tower
    assert layer_pattern(["embed.weight", "head.weight"], 2) is None
    # a tower as deep as the decoder, with more names: still the decoder
    projections = ("q.weight", "k.weight", "v.weight")
    deep = [f"model.vision_tower.encoder.layers.{i}.{p}" for i in range(2) for p in projections]
    deep += [f"model.audio_tower.layers.{i}.{p}" for i in range(2) for p in projections]
    assert layer_pattern(deep + names, 2).pattern == r"^model\.language_model\.layers\.(\d+)\."
    assert layer_pattern(deep, 2).pattern == r"^model\.vision_tower\.encoder\.layers\.(\d+)\."  # nothing else


def test_a_model_without_numbered_layers_is_refused_by_name(demo_model_dir):
    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = type("Config", (), {"num_hidden_layers": 2})()
            self.body = torch.nn.Linear(4, 4)

    with pytest.raises(engine.ConfigError, match="this model has no numbered layers"):
        get_method("freeze").prepare(Flat(), config(demo_model_dir, finetuning_type="freeze",
                                                    freeze_trainable_layers=1))


def test_the_layer_count_is_read_alike_from_a_config_and_its_json():
    from types import SimpleNamespace

    from engine.methods.freeze import config_layer_count

    assert config_layer_count({"n_layer": 3}) == config_layer_count(SimpleNamespace(n_layer=3)) == 3
    assert config_layer_count({"num_layers": 5, "text_config": {"num_hidden_layers": 4}}) == 4  # the text part
    assert config_layer_count(SimpleNamespace(text_config=SimpleNamespace(num_hidden_layers=4))) == 4
    assert config_layer_count({"num_hidden_layers": True}) is None and config_layer_count({}) is None
