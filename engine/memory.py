"""Keep freed memory in the process for reuse instead of handing it back to the system.

Decoding allocates large blocks all the time: the batch's cache is reallocated whenever
it needs more slots or fewer columns, newcomers' cross-attention keys arrive in fresh
arrays, and every step's outputs are new arrays (the log-probabilities alone are rows x
vocabulary floats). glibc serves blocks above its mmap threshold (128 KiB at start) with
fresh mappings and unmaps them when they are freed, so each such block costs a page fault
per 4 KiB the first time it is touched: those faults were most of the cost of growing the
cache (32 rows, 16 -> 32 slots: 2.6-3.2 ms with them, 0.6-0.7 ms without) and a tenth of an
offline decode in all (``python -m bench.studies.profile_decode``; docs/BENCHMARKS.md). Raising the mmap
threshold to glibc's maximum (32 MiB on 64-bit) and the trim threshold keeps blocks below
32 MiB in the heap, where a freed block is reused with its pages already mapped.

The price is that the process keeps its peak heap (up to ``TRIM_THRESHOLD`` of free memory
at its top) after a burst, as an allocator arena does. Other C libraries (musl, macOS)
are left alone.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("nmt.engine")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
MMAP_THRESHOLD = 32 << 20  # glibc's maximum on 64-bit systems
TRIM_THRESHOLD = 512 << 20

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Set glibc's thresholds once per process; True where they are in effect."""
    global _applied
    if _applied is None:
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            _applied = False
        else:
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                                         TRIM_THRESHOLD))
        log.debug("keep freed memory for reuse: %s", _applied)
    return _applied
