"""Forward products with a frozen weight on CPU, with the weight reordered once into oneDNN's blocked layout.

    y = frozen_linear(x2d, weight, bias)     # x2d @ weight.T + bias

``x @ weight.T`` through MKL packs the weight into its panel layout again on every call. A LoRA step's base
weights never change, so here oneDNN's ``_linear_pointwise`` takes the weight already reordered for this CPU:
the reordering is paid once per weight and run. On a 2-core AVX2 machine (2 threads, fp32, best of 5 calls):
the LM head of SmolLM2-135M (341 rows x 576, times a 576 x 49,152 weight) went from 67 to 107 GFLOP/s, its
2,048-token decoder projections 5-15% faster. A whole LoRA step of that model, the same steps run both ways in
one process (``benchmarks/profile_step.py --compare-gemm``): 1.12x on skewed lengths, about 1.2x on 256-token
rows. Reordered copies of the backward orientation (``dy @ weight``) too measured no faster in fresh processes
and would cost a second copy, so the input gradients keep MKL.

The cost is memory: one reordered copy of every frozen weight used, the size of the weight (about 540 MB for
SmolLM2-135M in fp32). Copies are made only within a budget (a quarter of the memory available when the first
is made; ``set_budget`` changes it); past it the plain matmul runs. They are cached per weight tensor, keyed by
its storage, shape, strides and version counter, so a weight that is changed in place or replaced is never read
stale, and a copy goes with its weight. Not under torch.distributed (FSDP shards weights; a full copy per rank
would undo it).

``skinny_product`` runs the LoRA adapters' rank-wide products through oneDNN too, on the operands as they are
(no copy is kept: the adapter weights train).

Results equal the plain matmul up to float rounding (oneDNN sums in another order). Anything that is not a CPU
product made without autograd (inside an autograd Function) in fp32, or in bf16 on a CPU with bf16 units (on
AMX-BF16, SmolLM2-135M's 2,048 x 576 x 1,536 product: 2.00 against 1.74 TFLOP/s), or a torch built without
oneDNN, takes the plain matmul.
"""

from __future__ import annotations

import functools
import threading
import weakref

import torch

# id(weight) -> (key, reordered copy, bytes); the key guards against an in-place change
_CACHE: dict[int, tuple[tuple, torch.Tensor, int]] = {}
_LOCK = threading.Lock()
_SETTINGS: dict = {"enabled": True, "budget": None}
BUDGET_SHARE_OF_AVAILABLE = 0.25
_PLAIN_TYPES = {torch.Tensor, torch.nn.Parameter}


@functools.cache
def available() -> bool:
    """Whether this torch can run the reordered products (a CPU build with oneDNN)."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


def set_enabled(enabled: bool) -> None:
    """Switch the oneDNN products (reordered and skinny) on or off for this process (benchmarks compare both in
    one run)."""
    _SETTINGS["enabled"] = bool(enabled)


def set_budget(max_bytes: int | None) -> None:
    """At most ``max_bytes`` of reordered copies from now on (None: a quarter of the memory then available)."""
    _SETTINGS["budget"] = max_bytes


def cached_bytes() -> int:
    """Bytes held by reordered copies now (counted at the dense size of each weight)."""
    return sum(entry[2] for entry in _CACHE.values())


def clear() -> None:
    """Drop every reordered copy."""
    with _LOCK:
        _CACHE.clear()


@functools.cache
def _bf16_available() -> bool:
    """Whether oneDNN runs bf16 products on this CPU's own bf16 units (else it would emulate them)."""
    return available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _onednn_runs(*operands: torch.Tensor) -> bool:
    """oneDNN is on and in this torch, autograd does not see the product, and every operand is a plain CPU tensor
    (tensor subclasses such as DTensor keep the plain matmul), all fp32, or all bf16 on a CPU with bf16 units."""
    if not (_SETTINGS["enabled"] and not torch.is_grad_enabled() and available()):
        return False
    dtype = operands[0].dtype
    if dtype != torch.float32 and not (dtype == torch.bfloat16 and _bf16_available()):
        return False
    return all(type(t) in _PLAIN_TYPES and t.device.type == "cpu" and t.dtype == dtype for t in operands)


def _usable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (_onednn_runs(x, weight) and weight.dim() == 2 and not weight.requires_grad
            and not (torch.distributed.is_available() and torch.distributed.is_initialized()))


def _budget() -> int:
    if _SETTINGS["budget"] is None:
        import psutil

        _SETTINGS["budget"] = int(psutil.virtual_memory().available * BUDGET_SHARE_OF_AVAILABLE)
    return int(_SETTINGS["budget"])


def _reordered(weight: torch.Tensor) -> torch.Tensor | None:
    slot = id(weight)
    key = (weight.untyped_storage().data_ptr(), weight.storage_offset(), tuple(weight.shape),
           tuple(weight.stride()), weight._version)
    with _LOCK:
        hit = _CACHE.get(slot)
        if hit is not None and hit[0] == key:
            return hit[1]
        size = weight.numel() * weight.element_size()
        if cached_bytes() - (hit[2] if hit else 0) + size > _budget():
            return None
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous())
        if hit is None:
            weakref.finalize(weight, _CACHE.pop, slot, None)
        _CACHE[slot] = (key, packed, size)
        return packed


def frozen_linear(x2d: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x2d @ weight.T (+ bias)`` for a weight that does not train; x2d is (rows, in)."""
    packed = None
    if _usable(x2d, weight) and (bias is None or (bias.dtype == weight.dtype and not bias.requires_grad)):
        packed = _reordered(weight)
    if packed is None:
        return plain_linear(x2d, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x2d.contiguous(), packed, bias, "none", [], "")


def plain_linear(x2d: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x2d @ weight.T (+ bias)`` through the plain matmul."""
    return x2d @ weight.t() if bias is None else torch.addmm(bias, x2d, weight.t())


def skinny_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b.T`` for the LoRA adapters' products, where one side is the rank (8, 16): through oneDNN, which
    reads either operand in any strides, else the plain matmul.

    These products are memory-bound (a rank x tokens or tokens x rank result from a tokens x features operand),
    and MKL packs the big operand into its panel layout first. oneDNN does not: on a 2-core AVX2 machine, 2,048
    tokens, rank 8 (best of 30 calls), ``x @ A.T`` took 0.22 ms against 0.45, ``dy @ B`` 0.72 against 1.75 and
    ``z.T @ dy`` 2.1 against 3.1 (1,536 features). Nothing is cached, so weights that train may be used."""
    if _onednn_runs(a, b) and a.dim() == 2 and b.dim() == 2:
        return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
    return a @ b.t()
