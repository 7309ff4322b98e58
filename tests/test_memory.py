"""engine/memory.py: freed blocks are reused without new page faults (glibc only)."""

import subprocess
import sys

import pytest

from engine.memory import keep_freed_memory

# What a batch's cache does: 8 buffers reallocated at 16, 32, 48 and 72 slots (64 KiB per
# slot each), freed when the batch ends; five batches. Prints the minor page faults.
PROGRAM = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from engine.memory import keep_freed_memory
    assert keep_freed_memory()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    bufs = []
    for slots in (16, 32, 48, 72):
        bufs = [np.ones(slots << 14, dtype=np.float32) for _ in range(8)]
    del bufs
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(not keep_freed_memory(), reason="not glibc: the allocator is left alone")
def test_freed_blocks_are_reused_without_new_page_faults():
    touched = 5 * 8 * (16 + 32 + 48 + 72) * (64 << 10) // 4096  # pages written in all
    default, kept = _faults("default"), _faults("keep")
    assert default > touched / 2  # glibc maps most growing blocks afresh
    assert kept < touched / 6 and kept < default / 3  # about one batch's worth, then reuse


def test_it_is_set_once_per_process():
    assert keep_freed_memory() is keep_freed_memory()
