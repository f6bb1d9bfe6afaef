"""The chunked gated delta rule against the token-by-token recurrence: forward, final state and every gradient."""

import pytest
import torch
import torch.nn.functional as F

from engine.kernels.ops.gated_delta_rule import chunk_gated_delta_rule, recurrent_gated_delta_rule_reference

TOL = dict(atol=2e-5, rtol=2e-5)  # fp32; the chunked form sums in a different order than the recurrence


def make_inputs(length, batch=2, k_heads=2, v_heads=4, k_dim=8, v_dim=6, seed=0):
    """Leaves shaped like GatedDeltaNet's call: q/k [B,T,Hk,K], v [B,T,Hv,V], g/beta [B,T,Hv], state [B,Hv,K,V]."""
    generator = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=generator)  # noqa: E731
    tensors = (rand(batch, length, k_heads, k_dim), rand(batch, length, k_heads, k_dim),
               rand(batch, length, v_heads, v_dim), F.logsigmoid(rand(batch, length, v_heads) + 2),
               torch.rand(batch, length, v_heads, generator=generator), rand(batch, v_heads, k_dim, v_dim))
    return [t.requires_grad_() for t in tensors]


def weighted_grads(outputs, inputs):
    weights = [torch.randn(o.shape, generator=torch.Generator().manual_seed(7)) for o in outputs]
    return torch.autograd.grad(outputs, inputs, weights, allow_unused=True)


@pytest.mark.parametrize("length", [1, 17, 70])
@pytest.mark.parametrize("chunk_size", [4, 16, 64])
def test_chunked_matches_recurrent_forward_and_gradients(length, chunk_size):
    inputs = make_inputs(length)
    kwargs = dict(initial_state=inputs[5], output_final_state=True, use_qk_l2norm_in_kernel=True)
    out, state = chunk_gated_delta_rule(*inputs[:5], chunk_size=chunk_size, backend="torch", **kwargs)
    ref_out, ref_state = recurrent_gated_delta_rule_reference(*inputs[:5], **kwargs)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(state, ref_state, **TOL)
    got = weighted_grads((out, state), inputs)
    want = weighted_grads((ref_out, ref_state), inputs)
    for name, g, w in zip(("q", "k", "v", "g", "beta", "initial_state"), got, want):
        torch.testing.assert_close(g, w, **TOL, msg=lambda m, name=name: f"d{name}: {m}")


def test_without_l2norm_initial_state_or_final_state():
    """The other call shape: no state in, none out, raw (unnormalised) q and k, equal head counts."""
    q, k, v, g, beta, _ = make_inputs(23, k_heads=3, v_heads=3, k_dim=5, v_dim=5)
    q, k = q * 0.3, k * 0.3  # unnormalised keys must stay small for the recurrence to be stable
    out, state = chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=8, backend="torch")
    ref_out, _ = recurrent_gated_delta_rule_reference(q, k, v, g, beta)
    assert state is None
    torch.testing.assert_close(out, ref_out, **TOL)
    for got, want in zip(weighted_grads((out,), [q, k, v, g, beta]), weighted_grads((ref_out,), [q, k, v, g, beta])):
        torch.testing.assert_close(got, want, **TOL)


def test_matches_transformers_chunked_fallback():
    """Same numbers as the torch fallback that Qwen3.5 uses without `fla`, so patching changes no result."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

    q, k, v, g, beta, s0 = make_inputs(50)
    kwargs = dict(initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    ours = chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64, backend="torch", **kwargs)
    theirs = torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, chunk_size=64, **kwargs)
    for got, want in zip(ours, theirs):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_packed_sequences_restart_the_state():
    """cu_seqlens: each packed sequence gives what it gives alone (transformers' fallback refuses this input)."""
    lengths = [5, 19, 12]
    pieces = [make_inputs(n, batch=1, seed=i) for i, n in enumerate(lengths)]
    packed = [torch.cat([p[i] for p in pieces], dim=1 if i < 5 else 0).detach().requires_grad_() for i in range(6)]
    cu_seqlens = torch.tensor([0, 5, 24, 36])
    out, states = chunk_gated_delta_rule(*packed[:5], chunk_size=8, initial_state=packed[5], output_final_state=True,
                                         use_qk_l2norm_in_kernel=True, cu_seqlens=cu_seqlens, backend="torch")
    assert out.shape[1] == sum(lengths) and states.shape[0] == len(lengths)
    for i, piece in enumerate(pieces):
        alone, state = recurrent_gated_delta_rule_reference(*piece[:5], initial_state=piece[5],
                                                            output_final_state=True, use_qk_l2norm_in_kernel=True)
        torch.testing.assert_close(out[:, cu_seqlens[i]:cu_seqlens[i + 1]], alone, **TOL)
        torch.testing.assert_close(states[i:i + 1], state, **TOL)


def test_bf16_inputs_keep_their_dtype():
    q, k, v, g, beta, _ = make_inputs(9)
    out, _ = chunk_gated_delta_rule(q.bfloat16(), k.bfloat16(), v.bfloat16(), g, beta.bfloat16(), chunk_size=4,
                                    use_qk_l2norm_in_kernel=True, backend="torch")
    ref, _ = recurrent_gated_delta_rule_reference(q, k, v, g, beta, use_qk_l2norm_in_kernel=True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=5e-2, rtol=5e-2)


def test_patched_linear_attention_layer_keeps_packed_sequences_apart(make_tiny_model):
    """A Qwen3.5 GatedDeltaNet layer on two packed sequences (cu_seq_lens_q) = the layer on each alone.

    Stock transformers refuses this input without `fla`; the patch handles both the convolution and the rule.
    """
    from engine.kernels import apply_kernels

    model = make_tiny_model("qwen3_5_text")
    apply_kernels(model, "gated_delta_rule", device="cpu", backend="torch")
    layer = model.model.layers[0].linear_attn
    generator = torch.Generator().manual_seed(0)
    first, second = torch.randn(1, 11, 48, generator=generator), torch.randn(1, 70, 48, generator=generator)
    packed = layer(torch.cat([first, second], dim=1), cu_seq_lens_q=torch.tensor([0, 11, 81], dtype=torch.int32))
    alone = torch.cat([layer(first), layer(second)], dim=1)
    torch.testing.assert_close(packed, alone, **TOL)
    mixed = layer(torch.cat([first, second], dim=1))  # without the boundaries the second sequence sees the first
    assert not torch.allclose(mixed[:, 11:], alone[:, 11:], atol=1e-3)
