"""Peak memory and time of a callable, on CPU and on CUDA, for the kernel tests and `benchmarks/kernel_bench.py`.

CPU peak memory: tracemalloc does not see torch's allocator and RSS is blurred by the allocator keeping freed
pages, so the peak is rebuilt from the torch profiler's allocation events ([memory] events, +bytes on allocation,
-bytes on free) in time order. It counts the bytes of tensors alive at the worst moment, like
`torch.cuda.max_memory_allocated` does on a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def peak_bytes(fn: Callable[[], Any], device: torch.device | str = "cpu") -> int:
    """Bytes of torch tensors allocated at the peak while `fn()` runs, above what was allocated before it."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]" and e.device_type() ==
              torch.autograd.DeviceType.CPU]
    current = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        current += event.nbytes()
        peak = max(peak, current)
    return peak


def time_per_call(fn: Callable[[], Any], device: torch.device | str = "cpu", *, warmup: int = 2,
                  repeats: int = 5) -> float:
    """Best (smallest) seconds per call of `repeats`, after `warmup` calls; CUDA is synchronised around each.

    The minimum, not the median: on a shared machine other processes only ever add time.
    """
    device = torch.device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda *_: None)
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return min(times)
