"""kernel_config parsing, apply_kernels decisions and errors, and patched models of every family.

A patched model must give the unpatched model's outputs and gradients (fp32, 1e-5) AND must actually run the
kernels: the op functions are wrapped with call counters, so a patch that silently did nothing fails.
"""

import copy
import functools

import pytest
import torch

from engine.errors import ConfigError, DeviceError
from engine.kernels import KERNEL_NAMES, PATCHERS, apply_kernels, parse_kernel_config
from engine.kernels.module_patches import PATCHED_ATTR
from engine.kernels.ops import gated_delta_rule, rms_norm, rope, swiglu

LAYERS = 2  # tiny models (tests/kernels/conftest.py) have 2 decoder layers

def counted(monkeypatch, module, name):
    """Wrap module.<name> with a call counter; returns the dict holding the count."""
    calls = {"n": 0}
    original = getattr(module, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def loss_and_grads(model, ids):
    out = model(input_ids=ids, labels=ids)
    params = [p for p in model.parameters() if p.requires_grad]
    return out.logits.detach(), out.loss.detach(), torch.autograd.grad(out.loss, params)


def assert_same_run(got, want, tol=1e-5):
    torch.testing.assert_close(got[0], want[0], atol=tol, rtol=tol)
    torch.testing.assert_close(got[1], want[1], atol=tol, rtol=tol)
    for g, w in zip(got[2], want[2]):
        torch.testing.assert_close(g, w, atol=tol, rtol=tol)


# --- parsing ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value,expected", [
    (None, "none"), ("none", "none"), ({"name": "none"}, "none"), (False, "none"), ("", "none"),
    ("auto", "auto"), ({"name": "auto"}, "auto"), (True, "auto"), (" AUTO ", "auto"),
    ("rope, rms_norm", ["rms_norm", "rope"]), (["fused_linear_ce", "swiglu"], ["swiglu", "fused_linear_ce"]),
    ({"name": "rms_norm,swiglu,rope,fused_linear_ce"}, ["rms_norm", "swiglu", "rope", "fused_linear_ce"]),
])
def test_parse_kernel_config(value, expected):
    assert parse_kernel_config(value) == expected


@pytest.mark.parametrize("value,fragment", [
    ("rms_norm,flash_attn", "flash_attn"), ({"name": "auto", "chunk": 4}, "unknown keys"), ("auto,rope", "mixes")])
def test_parse_kernel_config_errors_name_the_valid_values(value, fragment):
    with pytest.raises(ConfigError, match=fragment) as info:
        parse_kernel_config(value)
    assert "rms_norm" in str(info.value) or "name" in str(info.value)


# --- decisions and errors -----------------------------------------------------------------------------------------

def test_auto_on_cpu_is_the_chunked_linear_ce_and_never_an_error(monkeypatch, make_tiny_model):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    model = make_tiny_model("qwen3")
    plan = apply_kernels(model, {"name": "auto"}, device="cpu")
    assert plan.applied == ["fused_linear_ce"] and plan.fused_linear_ce
    assert plan.backends == {"fused_linear_ce": "torch"}
    assert any("rms_norm" in note and "GPU" in note for note in plan.notes)
    assert not hasattr(model.model.norm, PATCHED_ATTR)  # nothing else touched


def test_auto_on_a_linear_attention_model_adds_the_chunked_delta_rule(monkeypatch, make_tiny_model):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    plan = apply_kernels(make_tiny_model("qwen3_5_text"), "auto", device="cpu")
    assert plan.applied == ["gated_delta_rule", "fused_linear_ce"]


def test_explicit_triton_kernel_without_gpu_is_a_device_error(monkeypatch, make_tiny_model):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(DeviceError, match="rms_norm.*GPU.*auto"):
        apply_kernels(make_tiny_model("llama"), "rms_norm,fused_linear_ce", device="cpu")


def test_require_logits_turns_fused_linear_ce_off(make_tiny_model):
    plan = apply_kernels(make_tiny_model("llama"), "auto", device="cpu", require_logits=True)
    assert not plan.fused_linear_ce and "fused_linear_ce" not in plan.applied
    assert any("logits" in note for note in plan.notes)
    with pytest.raises(ConfigError, match="logits"):
        apply_kernels(make_tiny_model("llama"), "fused_linear_ce", device="cpu", require_logits=True)


def test_kernel_that_does_not_fit_the_model_is_a_config_error(make_tiny_model):
    with pytest.raises(ConfigError, match="gated_delta_rule.*llama"):
        apply_kernels(make_tiny_model("llama"), "gated_delta_rule", device="cpu", backend="torch")


def test_unsupported_family(monkeypatch):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=50))
    plan = apply_kernels(model, "auto", device="cpu")
    assert plan.applied == ["fused_linear_ce"]
    assert any("gpt2" in note for note in plan.notes)
    with pytest.raises(ConfigError, match="gpt2.*supported: gemma"):
        apply_kernels(model, "rms_norm", device="cpu", backend="torch")


def test_none_leaves_the_model_alone(make_tiny_model):
    model = make_tiny_model("qwen3")
    plan = apply_kernels(model, {"name": "none"}, device="cpu")
    assert plan.applied == [] and not plan.fused_linear_ce
    assert not any(hasattr(m, PATCHED_ATTR) for m in model.modules())


# --- patched models -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3", "mistral", "gemma", "gemma3_text", "qwen3_5_text",
                                        "qwen3_next"])
def test_patched_family_matches_stock_and_runs_the_kernels(model_type, monkeypatch, make_tiny_model):
    stock = make_tiny_model(model_type)
    patched = copy.deepcopy(stock)
    ids = torch.randint(0, 101, (2, 13), generator=torch.Generator().manual_seed(1))
    want = loss_and_grads(stock, ids)
    calls = {name: counted(monkeypatch, module, f"{name}_reference") for name, module in (
        ("rms_norm", rms_norm), ("swiglu", swiglu), ("rope", rope))}
    calls["gated_delta_rule"] = counted(monkeypatch, gated_delta_rule, "_chunk_one")
    linear = model_type in ("qwen3_5_text", "qwen3_next")
    asked = ["rms_norm", "swiglu", "rope", "cross_entropy"] + (["gated_delta_rule"] if linear else [])
    plan = apply_kernels(patched, asked, device="cpu", backend="torch")
    assert plan.applied == [name for name in KERNEL_NAMES if name in asked]
    got = loss_and_grads(patched, ids)
    assert_same_run(got, want)
    assert calls["rms_norm"]["n"] >= 2 * LAYERS + 1
    assert calls["swiglu"]["n"] >= LAYERS - (1 if model_type == "qwen3_next" else 0)
    assert calls["rope"]["n"] == (1 if linear else LAYERS)
    assert calls["gated_delta_rule"]["n"] == (1 if linear else 0)
    # the stock model in the same process still runs stock code
    before = {name: c["n"] for name, c in calls.items()}
    loss_and_grads(stock, ids)
    assert {name: c["n"] for name, c in calls.items()} == before


def test_every_patcher_key_is_tested():
    tested = {"llama", "qwen2", "qwen3", "mistral", "gemma", "gemma3_text", "qwen3_5_text", "qwen3_next"}
    aliases = {"gemma3": "gemma3_text", "qwen3_5": "qwen3_5_text"}
    assert {aliases.get(key, key) for key in PATCHERS} == tested
    assert all(PATCHERS[alias] is PATCHERS[target] for alias, target in aliases.items())


def test_applying_twice_does_not_wrap_twice(monkeypatch, make_tiny_model):
    model = make_tiny_model("qwen3")
    ids = torch.randint(0, 101, (1, 9), generator=torch.Generator().manual_seed(2))
    apply_kernels(model, "rms_norm,rope", device="cpu", backend="torch")
    calls = counted(monkeypatch, rope, "rope_reference")
    apply_kernels(model, "rms_norm,rope", device="cpu", backend="torch")
    model(input_ids=ids)
    assert calls["n"] == LAYERS


def test_peft_model_and_gradient_checkpointing(monkeypatch, make_tiny_model):
    """LoRA adapters inside patched MLPs still get their gradients; checkpointed layers re-enter the overrides."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["gate_proj", "up_proj", "q_proj"], lora_dropout=0.0)
    stock = get_peft_model(make_tiny_model("qwen3"), lora)
    for name, param in stock.named_parameters():  # lora_B starts at 0: make the adapters do something
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.1)
    patched = copy.deepcopy(stock)
    ids = torch.randint(0, 101, (2, 11), generator=torch.Generator().manual_seed(3))
    plan = apply_kernels(patched, "rms_norm,swiglu,rope", device="cpu", backend="torch")
    assert plan.applied == ["rms_norm", "swiglu", "rope"]
    for model in (stock, patched):
        model.train()
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    want = loss_and_grads(stock, ids)
    calls = counted(monkeypatch, rope, "rope_reference")
    got = loss_and_grads(patched, ids)
    assert len(got[2]) == 2 * 3 * LAYERS  # lora_A and lora_B of 3 targets per layer
    assert_same_run(got, want)
    assert calls["n"] == 2 * LAYERS  # forward, then the recompute in backward
