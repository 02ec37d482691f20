"""dpdist.utils.prefetch: a prefetch hint in numba kernels."""

import re

import numba
import numpy as np
import pytest

from dpdist.utils.prefetch import prefetch

# x86: prefetcht0 / prefetchw; ARM: prfm
_PREFETCH = re.compile(r"\bprefetch\w*|\bprfm\b", re.IGNORECASE)


@numba.njit
def _gather_sum(a, idx, ahead):
    s = 0.0
    for p in range(idx.shape[0]):
        if p + ahead < idx.shape[0]:
            prefetch(a, idx[p + ahead])
        s += a[idx[p]]
    return s


@numba.njit
def _no_hint(a, idx):
    s = 0.0
    for p in range(idx.shape[0]):
        s += a[idx[p]]
    return s


@pytest.mark.parametrize(
    "dtype, index, step",
    [  # step 3: a strided (non-contiguous) view
        (np.float64, np.int64, 1),
        (np.float32, np.int32, 3),
        (np.uint8, np.uint8, 3),
        (np.int64, np.uint8, 1),
    ],
)
def test_prefetch_compiles_to_a_prefetch_instruction_and_changes_no_result(dtype, index, step):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 100, 3 * 100_000).astype(dtype)[::step]
    idx = rng.integers(0, min(a.size, np.iinfo(index).max + 1), 5_000).astype(index)
    for ahead in (0, 1, 64, 10_000):  # 10,000 > len(idx): the hint is never issued
        assert _gather_sum(a, idx, ahead) == _no_hint(a, idx) == float(a[idx].astype(np.float64).sum())
    sig = [s for s in _gather_sum.signatures if s[0] == numba.typeof(a) and s[1] == numba.typeof(idx)]
    assert _PREFETCH.search(_gather_sum.inspect_asm(sig[0])), "no prefetch instruction in the compiled loop"
    assert not _PREFETCH.search(next(iter(_no_hint.inspect_asm().values())))


def test_prefetch_reads_a_narrow_unsigned_index_as_unsigned():
    """uint8 200 asks for a[200], not a[-56]: the index is widened with zero extension, never sign
    extension (a prefetch of a wrong line would not fault, so the IR is what shows it)."""

    @numba.njit
    def hint_then_read(a, i):
        prefetch(a, i)
        return a[i]

    a = np.arange(256.0)
    assert hint_then_read(a, np.uint8(200)) == 200.0
    ir = next(iter(hint_then_read.inspect_llvm().values()))
    assert "zext i8" in ir and "sext i8" not in ir


def test_prefetch_refuses_what_it_cannot_address():
    @numba.njit
    def two_d(a):
        prefetch(a, 0)

    with pytest.raises(numba.core.errors.TypingError):
        two_d(np.zeros((2, 2)))
