"""Padding-free packing: the samples of a micro-batch concatenated into ONE row, with no padding at all.

Position ids restart at 0 at each sample. transformers (5.x) reads that as packed sequences when the model gets
``position_ids`` and no 2-D ``attention_mask``: SDPA and eager attention build a block-diagonal causal mask from
them, and FlashAttention-2 switches to its varlen kernel (``cu_seqlens`` from the restarts; it needs batch size 1,
which is why a packed micro-batch is always a single row). So no token attends across a sample boundary, and each
sample's rotary positions are the ones it would have alone.

The first label of every sample is IGNORE_INDEX: after the usual shift (token t predicts t+1), the last token of
one sample would otherwise be trained to predict the first token of the next. In a padded batch that label is
never a target either (nothing precedes position 0), so packed and padded batches train the same tokens.

The collated batch keeps a 2-D ``attention_mask`` of ones only for counting input tokens; the loss drops it for
packed batches (a batch that carries ``position_ids``), because passing it would switch packing detection off.

A block-diagonal mask is exact but costs attention over the whole row (T x T), where the samples alone need only
the sum of their squared lengths; on eight 256-token samples that made a CPU step 1.8x slower than padding.
``use_packed_attention(model)`` switches an SDPA model to ``packed_sdpa_attention``, which runs causal SDPA on each
sample of a packed row and hands every other call (batched rows, a KV cache, decoding) to transformers' SDPA.

torch is imported inside the calls, so that `import engine.data` stays fast for the TUI and the validator.
"""

from __future__ import annotations

import contextvars
import functools
from bisect import bisect_left, insort
from dataclasses import dataclass

from engine.data.encode import IGNORE_INDEX


@dataclass(frozen=True)
class PackedRow:
    """One packed row as plain lists (the collator turns it into tensors)."""

    input_ids: list[int]
    labels: list[int]
    position_ids: list[int]
    lengths: list[int]
    """Token count of each sample in the row, in order."""


def pack_features(features: list[dict]) -> PackedRow:
    """Concatenate encoded samples ({"input_ids", "labels"}) into one row; positions restart at each sample."""
    if not features:
        raise ValueError("pack_features needs at least one sample.")
    input_ids: list[int] = []
    labels: list[int] = []
    position_ids: list[int] = []
    lengths: list[int] = []
    for feature in features:
        ids, sample_labels = list(feature["input_ids"]), list(feature["labels"])
        if len(ids) != len(sample_labels) or not ids:
            raise ValueError("Each sample needs as many labels as input ids, and at least one token.")
        sample_labels[0] = IGNORE_INDEX  # never predicted from the previous sample's last token
        input_ids += ids
        labels += sample_labels
        position_ids += range(len(ids))
        lengths.append(len(ids))
    return PackedRow(input_ids, labels, position_ids, lengths)


class PackedCollator:
    """[{"input_ids", "labels"}] -> one padding-free row: input_ids, labels, position_ids, attention_mask (1, T).

    ``attention_mask`` is all ones (there is no padding); it is there so that code counting input tokens with
    ``attention_mask.sum()`` keeps working. The model must not receive it (see the module docstring).
    """

    def __call__(self, features: list[dict]) -> dict:
        import torch

        row = pack_features(features)
        return {
            "input_ids": torch.tensor([row.input_ids], dtype=torch.long),
            "labels": torch.tensor([row.labels], dtype=torch.long),
            "position_ids": torch.tensor([row.position_ids], dtype=torch.long),
            "attention_mask": torch.ones(1, len(row.input_ids), dtype=torch.long),
        }


CROSS_SAMPLE_ATTENTION = "cross_sample_attention"
"""Batch key of LLaMA-Factory-style packed rows whose attention spans the samples of a row (a marker tensor): the
model gets the 2-D attention_mask, which keeps transformers from deriving per-sample attention from positions."""


class PackedRowsCollator:
    """Rows of packed samples ([[sample, ...], ...], LLaMA-Factory's packing) -> one right-padded batch of rows:
    input_ids, labels, position_ids (restarting at each sample; 0 on padding, as there) and attention_mask (real
    tokens). ``cross_attention``: attention spans each row's samples (LLaMA-Factory's ``packing``); otherwise each
    sample attends only to itself (``neat_packing``: the loss passes positions without the mask)."""

    def __init__(self, pad_token_id: int, *, cross_attention: bool) -> None:
        self.pad_token_id, self.cross_attention = pad_token_id, cross_attention

    def __call__(self, rows: list[list[dict]]) -> dict:
        import torch

        packed = [pack_features(features) for features in rows]
        length = max(len(row.input_ids) for row in packed)
        batch: dict[str, list] = {"input_ids": [], "labels": [], "position_ids": [], "attention_mask": []}
        for row in packed:
            pad = length - len(row.input_ids)
            batch["input_ids"].append(row.input_ids + [self.pad_token_id] * pad)
            batch["labels"].append(row.labels + [IGNORE_INDEX] * pad)
            batch["position_ids"].append(row.position_ids + [0] * pad)
            batch["attention_mask"].append([1] * len(row.input_ids) + [0] * pad)
        out = {key: torch.tensor(value, dtype=torch.long) for key, value in batch.items()}
        if self.cross_attention:
            out[CROSS_SAMPLE_ATTENTION] = torch.ones(1, dtype=torch.long)
        return out


def segment_lengths(position_ids: list[int]) -> list[int]:
    """Lengths of the samples in a packed row, read back from its position ids (a new sample starts at 0)."""
    starts = [i for i, pos in enumerate(position_ids) if pos == 0]
    if not starts or starts[0] != 0:
        raise ValueError("A packed row must start with position 0.")
    return [end - start for start, end in zip(starts, starts[1:] + [len(position_ids)])]


def best_fit_decreasing(lengths: list[int], capacity: int, order: list[int] | None = None) -> list[list[int]]:
    """Indices grouped into bins of at most ``capacity`` tokens, longest sample first, each into the fullest bin
    that still has room (best fit decreasing: within 11/9 of the fewest bins possible).

    ``order`` breaks ties between equal lengths (pass a seeded permutation so equal-length samples move between
    epochs); the NUMBER of bins depends only on the lengths, so steps per epoch is the same every epoch.
    Runs in O(n log n) on the bins' remaining room, so 100k samples take well under a second.
    """
    too_long = [i for i, n in enumerate(lengths) if n > capacity]
    if too_long:
        raise ValueError(f"{len(too_long)} sample(s) are longer than the token budget {capacity}; "
                         "raise the budget or lower cutoff_len.")
    rank = {index: position for position, index in enumerate(order or range(len(lengths)))}
    by_length = sorted(range(len(lengths)), key=lambda i: (-lengths[i], rank[i]))
    bins: list[list[int]] = []
    room: list[tuple[int, int]] = []  # (remaining tokens, bin index), kept sorted
    for index in by_length:
        size = lengths[index]
        slot = bisect_left(room, (size, -1))
        if slot < len(room):
            remaining, bin_index = room.pop(slot)
        else:
            remaining, bin_index = capacity, len(bins)
            bins.append([])
        bins[bin_index].append(index)
        insort(room, (remaining - size, bin_index))
    return bins


def padding_efficiency(lengths: list[int], micro_batches: list[list[int]], *, packed: bool) -> float:
    """Real tokens / tokens computed: 1.0 for packed rows, sum / (rows x longest) for padded micro-batches."""
    real = sum(lengths[i] for batch in micro_batches for i in batch)
    if packed:
        return 1.0 if real else 0.0
    computed = sum(len(batch) * max(lengths[i] for i in batch) for batch in micro_batches if batch)
    return real / computed if computed else 0.0


PACKED_SDPA = "sdpa_packed"
"""Name under which ``packed_sdpa_attention`` is registered with transformers' AttentionInterface."""

# Set by a forward pre-hook on every call of a switched model: True when the call is one packed row without a
# 2-D mask, so the mask function can skip the (1, 1, T, T) block-diagonal mask nobody will read. Building it is
# O(T^2): 8 ms at T=1,400 but 1.4 s at T=16,000 on this CPU. Every call sets it, so a failed call leaves no stale
# value behind.
_PACKED_CALL = contextvars.ContextVar("lfa_packed_call", default=False)


def keeps_samples_apart(model) -> bool:
    """Whether the model is one of transformers' own classes, which read restarting position ids as packed samples
    and keep attention within each; a class of the model's own code (remote code) may attend across them."""
    return type(model).__module__.startswith("transformers.")


def use_packed_attention(model) -> str:
    """Give a model (a transformers *ForCausalLM, not a wrapper) per-sample attention for packed rows.

    Only plain ``sdpa`` on full-attention models from transformers itself is switched: flash_attention_2 already
    runs packed rows through its varlen kernel, eager and others get the exact block-diagonal mask, a wrapper
    installed by a parallel strategy is left alone, and sliding-window models keep SDPA's masks.
    Returns the attention implementation in use afterwards. Idempotent; the saved config does not keep it.
    """
    config = model.config
    current = getattr(config, "_attn_implementation", None)
    sliding = "sliding_attention" in (getattr(config, "layer_types", None) or []) or (
        getattr(config, "layer_types", None) is None and getattr(config, "sliding_window", None))
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if current != "sdpa" or sliding or not keeps_samples_apart(model) or decoder is None:
        return current
    _register_packed_sdpa()
    model.set_attn_implementation(PACKED_SDPA)
    decoder.register_forward_pre_hook(_note_packed_call, with_kwargs=True)
    return PACKED_SDPA


def _register_packed_sdpa() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
    AttentionMaskInterface.register(PACKED_SDPA, _packed_sdpa_mask)


def _note_packed_call(_module, args, kwargs) -> None:
    ids = kwargs.get("input_ids", args[0] if args else None)
    positions = kwargs.get("position_ids")
    _PACKED_CALL.set(ids is not None and ids.shape[0] == 1 and kwargs.get("attention_mask") is None
                     and kwargs.get("cache", kwargs.get("past_key_values")) is None
                     and positions is not None and int(positions.reshape(-1)[0]) == 0
                     and bool((positions.reshape(-1)[1:] == 0).any()))


def _packed_sdpa_mask(**kwargs):
    """SDPA's mask, except for a packed row: per-sample attention needs none (see ``_PACKED_CALL``)."""
    from transformers.masking_utils import sdpa_mask

    return None if _PACKED_CALL.get() else sdpa_mask(**kwargs)


def packed_sdpa_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers attention function: causal SDPA within each sample of a single packed row.

    query/key/value are (1, heads, T, head_dim); the samples are read from ``position_ids`` (restarting at 0).
    Returns (1, T, heads, head_dim) like transformers' SDPA.
    """
    import torch
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    # Without a mask and with restarting positions the row is packed; with a mask, SDPA does what it always does.
    lengths = _packed_lengths(query, key, kwargs.get("position_ids")) if attention_mask is None else None
    if lengths is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if (kwargs.get("sliding_window") or kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None
            or not getattr(module, "is_causal", True)):
        # Features per-sample SDPA does not cover (use_packed_attention keeps such models off it): SDPA with the
        # exact block-diagonal mask instead.
        mask = _block_causal_mask(lengths, query.device)
        return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling, **kwargs)
    # enable_gqa: grouped-query heads share key/value heads without copies, as transformers' SDPA does unmasked
    options = dict(dropout_p=dropout if module.training else 0.0, scale=scaling, is_causal=True,
                   enable_gqa=query.shape[1] != key.shape[1])
    if (query.device.type == "cpu" and options["dropout_p"] == 0.0
            and query.dtype in (torch.float32, torch.float64, torch.bfloat16)):
        # its output is also what o_proj keeps for backward: one (T, hidden) copy per layer less than SDPA's
        with torch.autocast("cpu", enabled=False):  # bf16 under autocast: the function picks each run's dtype
            return _per_sample_attention().apply(query, key, value, tuple(lengths), scaling), None
    # each run of equal lengths is one batched call on a view: a row of equal lengths costs what a padded batch does
    parts = [F.scaled_dot_product_attention(*(_batch(t, start, count, length) for t in (query, key, value)), **options)
             .transpose(1, 2).flatten(0, 1) for start, count, length in _equal_runs(lengths)]
    return (parts[0].contiguous() if len(parts) == 1 else torch.cat(parts))[None], None  # as transformers returns it


FP32_BELOW = 256  # bf16 samples shorter than this attend in fp32 (see _per_sample_attention)


@functools.cache
def _per_sample_attention():
    """Per-sample causal attention as an autograd Function, built on first use (engine.data does not import
    torch at import time)."""
    import torch

    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward

    class PerSampleCausalAttention(torch.autograd.Function):
        """Causal attention within each sample of a packed row on CPU, as one autograd node.

        The same flash kernel as ``F.scaled_dot_product_attention`` (grouped key/value heads included), but
        autograd sees one function instead of a slice, a kernel and a concatenation per sample: slicing the
        inputs made backward build a zero-filled full-size gradient for q, k and v per sample and sum them,
        about 3% of a step on SmolLM2-135M with eight samples a row. Here each sample's gradients are written
        into its window of one buffer. The output, (1, T, heads, head_dim), is written by window in the layout
        the output projection reads, so the tensor kept for backward here is the one o_proj keeps: one
        (T, hidden) copy per layer less than SDPA's output plus its transposed copy.

        Consecutive samples of one length run as one batched call on a view (no copy): the kernel spreads a
        batch over its threads better than one sample at a time, 1.2-1.4x on the attention of 256-token rows
        (forward and backward, 2 threads), and the result is the same to the bit.

        bf16 rows (bf16 autocast on a CPU with bf16 units): samples shorter than ``FP32_BELOW`` tokens run in
        fp32 and are rounded back, because the CPU kernel's bf16 backward is slower than its fp32 one on short
        samples. Forward and backward of one sample, 9 query and 3 key/value heads of 64, AMX-BF16, 2 threads:
        64 tokens 1.13 ms in bf16 against 0.35 ms through fp32 (casts included), 128 tokens 2.32 against 1.20,
        256 tokens 3.30 against 3.50, 512 tokens 9.05 against 12.88.
        """

        @staticmethod
        def forward(ctx, query, key, value, lengths, scale):
            runs = _equal_runs(lengths)
            dtype = query.dtype
            out = None if len(runs) == 1 else query.new_empty(1, query.shape[2], query.shape[1], query.shape[3])
            lses = []
            for start, count, length in runs:
                inputs = [_compute(_batch(t, start, count, length), length) for t in (query, key, value)]
                part, lse = flash(*inputs, 0.0, True, scale=scale)
                if out is None:  # one run (equal lengths): the kernel's output already has the row's layout
                    out = part.transpose(1, 2).reshape(1, count * length, part.shape[1], part.shape[3]).to(dtype)
                else:
                    _batch(out, start, count, length, heads_first=False).copy_(part.transpose(1, 2))
                lses.append(lse)
            ctx.save_for_backward(query, key, value, out, *lses)
            ctx.lengths, ctx.scale = lengths, scale
            return out

        @staticmethod
        def backward(ctx, grad_out):
            query, key, value, out, *lses = ctx.saved_tensors
            runs = _equal_runs(ctx.lengths)
            grads = None if len(runs) == 1 else [torch.empty_like(t) for t in (query, key, value)]
            for (start, count, length), lse in zip(runs, lses):
                inputs = [_compute(_batch(t, start, count, length), length) for t in (query, key, value)]
                rows = [_compute(_batch(t, start, count, length, heads_first=False).transpose(1, 2), length)
                        for t in (grad_out, out)]
                parts = flash_backward(rows[0], *inputs, rows[1], lse, 0.0, True, scale=ctx.scale)
                if grads is None:  # one run: (count, heads, length, d) back to the row, a view when the layouts agree
                    grads = [part.transpose(0, 1).reshape(1, part.shape[1], count * length, part.shape[3])
                             .to(query.dtype) for part in parts]
                else:
                    for grad, part in zip(grads, parts):
                        _batch(grad, start, count, length).copy_(part)
            return (*grads, None, None)

    def _compute(tensor, length: int):
        """A bf16 sample shorter than FP32_BELOW tokens in fp32; anything else as it is."""
        return tensor.float() if tensor.dtype == torch.bfloat16 and length < FP32_BELOW else tensor

    return PerSampleCausalAttention


def _equal_runs(lengths) -> list[tuple[int, int, int]]:
    """(start token, sample count, length) of each run of consecutive samples with one length."""
    runs, start = [], 0
    for length in lengths:
        if runs and runs[-1][2] == length:
            runs[-1][1] += 1
        else:
            runs.append([start, 1, length])
        start += length
    return [tuple(run) for run in runs]


def _batch(tensor, start: int, count: int, length: int, *, heads_first: bool = True):
    """A view of ``count`` consecutive samples of ``length`` tokens from ``start`` of a packed row, as a batch.
    heads_first: (1, heads, T, d) -> (count, heads, length, d); else (1, T, heads, d) -> (count, length, heads, d).
    """
    if heads_first:
        window = tensor[0, :, start:start + count * length]
        return window.unflatten(1, (count, length)).transpose(0, 1)
    return tensor[0, start:start + count * length].unflatten(0, (count, length))


def _block_causal_mask(lengths: list[int], device):
    """(1, 1, T, T) boolean mask: causal within each sample, nothing across samples."""
    import torch

    sample = torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device))
    index = torch.arange(sample.numel(), device=device)
    allowed = (sample[:, None] == sample[None, :]) & (index[:, None] >= index[None, :])
    return allowed[None, None]


def _packed_lengths(query, key, position_ids) -> list[int] | None:
    """Sample lengths of a single packed training row, or None when this call is anything else."""
    if position_ids is None or query.shape[0] != 1 or query.shape[2] != key.shape[2] or query.shape[2] < 2:
        return None
    if position_ids.shape[-1] != query.shape[2]:
        return None
    positions = position_ids.reshape(-1)
    starts = (positions == 0).nonzero().flatten().tolist()
    if not starts or starts[0] != 0:
        return None
    if len(starts) == 1:
        return None  # one sample: plain causal SDPA already is exact and fastest
    return [end - begin for begin, end in zip(starts, starts[1:] + [positions.numel()])]
