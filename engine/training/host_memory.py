"""Large freed blocks kept in the process for the next step, on a CPU run under glibc.

    applied = keep_freed_blocks()     # Session.open calls it for a CPU run; a sentence for the log, or None

glibc's malloc serves every block above its mmap threshold (at most 32 MB by default) with a fresh mapping and
unmaps it on free, so the next step's tensor of that size starts on untouched pages: the kernel zeroes and maps
each 4 KB page on first write. A training step allocates and frees the same large tensors every step (a chunk of
LM-head logits is 341 x 49,152 fp32 = 64 MB on SmolLM2-135M), so it pays those page faults every step. Measured
on a 2-core Xeon, 2 threads, fp32: the chunked LM head with its loss (forward and backward, 1,615 rows) ran at
298-300 GFLOP/s into fresh memory and 337-341 into reused memory; a whole LoRA step of SmolLM2-135M on uniform
256-token rows, packed (``benchmarks/profile_step.py`` against its ``--malloc-default``, 6 steps, interleaved
twice), 1.02-1.03x, peak RSS 5% higher (3,340 MB against 3,190).

Raising the mmap threshold puts blocks up to ``KEPT_BLOCK_BYTES`` on the heap, where freed ones are reused, and
the trim threshold keeps up to as much free memory at the top of the heap instead of handing it back (freed
memory above that still goes back to the system). Results are unchanged: only where the bytes live moves.

Left alone where the user set malloc's own tunables (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or
``glibc.malloc`` in ``GLIBC_TUNABLES``), where another allocator is preloaded, or off glibc.
"""

from __future__ import annotations

import ctypes
import os
import platform

KEPT_BLOCK_BYTES = 1 << 30
# mallopt's parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_OTHER_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")


def keep_freed_blocks(environ: dict[str, str] | None = None) -> str | None:
    """Set glibc malloc's mmap and trim thresholds to ``KEPT_BLOCK_BYTES`` for this process. Returns what was
    done, for the run's log, or None when it was left alone (see the module docstring)."""
    environ = os.environ if environ is None else environ
    if platform.libc_ver()[0] != "glibc":
        return None
    if any(name in environ for name in _USER_SETTINGS) or "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        return None
    if any(name in environ.get("LD_PRELOAD", "") for name in _OTHER_ALLOCATORS):
        return None
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if not (mallopt(_M_MMAP_THRESHOLD, KEPT_BLOCK_BYTES) and mallopt(_M_TRIM_THRESHOLD, KEPT_BLOCK_BYTES)):
        return None
    return (f"freed blocks up to {KEPT_BLOCK_BYTES >> 30} GiB are kept for reuse (glibc malloc's mmap and trim "
            "thresholds): each step's large tensors reuse mapped pages instead of faulting fresh ones in")
