"""Packed rows train exactly what padded batches train: same per-token loss, same gradients, no cross-sample attention.

Models are built in code (2 layers, hidden 64): Qwen3 and Llama, with SDPA (block-diagonal mask), per-sample SDPA
(``sdpa_packed``) and eager attention.
"""

import random

import pytest
import torch
import torch.nn.functional as F

from engine.data import IGNORE_INDEX, SFTCollator, encode_supervised
from engine.data.packing import PACKED_SDPA, PackedCollator, use_packed_attention
from engine.data.templates import get_template
from engine.training.loss import causal_lm_loss_sum, model_inputs, shift_labels

VOCAB = 512


def tiny_model(family: str, attn: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    config_cls, model_cls = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}[family]
    torch.manual_seed(0)
    config = config_cls(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                        attn_implementation="sdpa" if attn == PACKED_SDPA else attn)
    model = model_cls(config).float().train()
    if attn == PACKED_SDPA:
        assert use_packed_attention(model) == PACKED_SDPA
    return model


def random_samples(lengths, seed=0) -> list[dict]:
    rng = random.Random(seed)
    samples = []
    for n in lengths:
        ids = [rng.randrange(3, VOCAB) for _ in range(n)]
        samples.append({"input_ids": ids, "labels": [IGNORE_INDEX] * (n // 3) + ids[n // 3:]})
    return samples


def token_losses(model, batch) -> torch.Tensor:
    """Loss of every trained token, in reading order (row by row): what padded and packed must agree on."""
    labels = shift_labels(batch["labels"])
    logits = model(**model_inputs(batch), use_cache=False).logits
    losses = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="none")
    return losses[labels.flatten() != -100]


@pytest.mark.parametrize("family,attn", [("qwen3", "sdpa"), ("llama", "sdpa"), ("qwen3", "eager"),
                                         ("qwen3", PACKED_SDPA), ("llama", PACKED_SDPA)])
@pytest.mark.parametrize("lengths", [[17, 64, 5, 40, 33], [32, 32, 32]], ids=["mixed", "equal"])
def test_per_token_loss_is_the_same_packed_and_padded(family, attn, lengths):
    model = tiny_model(family, attn)
    samples = random_samples(lengths)
    padded = token_losses(model, SFTCollator(pad_token_id=0)(samples))
    packed = token_losses(model, PackedCollator()(samples))
    assert padded.shape == packed.shape and padded.numel() > 60
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=0)


def test_gradients_match_under_token_normalised_accumulation():
    """Two micro-batches normalised by the step's trained tokens, as the recipe does: same gradients either way.
    The loss function switches the sdpa model to per-sample attention at the first packed batch."""
    model = tiny_model("qwen3", "sdpa")
    micro_batches = [random_samples([30, 9, 51], seed=1), random_samples([12, 70], seed=2)]
    grads = {}
    for name, collate in (("padded", SFTCollator(pad_token_id=0)), ("packed", PackedCollator())):
        model.zero_grad(set_to_none=True)
        batches = [collate(mb) for mb in micro_batches]
        step_tokens = sum(int((b["labels"][:, 1:] != -100).sum()) for b in batches)
        for batch in batches:
            loss_sum, _ = causal_lm_loss_sum(model, batch)
            (loss_sum / step_tokens).backward()
        grads[name] = {n: p.grad.clone() for n, p in model.named_parameters()}
    assert model.config._attn_implementation == PACKED_SDPA
    for name, grad in grads["padded"].items():
        torch.testing.assert_close(grads["packed"][name], grad, atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("attn", ["sdpa", PACKED_SDPA])
def test_no_token_attends_across_a_sample_boundary(attn):
    model = tiny_model("qwen3", attn).eval()
    first, second = random_samples([24, 24], seed=3)
    changed_first = dict(first, input_ids=[(t * 7 + 1) % VOCAB for t in first["input_ids"]])

    def second_half_logits(collate, a):
        with torch.no_grad():
            batch = collate([a, second])
            return model(**model_inputs(batch), use_cache=False).logits[0, 24:]

    # Packed: rewriting the first sample leaves every logit of the second sample as it was.
    torch.testing.assert_close(second_half_logits(PackedCollator(), changed_first),
                               second_half_logits(PackedCollator(), first), atol=1e-6, rtol=0)

    # The same check on a naive concatenation (one sequence, positions 0..47) does see the change: the test can fail.
    def concatenated(features):
        row = PackedCollator()(features)
        return {k: v for k, v in row.items() if k != "position_ids"}

    diff = (second_half_logits(concatenated, changed_first) - second_half_logits(concatenated, first)).abs().max()
    assert diff > 1e-3


def test_parity_holds_for_samples_cut_by_cutoff_len(demo_model_dir):
    """Real encoding through the chat template, with cutoff_len short enough to truncate the long answers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(demo_model_dir)
    model = AutoModelForCausalLM.from_pretrained(demo_model_dir, dtype=torch.float32).train()
    long_answer = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)
    examples = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
                for q, a in (("Say hi.", "Hi!"), ("Tell me a long story.", long_answer), ("Count.", "1 2 3"))]
    samples = encode_supervised(examples, tokenizer, get_template("qwen", tokenizer), cutoff_len=48)
    assert samples.truncated >= 1 and max(len(s["input_ids"]) for s in samples) == 48
    padded = token_losses(model, SFTCollator(pad_token_id=tokenizer.pad_token_id)(samples))
    packed = token_losses(model, PackedCollator()(samples))
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=0)


def test_packed_attention_leaves_padded_batches_and_generation_as_sdpa_has_them():
    reference, switched = tiny_model("qwen3", "sdpa").eval(), tiny_model("qwen3", PACKED_SDPA).eval()
    padded = SFTCollator(pad_token_id=0)(random_samples([9, 30, 21], seed=4))
    with torch.no_grad():
        expected = reference(**model_inputs(padded)).logits
        torch.testing.assert_close(switched(**model_inputs(padded)).logits, expected, atol=1e-6, rtol=0)
    prompt = torch.tensor([random_samples([6], seed=5)[0]["input_ids"]])
    generate = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(switched.generate(prompt, **generate), reference.generate(prompt, **generate))


def test_packed_rows_skip_the_quadratic_mask(monkeypatch):
    """Per-sample attention reads no mask, so none is built for a packed row (O(T^2): 1.4 s at T=16k on CPU);
    padded batches still get SDPA's mask."""
    import transformers.masking_utils as masking

    built = []
    original = masking.sdpa_mask
    monkeypatch.setattr(masking, "sdpa_mask", lambda **kw: built.append(kw["q_length"]) or original(**kw))
    model = tiny_model("qwen3", PACKED_SDPA)
    samples = random_samples([20, 35, 11])
    packed_losses = token_losses(model, PackedCollator()(samples))
    assert built == []
    padded_losses = token_losses(model, SFTCollator(pad_token_id=0)(samples))
    assert built and built[0] == 35
    torch.testing.assert_close(packed_losses, padded_losses, atol=1e-5, rtol=0)


def test_packed_attention_function_matches_sdpa_with_the_block_mask():
    """The attention function on its own: per-sample SDPA, and its exact-mask fallback, equal transformers' SDPA
    given the block-diagonal mask transformers builds from the restarting positions."""
    from transformers import Qwen3Config
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import create_causal_mask

    from engine.data.packing import packed_sdpa_attention

    torch.manual_seed(0)
    lengths = [7, 3, 12, 1, 9]
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    query, key, value = torch.randn(1, 4, 32, 8), torch.randn(1, 2, 32, 8), torch.randn(1, 2, 32, 8)
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = True, 2
    config = Qwen3Config(num_attention_heads=4, num_key_value_heads=2, head_dim=8, attn_implementation="sdpa")
    mask = create_causal_mask(config=config, inputs_embeds=torch.zeros(1, 32, 8), attention_mask=None, cache=None,
                              position_ids=positions)
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, position_ids=positions)
    per_sample, _ = packed_sdpa_attention(module, query, key, value, None, position_ids=positions)
    fallback, _ = packed_sdpa_attention(module, query, key, value, None, position_ids=positions,
                                        sliding_window=10**6)  # takes the exact-mask path; the window cuts nothing
    torch.testing.assert_close(per_sample, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(fallback, expected, atol=1e-6, rtol=0)
    # float16 takes the path GPUs take (SDPA per run of equal lengths): runs between other lengths, one run
    # (bf16 on a CPU takes the per-sample function, see the bf16 test below)
    low = [t.to(torch.float16) for t in (query, key, value)]
    for lengths in ([5, 5, 3, 3, 3, 1, 12], [8, 8, 8, 8]):
        positions = torch.cat([torch.arange(n) for n in lengths])[None]
        mask = create_causal_mask(config=config, inputs_embeds=torch.zeros(1, 32, 8), attention_mask=None,
                                  cache=None, position_ids=positions)
        expected, _ = sdpa_attention_forward(module, *low, mask, position_ids=positions)
        per_run, _ = packed_sdpa_attention(module, *low, None, position_ids=positions)
        assert per_run.shape == expected.shape == (1, 32, 4, 8) and per_run.is_contiguous()
        torch.testing.assert_close(per_run, expected, atol=1e-2, rtol=1e-2)


def test_per_sample_attention_gradients_equal_the_masked_sdpa():
    """The CPU per-sample function (one autograd node, gradients written by window) backpropagates exactly what
    SDPA with the block-diagonal mask does, for grouped key/value heads; and passes gradcheck in float64."""
    from engine.data.packing import _block_causal_mask, _per_sample_attention

    torch.manual_seed(1)
    lengths = (7, 3, 12, 1, 9)
    q, k, v = (torch.randn(1, h, 32, 8, requires_grad=True) for h in (4, 2, 2))
    out = _per_sample_attention().apply(q, k, v, lengths, None)
    assert out.shape == (1, 32, 4, 8)
    weights = torch.randn(out.shape)
    (out * weights).sum().backward()
    ours = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    mask = _block_causal_mask(list(lengths), q.device)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)
    (expected * weights).sum().backward()
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    for name, grad, reference in zip("qkv", ours, (q.grad, k.grad, v.grad)):
        assert reference.abs().max() > 0
        torch.testing.assert_close(grad, reference, atol=1e-5, rtol=1e-5, msg=name)
    small = [torch.randn(1, h, 9, 4, dtype=torch.float64, requires_grad=True) for h in (2, 1, 1)]
    assert torch.autograd.gradcheck(lambda *t: _per_sample_attention().apply(*t, (4, 2, 3), 0.5), small)


def test_per_sample_attention_runs_equal_lengths_as_one_batch_with_the_same_result():
    """Consecutive samples of one length go through the kernel as one batch: output and gradients equal the
    kernel run on each sample alone, to the bit, whatever the runs (uniform rows, runs between other lengths)."""
    from engine.data.packing import _equal_runs, _per_sample_attention

    assert _equal_runs((4, 4, 4)) == [(0, 3, 4)]
    assert _equal_runs((3, 5, 5, 2, 2, 5)) == [(0, 1, 3), (3, 2, 5), (13, 2, 2), (17, 1, 5)]
    torch.manual_seed(2)
    for lengths in ((16, 16, 16, 16), (3, 10, 10, 10, 2, 2, 27)):
        total = sum(lengths)
        # the engine's layout: (1, heads, T, d) views of (1, T, heads, d)
        q, k, v = (torch.randn(1, total, h, 8).transpose(1, 2).requires_grad_() for h in (4, 2, 2))
        weights = torch.randn(1, total, 4, 8)
        out = _per_sample_attention().apply(q, k, v, lengths, 0.3)
        (out * weights).sum().backward()
        ours = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        parts, start = [], 0
        for length in lengths:
            window = slice(start, start + length)
            parts.append(F.scaled_dot_product_attention(q[:, :, window], k[:, :, window], v[:, :, window],
                                                        is_causal=True, enable_gqa=True, scale=0.3))
            start += length
        alone = torch.cat(parts, dim=2).transpose(1, 2)
        (alone * weights).sum().backward()
        assert torch.equal(out, alone), lengths
        for name, grad, reference in zip("qkv", ours, (q.grad, k.grad, v.grad)):
            assert reference.abs().max() > 0
            assert torch.equal(grad, reference), (name, lengths)
    small = [torch.randn(1, h, 10, 4, dtype=torch.float64, requires_grad=True) for h in (2, 1, 1)]
    assert torch.autograd.gradcheck(lambda *t: _per_sample_attention().apply(*t, (3, 3, 2, 2), 0.5), small)


@pytest.mark.parametrize("lengths", [(40, 40), (300, 40, 40, 12), (260,)], ids=["short", "mixed", "long"])
def test_per_sample_attention_in_bf16_runs_short_samples_in_fp32(lengths):
    """bf16 rows (bf16 autocast on a CPU): samples shorter than FP32_BELOW attend in fp32 and are rounded back,
    so their output and gradients are the fp32 ones rounded to bf16; longer ones run the bf16 kernel, close to
    fp32. Gradients come back in bf16, the inputs' dtype."""
    from engine.data.packing import FP32_BELOW, _per_sample_attention

    assert min(lengths) < FP32_BELOW or max(lengths) >= FP32_BELOW
    torch.manual_seed(3)
    total = sum(lengths)
    leaves = [torch.randn(1, total, h, 16).transpose(1, 2) for h in (6, 2, 2)]
    weights = torch.randn(1, total, 6, 16).bfloat16()
    results = {}
    for dtype in (torch.bfloat16, torch.float32):
        inputs = [t.bfloat16().to(dtype).requires_grad_() for t in leaves]  # the same bf16 values both ways
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = _per_sample_attention().apply(*inputs, lengths, 0.25)
        (out * weights.to(dtype)).sum().backward()
        assert out.dtype == dtype and all(t.grad.dtype == dtype for t in inputs)
        results[dtype] = (out, [t.grad for t in inputs])
    (out, grads), (want, want_grads) = results[torch.bfloat16], results[torch.float32]
    start = 0
    for length in lengths:
        window = slice(start, start + length)
        got, expected = out[:, window], want[:, window]
        if length < FP32_BELOW:
            assert torch.equal(got, expected.bfloat16()), length
        else:
            torch.testing.assert_close(got.float(), expected, atol=0.02, rtol=0.02)
        for grad, reference in zip(grads, want_grads):
            g, r = grad[:, :, window].float(), reference[:, :, window]
            assert r.abs().max() > 0
            assert float((g - r).norm() / r.norm()) < 0.02, length
        start += length
