"""The column passes of a move on a column in most rows: target += X^T g, column by column.

A step of Alg. 2 of [RKL23] goes through the rows of the chosen column j and scatters their
entries into the D-long gradient; on a column in most rows (KDDA's most frequent ones) that is
~nnz random writes. :func:`_by_columns` sums each target_k over the moved rows on its own instead,
in ascending rows (the row pass's order), and lists the moved coordinates in the row pass's
first-touch order, so the state after the step is the same to the bit. For a g that fits in cache
one pass over each column's CSC entries (:func:`_single_pass_sums`); for a longer g, the frequent
columns from their row-order copy (:func:`_hot_sums`) and the rare ones from tiles of (range of
columns, band of rows) (:func:`_tiled_sums`), both from :func:`dpdist.solvers.fast_fw.layout._column_layout`,
so that g is read in sequence and the sums stay in cache. Each pass runs serially or on numba's
threads (each column's sum on one thread: the same bits).
"""

from __future__ import annotations

import numba
import numpy as np

from dpdist.solvers.fast_fw.state import Layout
from dpdist.solvers.fast_fw.threads import _serial_and_parallel
from dpdist.solvers.fast_fw.weights import _rebuilds


@numba.njit(cache=True)
def _column_sum(c_idx, c_val, g, p, end, s):
    """s plus g_i x_ik over one column's entries p..end-1 with g_i != 0, added in ascending rows, and
    the first such row (-1: none)."""
    f = -1
    for q in range(p, end):
        gi = g[c_idx[q]]
        if gi != 0.0:
            s += gi * c_val[q]
            if f < 0:
                f = c_idx[q]
    return s, f


@numba.njit(cache=True)
def _even_ranges(c_ptr, parts):
    """The same for the columns 0..D-1, by bisection on their cumulative work c_ptr[k] + k."""
    D = c_ptr.shape[0] - 1
    bounds = np.empty(parts + 1, dtype=np.int64)
    for q in range(parts + 1):
        goal = (c_ptr[D] + D) * q // parts
        lo, hi = 0, D
        while lo < hi:  # the first k with c_ptr[k] + k >= goal
            mid = (lo + hi) // 2
            if c_ptr[mid] + mid < goal:
                lo = mid + 1
            else:
                hi = mid
        bounds[q] = lo
    return bounds


def _single_pass_sums(c_ptr, c_idx, c_val, g, target, fcol, parts):
    """target_k += sum_i g_i x_ik for every column k in one pass over its CSC entries (ascending
    rows; fcol[k]: its first row with g_i != 0, -1: none); returns the number of columns that
    moved. For a g that fits in cache (:func:`_by_columns`). The threads take runs of columns of
    equal work (``parts`` of them: :func:`_even_ranges`; numba hands each thread an equal count of
    loop iterations, and the frequent columns are often neighbours); the loop over a column's
    entries is :func:`_column_sum` (written inline in the parallel loop's body, it makes numba's
    parfor pass fail on Python 3.12+: "unexpected cycle in lookup()")."""
    bounds = _even_ranges(c_ptr, parts)
    moved = 0
    for q in numba.prange(bounds.shape[0] - 1):
        for k in range(bounds[q], bounds[q + 1]):
            s, f = _column_sum(c_idx, c_val, g, c_ptr[k], c_ptr[k + 1], target[k])
            target[k] = s
            fcol[k] = f
            if f >= 0:
                moved += 1
    return moved


_single_serial, _single_parallel = _serial_and_parallel(_single_pass_sums)


def _hot_sums(c_ptr, c_idx, g, target, fcol, hot, hbounds, hptr, h_col, h_val, acc):
    """The frequent columns' sums from their row-order copy
    (:func:`~dpdist.solvers.fast_fw.layout._column_layout`): each range (the threads take ranges)
    goes through the rows in ascending order, reading g in sequence and adding g_i x_ik to its
    columns' sums in cache. Each sum adds its terms in ascending rows (the same bits as one pass
    over the column). No ``h_val``: every value is 1 (binary data, as KDDA's and
    URL's; gi * 1.0 is gi, bit for bit). A column's first row with g_i != 0 (fcol) is looked up
    afterwards in its CSC entries (usually the first: it is in most rows), which keeps the row
    loop to one add an entry. Returns the number of columns that moved."""
    R, n = hbounds.shape[0] - 1, g.shape[0]
    unit = h_val.shape[0] == 0 and h_col.shape[0] > 0
    moved = 0
    for r in numba.prange(R):
        for h in range(hbounds[r], hbounds[r + 1]):
            acc[h] = target[hot[h]]
        base = r * (n + 1)
        for i in range(n):
            gi = g[i]
            if gi != 0.0:
                if unit:
                    for e in range(hptr[base + i], hptr[base + i + 1]):
                        acc[h_col[e]] += gi
                else:
                    for e in range(hptr[base + i], hptr[base + i + 1]):
                        acc[h_col[e]] += gi * h_val[e]
        for h in range(hbounds[r], hbounds[r + 1]):
            k = hot[h]
            target[k] = acc[h]
            f = -1
            for p in range(c_ptr[k], c_ptr[k + 1]):
                if g[c_idx[p]] != 0.0:
                    f = c_idx[p]
                    break
            fcol[k] = f
            if f >= 0:
                moved += 1
    return moved


def _tiled_sums(g, target, fcol, rc, bounds, tptr, e_row, e_col, e_val, acc, fc):
    """The rare columns' sums from the tiles of :func:`~dpdist.solvers.fast_fw.layout._column_layout`:
    a range at a time (the threads take ranges), its columns' sums started from target and their first rows from -1,
    then its tiles' entries in order: band after band, ascending rows within a band. So each
    sum adds its terms in ascending rows, as one pass over the column would (the same bits).
    No ``e_val``: every value is 1 (as :func:`_hot_sums`). Returns the number of columns that
    moved."""
    R = bounds.shape[0] - 1
    n_bands = (tptr.shape[0] - 1) // R if R > 0 else 1
    unit = e_val.shape[0] == 0 and e_row.shape[0] > 0
    moved = 0
    for r in numba.prange(R):
        for c in range(bounds[r], bounds[r + 1]):
            acc[c] = target[rc[c]]
            fc[c] = -1
        for e in range(tptr[r * n_bands], tptr[(r + 1) * n_bands]):
            i = e_row[e]
            gi = g[i]
            if gi != 0.0:
                c = e_col[e]
                acc[c] += gi if unit else gi * e_val[e]  # loop-invariant test: as fast as two loops (measured)
                f = fc[c]
                fc[c] = i if f < 0 else f
        for c in range(bounds[r], bounds[r + 1]):
            target[rc[c]] = acc[c]
            fcol[rc[c]] = fc[c]
            if fc[c] >= 0:
                moved += 1
    return moved


_hot_serial, _hot_parallel = _serial_and_parallel(_hot_sums)
_tiled_serial, _tiled_parallel = _serial_and_parallel(_tiled_sums)


@numba.njit(cache=True)
def _column_passes(c_ptr, c_idx, c_val, g, target, fcol, lay: Layout, threads):
    """target_k += sum_i g_i x_ik for every column k and fcol[k], its first row with g_i != 0 (-1:
    none), by the passes :func:`_by_columns` picks; returns the number of columns that moved."""
    n = g.shape[0]
    if n <= lay.band or lay.band == 0:  # g in one band, or the layout not built (band 0)
        if threads > 1:
            return _single_parallel(c_ptr, c_idx, c_val, g, target, fcol, 8 * threads)
        return _single_serial(c_ptr, c_idx, c_val, g, target, fcol, 1)
    hot = (lay.hot, lay.hbounds, lay.hptr, lay.h_col, lay.h_val, lay.acc)
    tiles = (lay.rc, lay.bounds, lay.tptr, lay.e_row, lay.e_col, lay.e_val, lay.acc, lay.fc)
    if threads > 1:
        m = _hot_parallel(c_ptr, c_idx, g, target, fcol, *hot)
        m += _tiled_parallel(g, target, fcol, *tiles)
    else:
        m = _hot_serial(c_ptr, c_idx, g, target, fcol, *hot)
        m += _tiled_serial(g, target, fcol, *tiles)
    return m


@numba.njit(cache=True)
def _list_by_first_row(fcol, nfirst, touched):
    """The columns with fcol[k] >= 0 into ``touched`` ordered by (fcol[k], k), by a counting sort over
    the rows (``nfirst``: n + 1 counts)."""
    D, n = fcol.shape[0], nfirst.shape[0] - 1
    nfirst[:] = 0
    for k in range(D):
        if fcol[k] >= 0:
            nfirst[fcol[k] + 1] += 1
    for i in range(n):
        nfirst[i + 1] += nfirst[i]
    for k in range(D):  # ascending k within a row: a stable placement
        f = fcol[k]
        if f >= 0:
            touched[nfirst[f]] = k
            nfirst[f] += 1


@numba.njit(cache=True)
def _by_columns(c_ptr, c_idx, c_val, g, target, fcol, nfirst, touched, listing, lay: Layout, threads):
    """target_k += sum_i g_i x_ik over the rows with g_i != 0, for every column k, in ascending i
    (the row pass's order). ``listing`` 1: the moved k into ``touched`` ordered by (first such row,
    k) -- the row pass's first-touch order for canonical X -- by a counting sort over the rows
    (``fcol``: each column's first such row, -1: none, which the caller set for the empty
    columns; ``nfirst``: n + 1 counts); returns their number. 2: the same unless
    :func:`~dpdist.solvers.fast_fw.weights._rebuilds` (then only their number). 0: neither (returns 0).

    With g in one band or the layout ``lay`` (:func:`~dpdist.solvers.fast_fw.layout._column_layout`)
    not built yet (band 0), one pass over each column's CSC entries (:func:`_single_pass_sums`);
    otherwise the frequent columns from their row-order copy (:func:`_hot_sums`) and the rare ones
    from their tiles (:func:`_tiled_sums`). With ``threads`` > 1
    (:func:`~dpdist.solvers.fast_fw.threads._threads`) the passes run on numba's threads, each
    column on one."""
    m = _column_passes(c_ptr, c_idx, c_val, g, target, fcol, lay, threads)
    if listing == 0:
        return 0
    if listing == 2 and _rebuilds(m, target.shape[0]):
        return m
    _list_by_first_row(fcol, nfirst, touched)
    return m
