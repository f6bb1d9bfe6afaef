"""The Triton kernels compiled for a real GPU (skipped without CUDA/ROCm): fp32 and bf16 against the references.

Tolerances: fp32 1e-5 (summation order only; TF32 is off in the kernels). bf16: max |error| <= 1e-2 (outputs) and
2e-2 (gradients) of the reference's largest magnitude, i.e. one to three bf16 steps at the top of the range. An
elementwise relative test is wrong there: eager bf16 rounds after every op (RoPE: three roundings, the kernel one),
so entries that cancel to near zero differ by whole bf16 steps between two correct implementations.
"""

import pytest
import torch
import torch.nn.functional as F

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")]



def assert_close_for(dtype, got, want, bf16_share):
    if dtype == torch.float32:
        torch.testing.assert_close(got, want.to(got.dtype), atol=1e-5, rtol=1e-5)
        return
    scale = want.float().abs().max().clamp(min=1e-6)
    assert (got.float() - want.float()).abs().max() <= bf16_share * scale


def compare(kernel, reference, inputs, dtype):
    leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    ref_leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out, ref = kernel(*leaves), reference(*ref_leaves)
    out, ref = (out if isinstance(out, tuple) else (out,)), (ref if isinstance(ref, tuple) else (ref,))
    for got, want in zip(out, ref):
        assert_close_for(dtype, got, want, 1e-2)
    weights = [torch.randn(o.shape, device=o.device, dtype=o.dtype) for o in out]
    grads = torch.autograd.grad(out, [x for x in leaves if x.requires_grad], weights)
    ref_grads = torch.autograd.grad(ref, [x for x in ref_leaves if x.requires_grad], weights)
    for got, want in zip(grads, ref_grads):
        assert_close_for(dtype, got, want, 2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_elementwise_and_row_kernels(dtype):
    from engine.kernels.ops import cross_entropy, rms_norm, rope, swiglu

    dev = dict(device="cuda", dtype=dtype)
    compare(lambda x, w: rms_norm.rms_norm(x, w, backend="triton"), rms_norm.rms_norm_reference,
            [torch.randn(333, 4000, **dev), torch.randn(4000, **dev)], dtype)
    compare(lambda x, w: rms_norm.rms_norm(x, w, offset=1.0, cast="gemma", backend="triton"),
            lambda x, w: rms_norm.rms_norm_reference(x, w, offset=1.0, cast="gemma"),
            [torch.randn(333, 4000, **dev), torch.randn(4000, **dev)], dtype)
    compare(lambda g, u: swiglu.swiglu(g, u, "gelu_tanh", backend="triton"),
            lambda g, u: swiglu.swiglu_reference(g, u, "gelu_tanh"),
            [torch.randn(77, 3001, **dev), torch.randn(77, 3001, **dev)], dtype)
    q, k = torch.randn(2, 100, 12, 128, **dev).transpose(1, 2), torch.randn(2, 100, 4, 128, **dev).transpose(1, 2)
    cos, sin = torch.randn(1, 100, 64, **dev), torch.randn(1, 100, 64, **dev)  # partial rotary
    compare(lambda a, b: rope.rope(a, b, cos, sin, backend="triton"), lambda a, b: rope.rope_reference(a, b, cos, sin),
            [q, k], dtype)
    labels = torch.randint(0, 50000, (300,), device="cuda")
    labels[::7] = -100
    compare(lambda x: cross_entropy.cross_entropy(x, labels, backend="triton"),
            lambda x: cross_entropy.cross_entropy_reference(x, labels), [torch.randn(300, 50000, **dev) * 3], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_linear_cross_entropy(dtype):
    from engine.kernels.ops.fused_linear_ce import fused_linear_cross_entropy

    dev = dict(device="cuda", dtype=dtype)
    labels = torch.randint(0, 32000, (3000,), device="cuda")
    labels[:500] = -100
    compare(lambda h, w: fused_linear_cross_entropy(h, w, labels, reduction="mean"),
            lambda h, w: F.cross_entropy((h @ w.T).float(), labels),
            [torch.randn(3000, 512, **dev), torch.randn(32000, 512, **dev) * 0.05], dtype)


def test_gated_delta_rule_scan():
    from engine.kernels.ops.gated_delta_rule import chunk_gated_delta_rule

    dev = dict(device="cuda")
    inputs = [torch.randn(2, 300, 4, 128, **dev), torch.randn(2, 300, 4, 128, **dev),
              torch.randn(2, 300, 8, 128, **dev), F.logsigmoid(torch.randn(2, 300, 8, **dev) + 2),
              torch.rand(2, 300, 8, **dev)]
    compare(lambda *x: chunk_gated_delta_rule(*x, use_qk_l2norm_in_kernel=True, backend="triton")[0],
            lambda *x: chunk_gated_delta_rule(*x, use_qk_l2norm_in_kernel=True, backend="torch")[0],
            inputs, torch.float32)
