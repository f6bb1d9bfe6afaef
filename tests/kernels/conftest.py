"""Tiny models of every patched family, built from their config classes (random weights, no files)."""

import pytest
import torch

COMMON = dict(vocab_size=101, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=12)
LINEAR = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
              layer_types=["linear_attention", "full_attention"])


def tiny_model(model_type: str, seed: int = 0):
    import transformers as tf

    configs = {
        "llama": lambda: tf.LlamaConfig(**COMMON),
        "qwen2": lambda: tf.Qwen2Config(**COMMON),
        "qwen3": lambda: tf.Qwen3Config(**COMMON),
        "mistral": lambda: tf.MistralConfig(**COMMON),
        "gemma": lambda: tf.GemmaConfig(**COMMON),
        "gemma3_text": lambda: tf.Gemma3TextConfig(**COMMON, sliding_window=4),
        "qwen3_5_text": lambda: tf.Qwen3_5TextConfig(**COMMON, **LINEAR),
        "qwen3_next": lambda: tf.Qwen3NextConfig(**COMMON, **LINEAR, num_experts=4, num_experts_per_tok=2,
                                                 moe_intermediate_size=16, shared_expert_intermediate_size=16),
    }
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(configs[model_type]())
    with torch.no_grad():  # zero-centred norms start at 0 (= scale 1); random weights test the offset for real
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(0.0, 0.5)
    return model


@pytest.fixture()
def make_tiny_model():
    """tiny_model(model_type, seed=0): 2 layers, hidden 48, vocab 101; norm weights randomised."""
    return tiny_model
