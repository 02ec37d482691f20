"""Arrays in ordinary pages for data read in order."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from dpdist.utils.memory import sequential_empty


@pytest.mark.parametrize("n, dtype", [(0, np.float64), (10, np.int32), ((4 << 20) // 8, np.float64),
                                      (3_000_001, np.int32)])
def test_sequential_empty_is_a_writable_array_of_its_own(n, dtype):
    a, b = sequential_empty(n, dtype), sequential_empty(n, dtype)
    assert a.shape == (n,) and a.dtype == dtype and a.flags.writeable and a.flags.c_contiguous
    a[:] = 1
    b[:] = 2
    assert np.all(a == 1) and np.all(b == 2)
    mapped = isinstance(a.base, mmap.mmap) or isinstance(getattr(a.base, "obj", None), mmap.mmap)
    assert mapped == (n * np.dtype(dtype).itemsize >= 4 << 20)  # numpy's own below its huge-page threshold
