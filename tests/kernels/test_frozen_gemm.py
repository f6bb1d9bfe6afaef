"""Products with a frozen weight reordered once (engine/kernels/ops/frozen_gemm.py) equal the plain matmul, never
read a stale copy, stay within their memory budget, and are what a LoRA step on CPU actually runs."""

import pytest
import torch

from engine.kernels.ops import frozen_gemm

pytestmark = pytest.mark.skipif(not frozen_gemm.available(), reason="this torch has no oneDNN")


@pytest.fixture(autouse=True)
def fresh_cache():
    frozen_gemm.clear()
    frozen_gemm.set_budget(None)
    yield
    frozen_gemm.clear()
    frozen_gemm.set_budget(None)
    frozen_gemm.set_enabled(True)


def operands(rows=37, inputs=24, outputs=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, inputs, generator=g), torch.randn(outputs, inputs, generator=g),
            torch.randn(outputs, generator=g), torch.randn(rows, outputs, generator=g))


def test_products_equal_the_plain_matmul_and_the_copy_is_made_once():
    x, weight, bias, _ = operands()
    with torch.no_grad():
        torch.testing.assert_close(frozen_gemm.frozen_linear(x, weight, bias), torch.addmm(bias, x, weight.t()))
        torch.testing.assert_close(frozen_gemm.frozen_linear(x, weight), x @ weight.t())
        torch.testing.assert_close(frozen_gemm.frozen_linear(x[:5], weight), x[:5] @ weight.t())
        assert frozen_gemm.cached_bytes() == weight.numel() * 4  # one copy, reused for any number of rows


def test_a_weight_changed_in_place_is_never_read_from_a_stale_copy():
    x, weight, _, _ = operands(seed=1)
    with torch.no_grad():
        frozen_gemm.frozen_linear(x, weight)
        weight.mul_(-2.0)  # e.g. a merge writing into the base weight
        torch.testing.assert_close(frozen_gemm.frozen_linear(x, weight), x @ weight.t())
        assert frozen_gemm.cached_bytes() == weight.numel() * 4  # replaced, not added


def test_a_copy_goes_with_its_weight():
    x, weight, _, _ = operands(seed=2)
    with torch.no_grad():
        frozen_gemm.frozen_linear(x, weight)
    assert frozen_gemm.cached_bytes() > 0
    del weight
    assert frozen_gemm.cached_bytes() == 0


def test_past_the_budget_the_plain_matmul_runs():
    x, weight, bias, _ = operands(seed=3)
    small = torch.randn(8, weight.shape[1])
    frozen_gemm.set_budget(weight.numel() * 4 - 1)
    with torch.no_grad():
        torch.testing.assert_close(frozen_gemm.frozen_linear(x, weight, bias), torch.addmm(bias, x, weight.t()))
        assert frozen_gemm.cached_bytes() == 0
        frozen_gemm.frozen_linear(x, small)
        assert frozen_gemm.cached_bytes() == small.numel() * 4


@pytest.mark.parametrize("case", ["trains", "seen by autograd", "float64"])
def test_weights_that_train_and_products_autograd_sees_take_the_plain_matmul(case):
    x, weight, _, _ = operands(seed=4)
    if case == "trains":
        weight.requires_grad_()
    if case == "float64":
        x, weight = x.double(), weight.double()
    with torch.set_grad_enabled(case == "seen by autograd"):
        out = frozen_gemm.frozen_linear(x, weight)
    torch.testing.assert_close(out.detach(), (x @ weight.t()).detach())
    assert frozen_gemm.cached_bytes() == 0


def test_a_lora_step_on_cpu_runs_on_reordered_weights_and_trains_what_the_plain_path_trains(make_tiny_model):
    """The whole SFT loss and every adapter gradient, reordered products on vs off (the plain MKL matmul)."""
    import copy

    from engine.data.packing import PackedCollator
    from engine.training.loss import causal_lm_loss_sum
    from tests.kernels.test_training_paths import grads, lora_model, samples

    model = lora_model(make_tiny_model, "llama")
    plain = copy.deepcopy(model)
    batch = PackedCollator()(samples([17, 40, 9, 26]))
    loss, tokens = causal_lm_loss_sum(model, batch)
    (loss / tokens).backward()
    base = model.get_base_model()
    decoder_and_head = sum(m.weight.numel() for m in base.modules() if isinstance(m, torch.nn.Linear)
                           and not m.weight.requires_grad and m.weight.shape[0] > 16)
    assert frozen_gemm.cached_bytes() == 4 * decoder_and_head  # every base weight and the head, once

    frozen_gemm.set_enabled(False)
    expected, _ = causal_lm_loss_sum(plain, batch)
    (expected / tokens).backward()
    torch.testing.assert_close(loss, expected, atol=1e-4, rtol=1e-6)
    fast, reference = grads(model), grads(plain)
    assert fast.keys() == reference.keys() and fast
    for name, grad in reference.items():
        assert grad.abs().max() > 0, name
        torch.testing.assert_close(fast[name], grad, atol=1e-6, rtol=1e-4, msg=name)


def test_skinny_products_equal_the_plain_matmul_in_any_strides():
    """The adapters' rank-wide products (lora.py) through oneDNN: transposed views of both operands, as backward
    passes them; autograd-visible or disabled calls take the plain matmul."""
    g = torch.Generator().manual_seed(7)
    x, dy = torch.randn(300, 96, generator=g), torch.randn(300, 160, generator=g)
    a, b = torch.randn(8, 96, generator=g), torch.randn(160, 8, generator=g)
    z, dz = x @ a.t(), dy @ b
    cases = [(x, a), (dy, b.t()), (z.t(), dy.t()), (dz.t(), x.t()), (x[50:250], a)]
    for enabled, grad in ((True, False), (False, False), (True, True)):
        frozen_gemm.set_enabled(enabled)
        with torch.set_grad_enabled(grad):
            for left, right in cases:
                expected = left @ right.t()  # sums of up to 300 products: float rounding, relative to their size
                torch.testing.assert_close(frozen_gemm.skinny_product(left, right), expected, rtol=1e-5,
                                           atol=1e-6 * expected.abs().max().item())


@pytest.mark.parametrize("units", [True, False], ids=["bf16 units", "no bf16 units"])
def test_bf16_products_run_reordered_only_on_a_cpu_with_bf16_units(monkeypatch, units):
    """bf16 operands (the frozen base under bf16 autocast) use a reordered copy where the CPU has bf16 units,
    and the plain matmul elsewhere, where oneDNN would emulate bf16."""
    if units and not frozen_gemm._bf16_available():
        pytest.skip("this CPU has no bf16 units for oneDNN")  # the other case still runs here
    monkeypatch.setattr(frozen_gemm, "_bf16_available", lambda: units)
    x, weight, bias, _ = (t.bfloat16() for t in operands(seed=8))
    g = torch.Generator().manual_seed(9)
    x_t, a = torch.randn(96, 37, generator=g).bfloat16(), torch.randn(8, 96, generator=g).bfloat16()
    with torch.no_grad():
        want = torch.addmm(bias, x, weight.t())
        torch.testing.assert_close(frozen_gemm.frozen_linear(x, weight, bias), want)
        torch.testing.assert_close(frozen_gemm.skinny_product(x_t.t(), a), x_t.t() @ a.t())
    assert frozen_gemm.cached_bytes() == (weight.numel() * 2 if units else 0)
