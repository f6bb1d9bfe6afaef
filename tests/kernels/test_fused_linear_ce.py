"""The pure-torch chunked linear cross-entropy: same loss and gradients as logits + F.cross_entropy, less memory."""

import pytest
import torch
import torch.nn.functional as F

from engine.kernels.measure import peak_bytes
from engine.kernels.ops.fused_linear_ce import chunked_linear_cross_entropy, fused_linear_cross_entropy

TOL = dict(atol=1e-5, rtol=1e-5)


def problem(rows=45, hidden=32, vocab=211, seed=0, bias=True):
    generator = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, hidden, generator=generator).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=generator) * 0.2).requires_grad_()
    b = torch.randn(vocab, generator=generator).requires_grad_() if bias else None
    labels = torch.randint(0, vocab, (rows,), generator=generator)
    labels[::4] = -100  # prompt tokens and padding
    return h, w, b, labels


@pytest.mark.parametrize("chunk_size", [1, 7, 16, 45, 1024])  # 7 leaves a partial last chunk
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_matches_unfused_loss_and_gradients(chunk_size, reduction):
    h, w, b, labels = problem()
    loss = chunked_linear_cross_entropy(h, w, labels, bias=b, chunk_size=chunk_size, reduction=reduction)
    loss_ref = F.cross_entropy(h @ w.T + b, labels, reduction=reduction)
    torch.testing.assert_close(loss, loss_ref, **TOL)
    # a non-unit incoming gradient (loss / tokens of the step, as the training loop does)
    grads = torch.autograd.grad(loss / 3.0, (h, w, b))
    grads_ref = torch.autograd.grad(loss_ref / 3.0, (h, w, b))
    for got, want in zip(grads, grads_ref):
        torch.testing.assert_close(got, want, **TOL)


def test_frozen_head_and_batched_hidden():
    """LoRA: the LM head is frozen, hidden comes as [B, T, H]; only d hidden is computed."""
    h, w, _, labels = problem(rows=24, bias=False)
    w = w.detach()
    h3 = h.detach().reshape(4, 6, -1).requires_grad_()
    loss = chunked_linear_cross_entropy(h3, w, labels.reshape(4, 6), chunk_size=5)
    (grad,) = torch.autograd.grad(loss, h3)
    h_ref = h3.detach().requires_grad_()
    (grad_ref,) = torch.autograd.grad(F.cross_entropy((h_ref @ w.T).flatten(0, 1), labels, reduction="sum"), h_ref)
    torch.testing.assert_close(grad, grad_ref, **TOL)


def test_all_labels_ignored_gives_zero_loss_and_gradient():
    h, w, b, labels = problem(rows=8)
    labels[:] = -100
    loss = chunked_linear_cross_entropy(h, w, labels, bias=b, chunk_size=3)
    assert loss.item() == 0.0
    assert all(g.abs().max() == 0 for g in torch.autograd.grad(loss, (h, w, b)))


def test_mismatched_labels_are_rejected():
    h, w, _, labels = problem(bias=False)
    with pytest.raises(ValueError, match="shift them first"):
        chunked_linear_cross_entropy(h, w, labels[:-1])


def test_fused_path_without_gpu_is_a_device_error(monkeypatch):
    from engine.errors import DeviceError

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    h, w, _, labels = problem(bias=False)
    with pytest.raises(DeviceError, match="auto"):
        fused_linear_cross_entropy(h, w, labels)
    # 'auto' is never an error: the torch chunked path on CPU
    torch.testing.assert_close(fused_linear_cross_entropy(h, w, labels, backend="auto"),
                               chunked_linear_cross_entropy(h, w, labels))


def test_peak_memory_is_a_fraction_of_the_logits_path():
    rows, hidden, vocab = 1024, 64, 16384  # logits: 64 MiB in fp32
    generator = torch.Generator().manual_seed(0)
    h0, w0 = torch.randn(rows, hidden, generator=generator), torch.randn(vocab, hidden, generator=generator) * 0.02
    labels = torch.randint(0, vocab, (rows,), generator=generator)

    def step(chunked: bool):
        def run():
            h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
            if chunked:
                loss = chunked_linear_cross_entropy(h, w, labels, chunk_size=128)
            else:
                loss = F.cross_entropy((h @ w.T).float(), labels, reduction="sum")
            loss.backward()
        return run

    unfused, chunked = peak_bytes(step(False)), peak_bytes(step(True))
    logits_bytes = rows * vocab * 4
    assert unfused >= 2 * logits_bytes  # logits and their gradient at least
    assert chunked < 0.35 * unfused, (chunked, unfused)
