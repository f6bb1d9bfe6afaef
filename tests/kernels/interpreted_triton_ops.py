"""Every Triton kernel, forward and backward, against its torch reference, on CPU under TRITON_INTERPRET=1.

Run by `test_triton_interpreter.py` in a fresh process: the interpreter only works when TRITON_INTERPRET=1 is set
before anything imports `triton` (its standard-library functions are jitted at import), and in a test session peft
or torch may already have imported it. Running this file directly also works: `pytest tests/kernels/interpreted_...`.

Shapes are small and deliberately awkward: sizes that are not powers of two, tails that do not fill a block,
non-contiguous inputs. fp32 must agree to 1e-5; bf16 to torch.testing's bf16 defaults (rtol 1.6e-2, atol 1e-5), and
bf16 gradients must be no worse than the eager bf16 module's (see `assert_no_worse_than_eager`).
"""

import os
import sys

if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
    raise RuntimeError("triton was imported before TRITON_INTERPRET=1: run this file in a fresh process "
                       "(tests/kernels/test_triton_interpreter.py does)")
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

from engine.kernels.ops.cross_entropy import cross_entropy, cross_entropy_reference  # noqa: E402
from engine.kernels.ops.fused_linear_ce import fused_linear_cross_entropy  # noqa: E402
from engine.kernels.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: E402
from engine.kernels.ops.rms_norm import rms_norm, rms_norm_reference  # noqa: E402
from engine.kernels.ops.rope import rope, rope_reference  # noqa: E402
from engine.kernels.ops.swiglu import swiglu, swiglu_reference  # noqa: E402

FP32 = dict(atol=1e-5, rtol=1e-5)


def grads(outputs, inputs, seed=1):
    """Gradients of sum(output * fixed random weights): a backward pass with a non-trivial incoming gradient."""
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    torch.manual_seed(seed)
    # randn(shape), not randn_like: the latter fills in memory order, so two outputs with the same values but
    # different layouts would get different incoming gradients
    weights = [torch.randn(o.shape, dtype=o.dtype) for o in outputs]
    return torch.autograd.grad(outputs, inputs, weights)


def assert_no_worse_than_eager(got, eager, truth):
    """bf16 gradients: the kernel's error against an fp32 computation is within the eager bf16 module's error.

    Elementwise closeness is the wrong test there: eager bf16 rounds after every op, so near-cancelling entries
    differ by several bf16 steps between two correct implementations.
    """
    kernel_error = (got.float() - truth).abs().max()
    eager_error = (eager.float() - truth).abs().max()
    assert kernel_error <= 1.5 * eager_error + 1e-3 * truth.abs().max(), (kernel_error, eager_error)


def leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


@pytest.mark.parametrize("shape", [(1, 1), (7, 37), (2, 3, 128), (5, 200)])
@pytest.mark.parametrize("cast,offset", [("llama", 0.0), ("gemma", 1.0)])
def test_rms_norm_matches_reference(shape, cast, offset):
    torch.manual_seed(0)
    x, w = leaves(torch.randn(shape), torch.randn(shape[-1]))
    y = rms_norm(x, w, 1e-6, offset=offset, cast=cast, backend="triton")
    y_ref = rms_norm_reference(x, w, 1e-6, offset=offset, cast=cast)
    torch.testing.assert_close(y, y_ref, **FP32)
    for got, want in zip(grads(y, [x, w]), grads(y_ref, [x, w])):
        torch.testing.assert_close(got, want, **FP32)


def test_rms_norm_bf16_and_promotion():
    torch.manual_seed(0)
    x = torch.randn(6, 40, dtype=torch.bfloat16, requires_grad=True)
    w_bf16 = torch.randn(40, dtype=torch.bfloat16, requires_grad=True)
    torch.testing.assert_close(rms_norm(x, w_bf16, backend="triton"), rms_norm_reference(x, w_bf16))
    # fp32 weight on bf16 input: the Llama module returns fp32 (torch promotion), so must the kernel. The normalised
    # row is still rounded to bf16 first, and the interpreter truncates fp32 -> bf16 where a GPU rounds to nearest:
    # bf16 tolerance.
    w_fp32 = torch.randn(40, requires_grad=True)
    y = rms_norm(x, w_fp32, backend="triton")
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, rms_norm_reference(x, w_fp32), atol=1e-5, rtol=1.6e-2)
    x32, w32 = leaves(x.float(), w_fp32)
    truth = grads(rms_norm_reference(x32, w32), [x32, w32])
    for got, eager in zip(grads(y, [x, w_fp32]), grads(rms_norm_reference(x, w_fp32), [x, w_fp32])):
        assert_no_worse_than_eager(got, eager, truth[0] if got.shape == x.shape else truth[1])


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("shape", [(3, 1037), (2, 5, 7)])  # 3111 and 70 elements: partial last block
def test_swiglu_matches_reference(activation, shape):
    torch.manual_seed(0)
    gate, up = leaves(torch.randn(shape) * 3, torch.randn(shape))
    y = swiglu(gate, up, activation, backend="triton")
    y_ref = swiglu_reference(gate, up, activation)
    torch.testing.assert_close(y, y_ref, **FP32)
    for got, want in zip(grads(y, [gate, up]), grads(y_ref, [gate, up])):
        torch.testing.assert_close(got, want, **FP32)


def test_swiglu_bf16():
    torch.manual_seed(0)
    gate, up = (torch.randn(4, 99, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    torch.testing.assert_close(swiglu(gate, up, backend="triton"), swiglu_reference(gate, up))
    gate32, up32 = leaves(gate.float(), up.float())
    truth = grads(swiglu_reference(gate32, up32), [gate32, up32])
    eager = grads(swiglu_reference(gate, up), [gate, up])
    for got, eager_grad, want in zip(grads(swiglu(gate, up, backend="triton"), [gate, up]), eager, truth):
        assert_no_worse_than_eager(got, eager_grad, want)


@pytest.mark.parametrize("rotary,head_dim", [(16, 16), (12, 20), (6, 24)])  # full, partial, partial
@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_rope_matches_reference(rotary, head_dim, unsqueeze_dim):
    torch.manual_seed(0)
    batch, seq, q_heads, k_heads = 2, 7, 3, 1
    # projections come out as [B, S, H, D]; Hugging Face transposes them to [B, H, S, D] (a non-contiguous view)
    q_base, k_base = torch.randn(batch, seq, q_heads, head_dim), torch.randn(batch, seq, k_heads, head_dim)
    q, k = leaves(q_base, k_base)
    q_in, k_in = (q.transpose(1, 2), k.transpose(1, 2)) if unsqueeze_dim == 1 else (q, k)
    cos, sin = torch.randn(batch, seq, rotary), torch.randn(batch, seq, rotary)
    out = rope(q_in, k_in, cos, sin, unsqueeze_dim, backend="triton")
    out_ref = rope_reference(q_in, k_in, cos, sin, unsqueeze_dim)
    for got, want in zip(out, out_ref):
        torch.testing.assert_close(got, want, **FP32)
    for got, want in zip(grads(out, [q, k]), grads(out_ref, [q, k])):
        torch.testing.assert_close(got, want, **FP32)


def test_rope_broadcast_cos_over_batch():
    torch.manual_seed(0)
    q, k = leaves(torch.randn(3, 4, 5, 8), torch.randn(3, 2, 5, 8))
    cos, sin = torch.randn(1, 5, 8), torch.randn(1, 5, 8)
    out, out_ref = rope(q, k, cos, sin, backend="triton"), rope_reference(q, k, cos, sin)
    for got, want in zip(out + grads(out, [q, k]), out_ref + grads(out_ref, [q, k])):
        torch.testing.assert_close(got, want, **FP32)


@pytest.mark.parametrize("rows,vocab", [(9, 37), (4, 5003)])  # 5003 > one 4096 block: two blocks, masked tail
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_reference(rows, vocab, reduction):
    torch.manual_seed(0)
    (logits,) = leaves(torch.randn(rows, vocab) * 4)
    labels = torch.randint(0, vocab, (rows,))
    labels[1] = -100
    loss = cross_entropy(logits, labels, reduction=reduction, backend="triton")
    loss_ref = cross_entropy_reference(logits, labels, reduction=reduction)
    torch.testing.assert_close(loss, loss_ref, **FP32)
    torch.testing.assert_close(grads(loss, [logits])[0], grads(loss_ref, [logits])[0], **FP32)


def test_cross_entropy_bf16_logits():
    torch.manual_seed(0)
    logits = (torch.randn(6, 300) * 4).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, 300, (6,))
    loss = cross_entropy(logits, labels, backend="triton")
    torch.testing.assert_close(loss, cross_entropy_reference(logits, labels))
    torch.testing.assert_close(grads(loss, [logits])[0], grads(cross_entropy_reference(logits, labels), [logits])[0])


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_fused_linear_cross_entropy_matches_unfused(reduction):
    torch.manual_seed(0)
    hidden, weight, bias = leaves(torch.randn(37, 24), torch.randn(101, 24) * 0.3, torch.randn(101))
    labels = torch.randint(0, 101, (37,))
    labels[::5] = -100
    loss = fused_linear_cross_entropy(hidden, weight, labels, bias=bias, chunk_size=8, reduction=reduction)
    loss_ref = F.cross_entropy(hidden @ weight.T + bias, labels, reduction=reduction)
    torch.testing.assert_close(loss, loss_ref, **FP32)
    for got, want in zip(grads(loss * 3, [hidden, weight, bias]), grads(loss_ref * 3, [hidden, weight, bias])):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("length,chunk", [(37, 16), (64, 32), (5, 16)])
def test_gated_delta_rule_triton_scan_matches_torch(length, chunk):
    torch.manual_seed(0)
    # K=20 and V=24 are not powers of two: the kernel pads its blocks to 32 and masks
    q, k = torch.randn(2, length, 2, 20), torch.randn(2, length, 2, 20)
    v, s0 = torch.randn(2, length, 4, 24), torch.randn(2, 4, 20, 24)
    g, beta = F.logsigmoid(torch.randn(2, length, 4)), torch.rand(2, length, 4)
    inputs = leaves(q, k, v, g, beta, s0)
    kwargs = dict(chunk_size=chunk, output_final_state=True, use_qk_l2norm_in_kernel=True)
    out = chunk_gated_delta_rule(*inputs[:5], initial_state=inputs[5], backend="triton", **kwargs)
    out_ref = chunk_gated_delta_rule(*inputs[:5], initial_state=inputs[5], backend="torch", **kwargs)
    for got, want in zip(out + grads(out, inputs), out_ref + grads(out_ref, inputs)):
        torch.testing.assert_close(got, want, **FP32)


@pytest.mark.parametrize("model_type", ["qwen3", "gemma3_text", "qwen3_5_text"])
def test_models_patched_with_triton_kernels_match_stock(model_type, make_tiny_model):
    """The kernels inside real decoders: llama-style and zero-centred norms, full and partial RoPE, GeGLU, the
    gated-delta-rule scan. Short sequences: the interpreter runs one Python call per program."""
    import copy

    from engine.kernels import apply_kernels

    stock = make_tiny_model(model_type)
    patched = copy.deepcopy(stock)
    kernels = "rms_norm,swiglu,rope,cross_entropy" + (",gated_delta_rule" if model_type == "qwen3_5_text" else "")
    plan = apply_kernels(patched, kernels, device="cpu")  # explicit + interpreter: the Triton backend
    assert set(plan.backends.values()) == {"triton"} and len(plan.applied) == len(kernels.split(","))
    ids = torch.randint(0, 101, (1, 8), generator=torch.Generator().manual_seed(0))
    runs = []
    for model in (stock, patched):
        out = model(input_ids=ids, labels=ids)
        runs.append((out.logits, out.loss, torch.autograd.grad(out.loss, list(model.parameters()))))
    (logits, loss, grads_got), (logits_ref, loss_ref, grads_ref) = runs[1], runs[0]
    torch.testing.assert_close(logits, logits_ref, **FP32)
    torch.testing.assert_close(loss, loss_ref, **FP32)
    for got, want in zip(grads_got, grads_ref):
        torch.testing.assert_close(got, want, **FP32)
