"""The row-order copies of X that the column passes read when g is longer than the cache.

A column pass from CSC reads g at scattered rows, a memory access each when g does not fit in
cache (on KDDA's train half most of a pass's time). :func:`_column_layout` copies X once, at the
fit's first move by columns, in row order by ranges of columns whose sums stay in cache: the
frequent columns in CSR form per range, the rare ones in tiles of (range of columns, band of
rows). Each column's entries still come in ascending rows, so its sum adds the same terms in the
same order as one pass over the column (the same bits). The copy is held in a
:class:`~dpdist.solvers.fast_fw.state.Layout`.
"""

from __future__ import annotations

import numba
import numpy as np

from dpdist.solvers.fast_fw.state import Layout
from dpdist.solvers.fast_fw.threads import _serial_and_parallel

_RANGE_COLS = 1 << 19  # rare columns per range of a tile pass: their sums and first rows, 8 MB, stay in cache


@numba.njit(cache=True)
def _even_parts(c_ptr, cols, parts):
    """``parts`` + 1 bounds cutting ``cols`` into runs that hold about the same work (entries + 1
    per column): numba hands each thread an equal count of loop iterations, and the frequent
    columns are often neighbours (ids in order of first use), so the runs, not the columns, are
    the iterations."""
    H = cols.shape[0]
    cum = np.empty(H + 1, dtype=np.int64)
    cum[0] = 0
    for h in range(H):
        cum[h + 1] = cum[h] + c_ptr[cols[h] + 1] - c_ptr[cols[h]] + 1
    bounds = np.empty(parts + 1, dtype=np.int64)
    h = 0
    for q in range(parts + 1):
        goal = cum[H] * q // parts
        while h < H and cum[h] < goal:
            h += 1
        bounds[q] = h
    return bounds


@numba.njit(cache=True)
def _columns_between(c_ptr, lo, hi):
    """The columns with at least ``lo`` and fewer than ``hi`` entries, ascending."""
    D = c_ptr.shape[0] - 1
    H = 0
    for k in range(D):
        H += lo <= c_ptr[k + 1] - c_ptr[k] < hi
    cols = np.empty(H, dtype=np.int64)
    h = 0
    for k in range(D):
        if lo <= c_ptr[k + 1] - c_ptr[k] < hi:
            cols[h] = k
            h += 1
    return cols


_RANGE_COLS = 1 << 19  # rare columns per range of a tile pass: their sums and first rows, 8 MB, stay in cache


def _layout_counts(r_ptr, r_idx, rof, Rh, band, hptr, tptr):
    """:func:`_column_layout`'s counts, a band of rows at a time (the threads take bands: each
    writes only its rows' and its band's slots): row i's entries in frequent range r at
    hptr[r (n + 1) + i + 1], tile (rare range r, band b)'s at tptr[r bands + b + 1]."""
    n = r_ptr.shape[0] - 1
    n_bands = -(-n // band)
    for b in numba.prange(n_bands):
        for i in range(b * band, min(n, (b + 1) * band)):
            for p in range(r_ptr[i], r_ptr[i + 1]):
                r = rof[r_idx[p]]
                if r < Rh:
                    hptr[r * (n + 1) + i + 1] += 1
                else:
                    tptr[(r - Rh) * n_bands + b + 1] += 1


def _layout_fill(rows, num, rof, Rh, band, hptr, tptr, hcopy, tiles):
    """:func:`_column_layout`'s copies, a band of rows at a time (the threads take bands), the rows
    of a band in ascending order: each range's CSR rows (``hcopy`` = (h_col, h_val)) and each tile
    (``tiles`` = (e_row, e_col, e_val)) fill in ascending rows (``h_val``, ``e_val`` empty: the
    frequent, the rare columns' values are all 1, and not copied)."""
    r_ptr, r_idx, r_val = rows
    h_col, h_val = hcopy
    e_row, e_col, e_val = tiles
    h_unit, e_unit = h_val.shape[0] == 0, e_val.shape[0] == 0
    n = r_ptr.shape[0] - 1
    n_bands = -(-n // band)
    R = (tptr.shape[0] - 1) // n_bands
    for b in numba.prange(n_bands):
        hfill = np.empty(Rh, dtype=np.int64)
        fill = np.empty(R, dtype=np.int64)  # this band's tile cursors
        for r in range(R):
            fill[r] = tptr[r * n_bands + b]
        for i in range(b * band, min(n, (b + 1) * band)):
            for r in range(Rh):
                hfill[r] = hptr[r * (n + 1) + i]
            for p in range(r_ptr[i], r_ptr[i + 1]):
                k = r_idx[p]
                r = rof[k]
                if r < Rh:
                    e = hfill[r]
                    h_col[e] = num[k]
                    if not h_unit:
                        h_val[e] = r_val[p]
                    hfill[r] = e + 1
                else:
                    e = fill[r - Rh]
                    e_row[e] = i
                    e_col[e] = num[k]
                    if not e_unit:
                        e_val[e] = r_val[p]
                    fill[r - Rh] = e + 1


_counts_serial, _counts_parallel = _serial_and_parallel(_layout_counts)
_fill_serial, _fill_parallel = _serial_and_parallel(_layout_fill)


@numba.njit(cache=True)
def _unit_values(c_ptr, c_val, cols):
    """Whether every value stored in the columns ``cols`` is 1."""
    for k in cols:
        for p in range(c_ptr[k], c_ptr[k + 1]):
            if c_val[p] != 1.0:
                return False
    return True


@numba.njit(cache=True)
def _empty_layout(band, r_val):
    """The layout that holds nothing: g in one band, or not built yet (``band`` 0)."""
    i64, i32 = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
    v0 = np.empty(0, dtype=r_val.dtype)  # the copies' values in X's own dtype (float32 X: 4 bytes an entry)
    one = np.zeros(1, dtype=np.int64)
    return Layout(band, i64, one, i64, i32, v0, i64, one.copy(), one.copy(), i32, i32, v0, np.empty(0), i64)


@numba.njit(cache=True)
def _numbering(D, hot, hbounds, rc, bounds):
    """Each column's number in ``hot`` or ``rc`` (-1: empty) and its range: the frequent ranges
    0..Rh-1, the rare ones Rh + r."""
    Rh, R = hbounds.shape[0] - 1, bounds.shape[0] - 1
    num = np.full(D, -1, dtype=np.int32)
    rof = np.empty(D, dtype=np.int32)
    for r in range(Rh):
        for h in range(hbounds[r], hbounds[r + 1]):
            num[hot[h]] = h
            rof[hot[h]] = r
    for r in range(R):
        for c in range(bounds[r], bounds[r + 1]):
            num[rc[c]] = c
            rof[rc[c]] = Rh + r
    return num, rof


@numba.njit(cache=True)
def _layout_pointers(r_ptr, r_idx, rof, Rh, R, band, threads):
    """The frequent ranges' row pointers ``hptr`` (Rh (n + 1)) and the tiles' ``tptr`` (R bands + 1):
    counts on the threads (a band of rows each), then one prefix sum over each in order (each
    range starts at the last's end)."""
    n = r_ptr.shape[0] - 1
    n_bands = -(-n // band)
    hptr = np.zeros(Rh * (n + 1), dtype=np.int64)
    tptr = np.zeros(R * n_bands + 1, dtype=np.int64)
    if threads > 1:
        _counts_parallel(r_ptr, r_idx, rof, Rh, band, hptr, tptr)
    else:
        _counts_serial(r_ptr, r_idx, rof, Rh, band, hptr, tptr)
    for q in range(1, Rh * (n + 1)):
        hptr[q] += hptr[q - 1]
    for t in range(R * n_bands):
        tptr[t + 1] += tptr[t]
    return hptr, tptr


@numba.njit(cache=True)
def _layout_copies(rows, c_ptr, c_val, hot, rc, index, band, hptr, tptr, threads):
    """The copies themselves (:func:`_layout_fill`), in X's dtype, without the values of a part
    whose values are all 1 (binary X, as KDDA, URL: 8 bytes an entry less); ``index`` = (num, rof,
    Rh) of :func:`_numbering`. Returns (h_col, h_val, e_row, e_col, e_val)."""
    num, rof, Rh = index
    r_val = rows[2]
    n = rows[0].shape[0] - 1
    h_unit = _unit_values(c_ptr, c_val, hot)
    e_unit = _unit_values(c_ptr, c_val, rc)
    h_col = np.empty(hptr[Rh * (n + 1) - 1], dtype=np.int32)
    h_val = np.empty(0 if h_unit else hptr[Rh * (n + 1) - 1], dtype=r_val.dtype)
    E = tptr[tptr.shape[0] - 1]
    e_row, e_col, e_val = (
        np.empty(E, dtype=np.int32),
        np.empty(E, dtype=np.int32),
        np.empty(0 if e_unit else E, dtype=r_val.dtype),
    )
    if threads > 1:
        _fill_parallel(rows, num, rof, Rh, band, hptr, tptr, (h_col, h_val), (e_row, e_col, e_val))
    else:
        _fill_serial(rows, num, rof, Rh, band, hptr, tptr, (h_col, h_val), (e_row, e_col, e_val))
    return h_col, h_val, e_row, e_col, e_val


@numba.njit(cache=True)
def _column_layout(r_ptr, r_idx, r_val, c_ptr, c_val, band, threads):
    """What :func:`~dpdist.solvers.fast_fw.columns._by_columns` needs of X beside its CSC form, a
    :class:`~dpdist.solvers.fast_fw.state.Layout` ``(band, hot, hbounds, hptr, h_col, h_val, rc,
    bounds, tptr, e_row, e_col, e_val, acc, fc)``, built by the kernel at the fit's first
    move by columns (``band`` 0: not built, empty; the passes read CSC alone until then, and a fit
    whose moves all go by rows never builds it: on URL's train half the build took most of a run
    of 4,000 sparse steps). With g in one band of ``band`` rows (n <= band) it holds
    nothing: every column goes in one pass over its CSC entries
    (:func:`~dpdist.solvers.fast_fw.columns._single_pass_sums`).

    Otherwise a column's reads of g from CSC are at scattered rows of a g larger than the cache,
    a memory access each, so X is copied here in
    row order, by ranges of columns whose sums ``acc`` (and first rows ``fc``) stay in cache:

    * the columns with at least ``min_count`` = 8 entries per band (``hot``, ascending; KDDA's
      train half: 75k of 20.2M columns, 89% of the entries) in ``threads`` ranges of about
      equal work (``hbounds`` into ``hot``; fewer when their row pointers would take more
      memory than half the copy: each range has n + 1), each range in CSR form: row i's entries
      in range r from ``hptr[r * (n + 1) + i]``, their position in ``hot`` and value (``h_col``,
      ``h_val``; 12 bytes an entry; binary X, no ``h_val``: 4 bytes), summed by
      :func:`~dpdist.solvers.fast_fw.columns._hot_sums`.
    * the others, non-empty (``rc``, ascending: the rare ones, a few entries each), numbered
      0..C-1 and cut into ranges of about equal work (``bounds``, at most about ``_RANGE_COLS``
      columns each), a range's entries cut by band of rows: tile (range r, band b) holds its
      entries in ascending rows, from ``tptr[r * bands + b]``: their row, number in ``rc`` and
      value (``e_row``, ``e_col``, ``e_val``; 16 bytes an entry; binary X, no ``e_val``: 8 bytes),
      summed by :func:`~dpdist.solvers.fast_fw.columns._tiled_sums`.

    Either way each column's entries come in ascending rows, so its sum adds the same terms in
    the same order as one pass over the column (the same bits). ``acc``, ``fc``: scratch for
    the larger of the two. O(nnz) time: a pass over the values, and two passes on the threads
    (a band of rows each)."""
    n, D = r_ptr.shape[0] - 1, c_ptr.shape[0] - 1
    n_bands = -(-n // band) if band > 0 else 1
    if n_bands <= 1:
        return _empty_layout(band, r_val)
    min_count = 8 * n_bands
    hot = _columns_between(c_ptr, min_count, c_ptr[D] + 1)
    rc = _columns_between(c_ptr, 1, min_count)
    H, C = hot.shape[0], rc.shape[0]
    nh = 0  # the frequent columns' entries
    for h in range(H):
        nh += c_ptr[hot[h] + 1] - c_ptr[hot[h]]
    # hptr takes 8 (n + 1) bytes a range: no more ranges than keep it within half of h_col (at least one)
    Rh = max(1, min(threads, nh // (4 * (n + 1))))
    hbounds = _even_parts(c_ptr, hot, Rh)
    bounds = _even_parts(c_ptr, rc, max(-(-C // _RANGE_COLS), 8 * max(threads, 1)))
    num, rof = _numbering(D, hot, hbounds, rc, bounds)
    hptr, tptr = _layout_pointers(r_ptr, r_idx, rof, Rh, bounds.shape[0] - 1, band, threads)
    rows = (r_ptr, r_idx, r_val)
    h_col, h_val, e_row, e_col, e_val = _layout_copies(
        rows, c_ptr, c_val, hot, rc, (num, rof, Rh), band, hptr, tptr, threads
    )
    acc, fc = np.empty(max(H, C)), np.empty(max(H, C), dtype=np.int64)
    return Layout(band, hot, hbounds, hptr, h_col, h_val, rc, bounds, tptr, e_row, e_col, e_val, acc, fc)
