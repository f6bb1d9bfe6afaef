"""The fast CPU training paths (engine/kernels/training_paths.py) train exactly what the stock modules train.

Each fused op is checked against its definition in float64 (gradcheck) and against the Hugging Face / PEFT
module it replaces; the whole SFT loss of LoRA models of every switched family is checked against the
unoptimised path (stock modules, the attention mask, full logits and F.cross_entropy), padded and packed.
"""

import copy
import random

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model

from engine.data import SFTCollator
from engine.data.packing import PackedCollator
from engine.kernels.ops.eager_fused import rms_norm_fewer_passes, rope_fewer_passes
from engine.kernels.ops.lora import lora_linear, lora_swiglu_mlp
from engine.kernels.training_paths import use_fast_training_paths
from engine.training.loss import causal_lm_loss_sum, model_inputs, shift_labels

FAMILIES = ("llama", "qwen2", "qwen3", "mistral")


def f64(*shape, generator):
    return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_()


def test_lora_linear_matches_its_definition_in_float64():
    g = torch.Generator().manual_seed(0)
    x, a, b = f64(2, 5, 7, generator=g), f64(3, 7, generator=g), f64(6, 3, generator=g)
    weight, bias = torch.randn(6, 7, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda *t: lora_linear(*t[:1], weight, bias, *t[1:], 0.7), (x, a, b))
    expected = x @ weight.T + bias + 0.7 * (x @ a.T) @ b.T
    torch.testing.assert_close(lora_linear(x, weight, bias, a, b, 0.7), expected)


def test_lora_swiglu_mlp_matches_its_definition_in_float64():
    g = torch.Generator().manual_seed(1)
    hidden, inner = 6, 10
    x = f64(3, 4, hidden, generator=g)
    frozen = {name: torch.randn(shape, generator=g, dtype=torch.float64)
              for name, shape in (("wg", (inner, hidden)), ("wu", (inner, hidden)), ("wd", (hidden, inner)),
                                  ("bd", (hidden,)))}
    adapters = [f64(2, hidden, generator=g), f64(inner, 2, generator=g), f64(3, hidden, generator=g),
                f64(inner, 3, generator=g), f64(2, inner, generator=g), f64(hidden, 2, generator=g)]

    def mlp(x, ag, bg, au, bu, ad, bd):
        return lora_swiglu_mlp(x, (frozen["wg"], None, ag, bg, 0.5), (frozen["wu"], None, au, bu, 2.0),
                               (frozen["wd"], frozen["bd"], ad, bd, 1.5))

    def definition(x, ag, bg, au, bu, ad, bd):
        gate = x @ frozen["wg"].T + 0.5 * (x @ ag.T) @ bg.T
        up = x @ frozen["wu"].T + 2.0 * (x @ au.T) @ bu.T
        h = F.silu(gate) * up
        return h @ frozen["wd"].T + frozen["bd"] + 1.5 * (h @ ad.T) @ bd.T

    assert torch.autograd.gradcheck(mlp, (x, *adapters))
    torch.testing.assert_close(mlp(x, *adapters), definition(x, *adapters))


def test_rms_norm_and_rope_match_the_hugging_face_functions():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

    g = torch.Generator().manual_seed(2)
    norm = LlamaRMSNorm(8, eps=1e-5).double()
    with torch.no_grad():
        norm.weight.normal_(generator=g)
    x = f64(2, 3, 8, generator=g)
    assert torch.autograd.gradcheck(lambda x, w: rms_norm_fewer_passes(x, w, 1e-5), (x, norm.weight))
    torch.testing.assert_close(rms_norm_fewer_passes(x, norm.weight, 1e-5), norm(x))
    q, k = f64(2, 4, 5, 8, generator=g), f64(2, 2, 5, 8, generator=g)
    angles = torch.rand(2, 5, 8, generator=g, dtype=torch.float64) * 6
    cos, sin = angles.cos(), angles.sin()  # distinct halves: the rotation must pair the right features
    assert torch.autograd.gradcheck(lambda q, k: rope_fewer_passes(q, k, cos, sin), (q, k))
    for got, want in zip(rope_fewer_passes(q, k, cos, sin), apply_rotary_pos_emb(q, k, cos, sin)):
        torch.testing.assert_close(got, want)


def lora_model(make_tiny_model, family: str, dropout: float = 0.0):
    model = get_peft_model(make_tiny_model(family), LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout,
                                                               target_modules="all-linear"))
    torch.manual_seed(3)
    with torch.no_grad():  # B starts at zero: give the adapters something to contribute
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    return model.train()


def samples(lengths, vocab=101, seed=0):
    rng = random.Random(seed)
    out = []
    for n in lengths:
        ids = [rng.randrange(3, vocab) for _ in range(n)]
        out.append({"input_ids": ids, "labels": [-100] * (n // 3) + ids[n // 3:]})
    return out


def reference_loss(model, batch):
    """The unoptimised path: stock modules, the batch's attention mask, full logits, F.cross_entropy."""
    labels = shift_labels(batch["labels"])
    logits = model(**model_inputs(batch), use_cache=False).logits
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")


def grads(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("collate", [SFTCollator(pad_token_id=0), PackedCollator()], ids=["padded", "packed"])
def test_sft_loss_and_gradients_equal_the_unoptimised_path(make_tiny_model, family, collate):
    model = lora_model(make_tiny_model, family)
    reference = copy.deepcopy(model)
    batch = collate(samples([17, 40, 9, 26]))
    loss, tokens = causal_lm_loss_sum(model, batch)
    (loss / tokens).backward()
    assert use_fast_training_paths(model.get_base_model()) == ["lora_linear", "lora_mlp", "rms_norm", "rope"]
    if isinstance(collate, PackedCollator):  # the reference must see per-sample attention too
        from engine.data.packing import use_packed_attention

        use_packed_attention(reference.get_base_model())
    expected = reference_loss(reference, batch)
    (expected / tokens).backward()
    torch.testing.assert_close(loss, expected, atol=1e-4, rtol=1e-6)
    fast, stock = grads(model), grads(reference)
    assert fast.keys() == stock.keys() and len(fast) == 2 * 7 * 2  # A and B of 7 projections in 2 layers
    for name, grad in stock.items():
        assert grad.abs().max() > 0, name
        torch.testing.assert_close(fast[name], grad, atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("collate", [SFTCollator(pad_token_id=0), PackedCollator()], ids=["padded", "packed"])
def test_kernel_config_auto_on_a_cpu_trains_exactly_as_none(make_tiny_model, monkeypatch, collate):
    """auto picks the torch chunked head on a CPU; the loss then still takes the fast paths and the head only
    where a position has a target, as without a kernel plan, instead of a slower path of its own."""
    from engine.kernels import apply_kernels

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # a plain CPU machine
    model = lora_model(make_tiny_model, "llama")
    plain = copy.deepcopy(model)
    plan = apply_kernels(model, "auto", device="cpu")
    assert plan.fused_linear_ce and plan.backends["fused_linear_ce"] == "torch"
    batch = collate(samples([17, 40, 9, 26]))
    loss, tokens = causal_lm_loss_sum(model, batch, fused_linear_ce=plan)
    (loss / tokens).backward()
    assert model.get_base_model().__dict__.get("_lfa_fast_training_paths") == [
        "lora_linear", "lora_mlp", "rms_norm", "rope"]  # switched on by the loss itself
    expected, _ = causal_lm_loss_sum(plain, batch)
    (expected / tokens).backward()
    assert torch.equal(loss, expected)
    with_plan, without = grads(model), grads(plain)
    assert with_plan.keys() == without.keys() and len(with_plan) == 2 * 7 * 2
    for name, grad in without.items():
        assert torch.equal(with_plan[name], grad), name


def test_the_fast_paths_are_taken_and_save_fewer_activations(make_tiny_model, monkeypatch):
    """The fused functions run (not the stock modules), and the decoder keeps fewer activations for backward."""
    from engine.kernels.ops import eager_fused, lora

    calls = []
    for function in (lora._LoraLinear, lora._LoraSwiGLU, eager_fused._RMSNorm, eager_fused._Rope):
        monkeypatch.setattr(function, "forward", staticmethod(
            lambda ctx, *args, _run=function.forward, _name=function.__name__: calls.append(_name) or _run(ctx, *args)))

    def saved_bytes(model):
        """Bytes of the activations kept for backward (weights, which both keep, left out)."""
        weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        storages = {}

        def keep(tensor):
            if tensor.untyped_storage().data_ptr() not in weights:
                storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        ids = torch.tensor([samples([60], seed=5)[0]["input_ids"]] * 3)
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            model.get_base_model().model(input_ids=ids)
        return sum(storages.values())

    stock_bytes = saved_bytes(lora_model(make_tiny_model, "llama"))
    assert calls == []
    fast = lora_model(make_tiny_model, "llama")
    use_fast_training_paths(fast.get_base_model())
    fast_bytes = saved_bytes(fast)
    assert set(calls) == {"_LoraLinear", "_LoraSwiGLU", "_RMSNorm", "_Rope"}
    # 0.67 here (MLP 80 wide on a 48-wide model); SmolLM2-135M (1536 on 576): 79 -> 46 MiB per layer at 2048 tokens
    assert fast_bytes < 0.7 * stock_bytes, (fast_bytes, stock_bytes)


@pytest.mark.parametrize("changed_in_place", [False, True])
def test_a_normed_input_is_rebuilt_in_backward_not_kept(changed_in_place):
    """The LoRA functions keep the norm's input and 1/rms instead of the normed tensor, and rebuild it bit for bit;
    a normed tensor changed in place after the norm is kept as it is."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 9, 12, generator=g, requires_grad=True)
    norm_weight = torch.randn(12, generator=g)
    weight, a, b = torch.randn(12, 12, generator=g), torch.randn(3, 12, generator=g), torch.randn(12, 3, generator=g)
    mlp = [(torch.randn(*shape, generator=g), None, torch.randn(2, shape[1], generator=g),
            torch.randn(shape[0], 2, generator=g), 0.5) for shape in ((16, 12), (16, 12), (12, 16))]
    results = []
    for rebuilt in (True, False):
        params = [t.detach().clone().requires_grad_() for t in (x, a, b, *(p[k] for p in mlp for k in (2, 3)))]
        kept = set()

        def keep(tensor):
            kept.add(tensor.untyped_storage().data_ptr())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            normed = rms_norm_fewer_passes(params[0], norm_weight, 1e-5)
            if changed_in_place:
                normed.mul_(1.5)
            if not rebuilt:
                normed = normed.clone()  # no parts: kept as it is
            out = lora_linear(normed, weight, None, params[1], params[2], 2.0)
            adapters = params[3:]
            out = out + lora_swiglu_mlp(normed, *[(w, bias, adapters[2 * i], adapters[2 * i + 1], s)
                                                  for i, (w, bias, _, _, s) in enumerate(mlp)])
        assert (normed.untyped_storage().data_ptr() in kept) is (changed_in_place or not rebuilt)
        out.square().sum().backward()
        results.append([p.grad for p in params])
    for got, want in zip(*results):
        assert got.abs().max() > 0
        torch.testing.assert_close(got, want, atol=0, rtol=0)


@pytest.mark.parametrize("case", ["eval", "disabled adapter", "merged", "dropout"])
def test_stock_lora_runs_where_the_fast_path_would_differ(make_tiny_model, monkeypatch, case):
    """Eval, a disabled adapter (DPO's reference pass), a merged adapter and LoRA dropout keep PEFT's forward."""
    from engine.kernels.ops import lora

    calls = []
    for function in (lora._LoraLinear, lora._LoraSwiGLU):
        monkeypatch.setattr(function, "forward", staticmethod(
            lambda ctx, *args, _run=function.forward: calls.append(1) or _run(ctx, *args)))
    model = lora_model(make_tiny_model, "llama", dropout=0.1 if case == "dropout" else 0.0)
    reference = copy.deepcopy(model)
    use_fast_training_paths(model.get_base_model())
    ids = torch.tensor([samples([12])[0]["input_ids"]])
    outputs = []
    for m in (model, reference):
        if case == "eval":
            m.eval()
        if case == "merged":
            m.merge_adapter()
        with m.disable_adapter() if case == "disabled adapter" else torch.enable_grad():
            torch.manual_seed(0)  # the same dropout masks
            outputs.append(m(input_ids=ids).logits)
    assert calls == []
    # eval runs every stock module: bit for bit; in training the norms and RoPE still take their fast path
    tolerance = dict(atol=0, rtol=0) if case == "eval" else dict(atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(outputs[0], outputs[1], **tolerance)


def test_right_padded_batches_drop_the_mask_and_left_padded_keep_it(make_tiny_model):
    from engine.training.loss import causal_inputs

    model = make_tiny_model("llama")
    right = SFTCollator(pad_token_id=0)(samples([5, 9]))
    assert "attention_mask" not in causal_inputs(model, right)
    left = dict(right, attention_mask=right["attention_mask"].flip(-1))
    assert "attention_mask" in causal_inputs(model, left)
    assert "attention_mask" in causal_inputs(make_tiny_model("gemma"), right)  # not a plain decoder: kept


def test_gradient_checkpointing_recomputes_through_the_fast_paths(make_tiny_model):
    """Checkpointed layers rerun their forward in backward: the fused functions give the same gradients."""
    batch = PackedCollator()(samples([21, 34, 12]))
    results = []
    for checkpointing in (False, True):
        model = lora_model(make_tiny_model, "qwen3")
        if checkpointing:
            model.gradient_checkpointing_enable()
            model.enable_input_require_grads()
        loss, tokens = causal_lm_loss_sum(model, batch)
        (loss / tokens).backward()
        results.append((loss.detach(), grads(model)))
    torch.testing.assert_close(results[1][0], results[0][0])
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, atol=1e-7, rtol=1e-5, msg=name)


def bf16_lora_model(make_tiny_model, family: str):
    """As bf16: true trains on a CPU with bf16 units: the frozen base in bf16, the adapters kept in fp32."""
    from engine.training.session import keep_trainable_in_float32

    model = lora_model(make_tiny_model, family).to(torch.bfloat16)
    keep_trainable_in_float32(model)
    return model


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm())


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("collate", [SFTCollator(pad_token_id=0), PackedCollator()], ids=["padded", "packed"])
def test_bf16_autocast_takes_the_fast_paths_and_stays_as_close_to_fp32_as_stock(make_tiny_model, family, collate):
    """Under CPU bf16 autocast with a bf16 base, the fused functions run in bf16 (adapters rounded as autocast
    rounds them, gradients back in fp32); the loss and the adapters' gradients stay as close to the fp32 ones
    as the stock modules under autocast do."""
    from engine.kernels.ops import eager_fused, lora

    calls = set()
    fp32 = lora_model(make_tiny_model, family)
    fast, stock = bf16_lora_model(make_tiny_model, family), bf16_lora_model(make_tiny_model, family)
    batch = collate(samples([17, 40, 9, 26]))
    if isinstance(collate, PackedCollator):
        from engine.data.packing import use_packed_attention

        for m in (fp32, stock):
            use_packed_attention(m.get_base_model())
    losses = {}
    expected = reference_loss(fp32, batch)
    tokens = int((shift_labels(batch["labels"]) != -100).sum())
    (expected / tokens).backward()
    originals = {f: f.forward for f in (lora._LoraLinear, lora._LoraSwiGLU, eager_fused._RMSNorm, eager_fused._Rope)}
    try:
        for function, run in originals.items():
            function.forward = staticmethod(
                lambda ctx, *a, _run=run, _n=function.__name__: calls.add(_n) or _run(ctx, *a))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            losses["fast"], _ = causal_lm_loss_sum(fast, batch)
    finally:
        for function, run in originals.items():
            function.forward = staticmethod(run)
    assert calls == {"_LoraLinear", "_LoraSwiGLU", "_RMSNorm", "_Rope"}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses["stock"] = reference_loss(stock, batch)
    for loss in losses.values():
        (loss / tokens).backward()
    want = grads(fp32)
    for label, model in (("fast", fast), ("stock", stock)):
        got = grads(model)
        assert got.keys() == want.keys() and len(got) == 2 * 7 * 2
        assert all(g.dtype == torch.float32 for g in got.values())  # the adapters' own dtype
    loss_gap = {k: abs(float(v.detach()) - float(expected)) / float(expected) for k, v in losses.items()}
    assert loss_gap["fast"] < 0.01 and loss_gap["fast"] <= 2 * loss_gap["stock"] + 1e-3, loss_gap
    for name, grad in want.items():
        fast_error, stock_error = rel_error(grads(fast)[name], grad), rel_error(grads(stock)[name], grad)
        assert fast_error < 0.05 and fast_error <= 1.5 * stock_error + 0.01, (name, fast_error, stock_error)


@pytest.mark.parametrize("case", ["fp32 base under autocast", "fp16 autocast"])
def test_other_mixed_precision_keeps_the_stock_modules(make_tiny_model, case):
    """Only bf16 inputs under CPU bf16 autocast, with a base of the same dtype, take the bf16 fast paths."""
    model = lora_model(make_tiny_model, "llama") if "fp32" in case else bf16_lora_model(make_tiny_model, "llama")
    reference = copy.deepcopy(model)
    use_fast_training_paths(model.get_base_model())
    ids = torch.tensor([samples([12])[0]["input_ids"]])
    dtype = torch.float16 if "fp16" in case else torch.bfloat16
    outputs = []
    for m in (model, reference):
        with torch.autocast("cpu", dtype=dtype):
            outputs.append(m(input_ids=ids).logits)
    torch.testing.assert_close(outputs[0], outputs[1], atol=0, rtol=0)


def test_rms_norm_in_bf16_rounds_as_the_hugging_face_module():
    """The bf16 norm normalises in fp32 and rounds before the bf16 weight multiplies it, as LlamaRMSNorm does; its
    input gradient follows the same casts."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    g = torch.Generator().manual_seed(7)
    norm = LlamaRMSNorm(64, eps=1e-5)
    with torch.no_grad():
        norm.weight.normal_(generator=g)
    norm = norm.bfloat16().requires_grad_(False)
    x = (torch.randn(3, 50, 64, generator=g) * 4).bfloat16()
    upstream = torch.randn(3, 50, 64, generator=g).bfloat16()
    results = []
    for run in (lambda t: rms_norm_fewer_passes(t, norm.weight, 1e-5), norm):
        leaf = x.clone().requires_grad_()
        out = run(leaf)
        out.backward(upstream)
        assert out.dtype == leaf.grad.dtype == torch.bfloat16
        results.append((out, leaf.grad))
    (out, grad), (want_out, want_grad) = results
    assert (out != want_out).float().mean() < 0.01  # the sum of squares in another order flips a rare rounding
    torch.testing.assert_close(out, want_out)
    assert rel_error(grad, want_grad) < 0.01


def test_a_bf16_normed_input_is_kept_as_it_is():
    """In bf16 the LoRA functions keep the normed tensor itself (rebuilding it would cost a cast per consumer)."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 9, 12, generator=g).bfloat16().requires_grad_()
    norm_weight = torch.randn(12, generator=g).bfloat16()
    weight = torch.randn(12, 12, generator=g).bfloat16()
    a, b = (torch.randn(*shape, generator=g).requires_grad_() for shape in ((3, 12), (12, 3)))  # fp32 adapters
    kept = set()

    def keep(tensor):
        kept.add(tensor.untyped_storage().data_ptr())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        normed = rms_norm_fewer_passes(x, norm_weight, 1e-5)
        out = lora_linear(normed, weight, None, a, b, 2.0)
    assert normed.untyped_storage().data_ptr() in kept
    out.float().square().sum().backward()
    assert x.grad.dtype == torch.bfloat16 and a.grad.dtype == b.grad.dtype == torch.float32
    assert a.grad.abs().max() > 0 and b.grad.abs().max() > 0


def test_bf16_gradient_checkpointing_recomputes_through_the_fast_paths(make_tiny_model):
    """Checkpointed layers rerun their forward under the autocast state they were run with: in bf16 the fused
    functions run again and give the gradients of the run without checkpointing."""
    from engine.kernels.ops import lora

    batch = PackedCollator()(samples([21, 34, 12]))
    results, calls = [], []
    original = lora._LoraLinear.forward
    lora._LoraLinear.forward = staticmethod(lambda ctx, *a: calls.append(1) or original(ctx, *a))
    try:
        for checkpointing in (False, True):
            model = bf16_lora_model(make_tiny_model, "qwen3")
            if checkpointing:
                model.gradient_checkpointing_enable()
                model.enable_input_require_grads()
            calls.clear()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss, tokens = causal_lm_loss_sum(model, batch)
            (loss / tokens).backward()
            results.append((loss.detach(), grads(model), len(calls)))
    finally:
        lora._LoraLinear.forward = staticmethod(original)
    assert results[0][2] == 2 * 4 and results[1][2] == 2 * 2 * 4  # q, k, v, o per layer; again in backward
    torch.testing.assert_close(results[1][0], results[0][0])
    for name, grad in results[0][1].items():
        assert grad.dtype == torch.float32
        torch.testing.assert_close(results[1][1][name], grad, atol=1e-6, rtol=1e-3, msg=name)
