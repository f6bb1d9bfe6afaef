"""Large freed blocks stay mapped for the next step on a CPU run (engine/training/host_memory.py)."""

import subprocess
import sys
from pathlib import Path

import pytest

from engine.training.host_memory import KEPT_BLOCK_BYTES, keep_freed_blocks

REPO = Path(__file__).resolve().parents[2]
_GLIBC = __import__("platform").libc_ver()[0] == "glibc"

# Page faults taken by writing 64 MB tensors, each freed before the next, in a fresh process (the thresholds are
# process-wide): the last 4 of 16, once the heap has settled (it takes glibc a few rounds to place the block
# where the next one fits). With the thresholds kept the freed block is reused, already mapped.
_CHILD = """
import resource, sys
import torch
sys.path.insert(0, sys.argv[2])
from engine.training.host_memory import keep_freed_blocks
if sys.argv[1] == "keep":
    assert keep_freed_blocks(environ={}), "not applied"

def faults_writing_a_block():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = torch.ones(16 << 20)  # 64 MB, every page written
    del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

print(sum([faults_writing_a_block() for _ in range(16)][-4:]))
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, str(REPO)], capture_output=True, text=True,
                         check=True, env={"PATH": "/usr/bin:/bin"})
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not _GLIBC, reason="glibc malloc's thresholds; other C libraries keep their own policy")
def test_a_freed_large_block_is_reused_without_faulting_its_pages_in_again():
    plain, kept = _faults("plain"), _faults("keep")
    # every 64 MB block faults all its pages in: 16,384 of 4 KB (32 where transparent huge pages are always on)
    assert plain >= 4 * 32, plain
    assert kept < plain / 10, (plain, kept)


@pytest.mark.skipif(not _GLIBC, reason="glibc malloc's thresholds")
def test_the_users_own_malloc_settings_and_other_allocators_are_left_alone():
    assert keep_freed_blocks(environ={"MALLOC_MMAP_THRESHOLD_": "4096"}) is None
    assert keep_freed_blocks(environ={"MALLOC_TRIM_THRESHOLD_": "0"}) is None
    assert keep_freed_blocks(environ={"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4096"}) is None
    assert keep_freed_blocks(environ={"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}) is None
    assert f"{KEPT_BLOCK_BYTES >> 30} GiB" in keep_freed_blocks(environ={"GLIBC_TUNABLES": "glibc.rtld.x=1"})
