"""A worker's memory between the stages of a run (run by ``dpdist.flows.runtime.trim_workers`` on each worker).

Kept apart from the flows: a worker imports this module to run :func:`malloc_trim`, and nothing heavier.
"""

from __future__ import annotations

import ctypes

__all__ = ["malloc_trim"]


def malloc_trim() -> int:
    """glibc's ``malloc_trim(0)`` in this process: the free memory its heaps hold given back to the system
    (Dask's "manual trim"). 1 when some was given back, 0 when none was or there is no glibc."""
    try:
        return int(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return 0
