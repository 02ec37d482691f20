"""Fresh arrays for data that is written once and then read in order.

numpy advises the kernel to back every allocation of 4 MiB or more with transparent huge
pages (``madvise(MADV_HUGEPAGE)``). Where free memory is held by the page cache -- as on a
worker that has just read a store's files -- each huge page first needs direct reclaim and
compaction, and the first touch of the array stalls: on the 2-core benchmark VM, writing
1.27 GB of fresh int32 took 1.0-2.7 s under the advice when the page cache was full, 0.08 s
when free huge pages were at hand, and a steady 0.40 s in ordinary pages
(``benchmarks/results/full_size.md``). Decompressed store blocks and per-feature scores are
read sequentially, where huge pages save next to nothing, so they take ordinary pages.
"""

from __future__ import annotations

import mmap

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["sequential_empty"]

_ADVISED_BYTES = 4 << 20  # numpy's threshold for the huge-page advice


def sequential_empty(n: int, dtype: DTypeLike = np.float64) -> np.ndarray:
    """An uninitialised writable 1-d array of n elements, in anonymous private memory advised
    against huge pages when it is at least 4 MiB (``np.empty`` below that, or where the
    platform has no anonymous mappings). The memory is released with the last reference."""
    dtype = np.dtype(dtype)
    nbytes = int(n) * dtype.itemsize
    if nbytes < _ADVISED_BYTES or not hasattr(mmap, "MAP_ANONYMOUS"):
        return np.empty(n, dtype=dtype)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=dtype)
