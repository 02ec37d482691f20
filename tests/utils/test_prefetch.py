"""dpdist.utils.prefetch: a prefetch hint in numba kernels, and the solver's use of it."""

import re

import numba
import numpy as np
import pytest
import scipy.sparse as sp

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


@pytest.mark.parametrize("dtype, index, step", [  # step 3: a strided (non-contiguous) view
    (np.float64, np.int64, 1), (np.float32, np.int32, 3), (np.uint8, np.uint8, 3), (np.int64, np.uint8, 1)])
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
    """uint8 200 asks for a[200], not a[-56] (a sign-extended index): the line asked for is the one the
    loop then reads, seen as a fault-free run over a 256-element array at its end."""
    @numba.njit
    def hint_then_read(a, i):
        prefetch(a, i)
        return a[i]

    a = np.arange(256.0)
    assert hint_then_read(a, np.uint8(200)) == 200.0
    ir = next(iter(hint_then_read.inspect_llvm().values()))
    assert "zext i8" in ir and "sext i8" not in ir.split("llvm.prefetch")[0].rsplit("define", 1)[-1]


def test_prefetch_refuses_what_it_cannot_address():
    @numba.njit
    def two_d(a):
        prefetch(a, 0)

    with pytest.raises(numba.core.errors.TypingError):
        two_d(np.zeros((2, 2)))


def test_the_look_ahead_cursor_visits_the_rows_of_a_column_in_the_moves_order():
    """:func:`fast_frank_wolfe._ahead` walks the entries of column j's rows in the order the row pass
    reads them (row after row of column j, each row's entries in order), then stays past the end."""
    from dpdist.solvers.fast_frank_wolfe import _ahead

    rng = np.random.default_rng(3)
    X = sp.random(60, 30, density=0.2, format="csr", random_state=4)
    X.data[:] = 1.0
    Xc = X.tocsc()
    for j in rng.permutation(30)[:12]:
        p0, p1 = Xc.indptr[j], Xc.indptr[j + 1]
        expected = [pp for p in range(p0, p1) for pp in range(X.indptr[Xc.indices[p]], X.indptr[Xc.indices[p] + 1])]
        seen, ap, app, astop = [], p0, 0, 0
        if p0 < p1:
            app, astop = X.indptr[Xc.indices[p0]], X.indptr[Xc.indices[p0] + 1]
        while ap < p1:
            seen.append(app)
            ap, app, astop = _ahead(X.indptr, Xc.indices, p1, ap, app, astop, 1)
        assert seen == expected
        assert _ahead(X.indptr, Xc.indices, p1, ap, app, astop, 1)[0] == p1  # past the end it stays there
        # several entries at once (the start _AHEAD on, a skipped row): as many single steps
        for start in range(0, len(expected), 3):
            for steps in (0, 1, 2, 5, 64, len(expected)):
                row = next(p for p in range(p0, p1) if X.indptr[Xc.indices[p]] <= expected[start]
                           < X.indptr[Xc.indices[p] + 1])
                cur = (row, expected[start], X.indptr[Xc.indices[row] + 1])
                one = cur
                for _ in range(steps):
                    one = _ahead(X.indptr, Xc.indices, p1, *one, 1)
                many = _ahead(X.indptr, Xc.indices, p1, *cur, steps)
                assert many[0] == one[0] and (many[0] == p1 or many[1:] == one[1:]), (start, steps)
