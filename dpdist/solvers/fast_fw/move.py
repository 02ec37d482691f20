"""A Frank-Wolfe move of the fast solver: w~_j += delta and the gradient state that follows it.

The weights are kept as w = w_m * w~ and the margins as X w = w_m * vbar, so moving to the vertex
sigma lambda e_j touches only the S_r rows that contain feature j and, through them, O(S_r S_c)
entries of the gradient (Alg. 2 of [RKL23]): squared loss, beta = X^T X w~ moves by
delta X^T x_(j); logistic loss, the cached row derivatives qbar_i = l'(w_m vbar_i; y_i) are
refreshed on the touched rows and alpha = X^T qbar follows them. The moved coordinates are
listed in the order they were first touched, for the queue or sampler update.

Columns in most rows. [RKL23]'s cost argument assumes S_r small; on KDDA-like data the mechanism
keeps choosing the most frequent columns (in up to ~98% of the rows), and a step then scatters
~nnz random updates into the D-long gradient. Such a step (its row-order work above the share
``heavy`` of nnz + D + n) is summed column by column instead (:func:`_move_by_columns`, through
:mod:`dpdist.solvers.fast_fw.columns`): the same products in the same order and the moved
coordinates in the same order, so the state after the step is the same to the bit (tested) and
the choice, a function of the data, changes only the step's time (the operator's log, never a
release). On KDDA's train half a step on its most frequent column is several times faster by
columns than in row order (``benchmarks/fw_full_shape_steps.py`` measures it).

Memory stalls. The row pass reads and writes alpha_k (a D-long array: 133 MB at Webspam's 16.6M
columns) and a mark at scattered coordinates, one cache miss each when D is large, so it asks for
these loads some entries ahead (software prefetch, :mod:`dpdist.utils.prefetch`, through the
cursor :func:`_ahead`): the steps are faster for it on wide data, with the same path and weights
to the bit (benchmarks/fw_prefetch.py measures both; its dated results under benchmarks/results/).
"""

from __future__ import annotations

import math

import numba

from dpdist.solvers.fast_fw.columns import _by_columns
from dpdist.solvers.fast_fw.select import _selection_update
from dpdist.solvers.fast_fw.state import _AHEAD, _ROWS_AHEAD, Config, Data, Iterate, Layout, Scratch
from dpdist.solvers.fast_fw.threads import _serial_and_parallel
from dpdist.utils.prefetch import prefetch


@numba.njit(cache=True)
def _sigmoid(m: float) -> float:
    """1 / (1 + e^-m), without overflow."""
    if m >= 0:
        return 1.0 / (1.0 + math.exp(-m))
    e = math.exp(m)
    return e / (1.0 + e)


def _column_moves(j, delta, c_ptr, c_idx, c_val, y, logistic, wm, vbar, q, gbuf):
    """vbar += delta x_(j) on the rows of column j, and g there (gbuf): logistic, the change of qbar_i
    (qbar_i updated); squared, delta x_ij. Each row is one iteration's (canonical CSC: a row once
    per column), so the threads give the same bits."""
    p0 = c_ptr[j]
    for e in numba.prange(c_ptr[j + 1] - p0):
        i, xij = c_idx[p0 + e], c_val[p0 + e]
        vbar[i] += delta * xij
        if logistic:
            new = _sigmoid(wm * vbar[i]) - y[i]
            gbuf[i] = new - q[i]
            q[i] = new
        else:
            gbuf[i] = delta * xij


_moves_serial, _moves_parallel = _serial_and_parallel(_column_moves)


@numba.njit(cache=True)
def _ahead(r_ptr, c_idx, p1, ap, app, astop, steps):
    """:func:`_move`'s look-ahead cursor ``steps`` entries on along the entries of column j's rows,
    in the row pass's order: it stands at entry ``app`` of row c_idx[ap], which ends at ``astop``,
    and moves on to the next rows of column j (ap < p1) as rows end. Started at the first row's
    first entry; ap = p1 once past the last row (app and astop then mean nothing)."""
    app += steps
    while app >= astop and ap < p1:
        over = app - astop
        ap += 1
        if ap < p1:
            i = c_idx[ap]
            app, astop = r_ptr[i] + over, r_ptr[i + 1]
    return ap, app, astop


@numba.njit(cache=True)
def _by_rows(j, r_ptr, c_ptr, c_idx, heavy, D, n):
    """Whether a move on column j goes by rows (:func:`_move`): its row-order work, the entries of
    column j's rows, is at most ``heavy`` times the size of X (nnz + D + n)."""
    limit, work = heavy * (c_ptr[c_ptr.shape[0] - 1] + D + n), 0
    for p in range(c_ptr[j], c_ptr[j + 1]):
        i = c_idx[p]
        work += r_ptr[i + 1] - r_ptr[i]
        if work > limit:  # decided: no need to read the rest of column j's rows
            return False
    return True


@numba.njit(cache=True)
def _move_by_columns(j, delta, data: Data, cfg: Config, wm, it: Iterate, buf: Scratch, ordered, lay: Layout):
    """:func:`_move` column by column: the rows of column j first (vbar, and their g in ``gbuf``; on
    the threads), then each alpha_k (or beta_k) summed over them by :func:`_by_columns`; ``gbuf``
    is left clean. Returns the number of moved coordinates (listed unless ``ordered`` is False
    and the sampler rebuilds every weight)."""
    c_ptr, c_idx, c_val, gbuf = data.c_ptr, data.c_idx, data.c_val, buf.gbuf
    logistic, threads = cfg.logistic, cfg.threads
    if threads > 1:
        _moves_parallel(j, delta, c_ptr, c_idx, c_val, data.y, logistic, wm, it.vbar, it.q, gbuf)
    else:
        _moves_serial(j, delta, c_ptr, c_idx, c_val, data.y, logistic, wm, it.vbar, it.q, gbuf)
    target = it.alpha if logistic else it.beta
    listing = (1 if ordered else 2) if logistic else 0
    n_touched = _by_columns(c_ptr, c_idx, c_val, gbuf, target, buf.fcol, buf.nfirst, buf.touched, listing, lay, threads)
    for p in range(c_ptr[j], c_ptr[j + 1]):
        gbuf[c_idx[p]] = 0.0
    return n_touched


@numba.njit(cache=True)
def _move_by_rows(j, delta, data, logistic, use_gram, wm, it, buf):
    """:func:`_move` row by row, as Alg. 2 of [RKL23], with its scattered loads asked for ahead;
    returns the number of moved coordinates (logistic; squared: 0)."""
    r_ptr, r_idx, r_val, c_ptr, c_idx, c_val, y = (
        data.r_ptr,
        data.r_idx,
        data.r_val,
        data.c_ptr,
        data.c_idx,
        data.c_val,
        data.y,
    )
    vbar, alpha, q, beta, mark, touched = it.vbar, it.alpha, it.q, it.beta, buf.mark, buf.touched
    n_touched = 0
    p0, p1 = c_ptr[j], c_ptr[j + 1]
    # a look-ahead cursor _AHEAD entries further along the entries this loop visits (:func:`_ahead`)
    ap, app, astop = p1, 0, 0
    if p0 < p1:
        ap, app, astop = _ahead(r_ptr, c_idx, p1, p0, r_ptr[c_idx[p0]], r_ptr[c_idx[p0] + 1], _AHEAD)
    for p in range(p0, p1):
        i, xij = c_idx[p], c_val[p]
        if p + _ROWS_AHEAD < p1:  # a later row's state and the first line of its entries
            i2 = c_idx[p + _ROWS_AHEAD]
            prefetch(vbar, i2)
            prefetch(q, i2)
            prefetch(r_idx, r_ptr[i2])
        vbar[i] += delta * xij
        if logistic:
            new = _sigmoid(wm * vbar[i]) - y[i]
            gam = new - q[i]
            q[i] = new
            if gam == 0.0:  # the row is skipped: so is its stretch of the cursor
                ap, app, astop = _ahead(r_ptr, c_idx, p1, ap, app, astop, r_ptr[i + 1] - r_ptr[i])
                continue
            for pp in range(r_ptr[i], r_ptr[i + 1]):
                if ap < p1:
                    prefetch(alpha, r_idx[app])
                    prefetch(mark, r_idx[app])
                    ap, app, astop = _ahead(r_ptr, c_idx, p1, ap, app, astop, 1)
                k = r_idx[pp]
                alpha[k] += gam * r_val[pp]
                touched[n_touched] = k  # kept only if k is new in this step (branch-free)
                n_touched += 1 - mark[k]
                mark[k] = 1
        elif not use_gram:
            for pp in range(r_ptr[i], r_ptr[i + 1]):
                if ap < p1:
                    prefetch(beta, r_idx[app])
                    ap, app, astop = _ahead(r_ptr, c_idx, p1, ap, app, astop, 1)
                beta[r_idx[pp]] += delta * xij * r_val[pp]
    for p in range(n_touched):
        mark[touched[p]] = 0
    return n_touched


@numba.njit(cache=True)
def _move(j, delta, data: Data, cfg: Config, wm, it: Iterate, buf: Scratch, ordered, lay: Layout):
    """w~_j += delta: vbar += delta x_(j), and the gradient state follows it. Logistic: qbar on the
    rows of column j, alpha through them, the moved coordinates listed in ``touched`` in the order
    they were first touched (returned: their number; unless ``ordered``, the list is left unwritten
    when :func:`~dpdist.solvers.fast_fw.weights._rebuilds` says so: the sampler then rebuilds every
    weight, :func:`~dpdist.solvers.fast_fw.weights._reweight`, and reads no list). Squared (no
    Gram): beta += delta X^T x_(j). ``cfg`` gives the loss, the Gram flag, ``heavy`` and the
    column passes' ``threads``.

    Alg. 2 of [RKL23] goes through the rows of column j: O(S_r S_c) scattered updates of alpha. A
    column in most rows (KDDA's most frequent ones) makes that a pass over all the data with a
    random write per entry. When that work exceeds ``heavy`` times the size of X (nnz + D + n),
    :func:`_by_columns` sums each alpha_k on its own instead (from CSC, or from the layout's
    row-order copies ``lay`` with its sums in cache; the rows of column j are updated first, on
    ``threads`` threads). It adds the same products in the same order (ascending rows of
    column j for each k) and lists the coordinates in the same order, so both give the same state
    to the bit (tested): the choice, which depends on the data (column j's rows and their
    lengths), changes the time of a step and nothing else.

    The row pass asks for its scattered loads ahead (:func:`dpdist.utils.prefetch.prefetch`):
    alpha_k and the mark of the entry ``_AHEAD`` entries on, through a cursor over the same rows
    in the same order (:func:`_ahead`; a skipped row, gamma = 0, skips its stretch of the cursor
    too), and the row state and first entries of the row ``_ROWS_AHEAD`` rows on. A hint, no
    result changes."""
    # no column buffers (heavy is inf, or the Gram matrix moves beta): by rows
    n, D = data.y.shape[0], it.alpha.shape[0]
    if buf.gbuf.shape[0] > 0 and not _by_rows(j, data.r_ptr, data.c_ptr, data.c_idx, cfg.heavy, D, n):
        return _move_by_columns(j, delta, data, cfg, wm, it, buf, ordered, lay)
    return _move_by_rows(j, delta, data, cfg.logistic, cfg.use_gram, wm, it, buf)


@numba.njit(cache=True)
def _move_and_update(j, delta, data: Data, cfg: Config, wm, it: Iterate, buf: Scratch, lay: Layout, heap, smp, size):
    """w~_j += delta (already added to w~ by the caller) through :func:`_move`, beta through the
    Gram matrix when it moves by its rows, then the queue or sampler once per moved coordinate
    (:func:`~dpdist.solvers.fast_fw.select._selection_update`); returns the heap size. A
    Frank-Wolfe step and a screening's zeroing both go through here."""
    n_touched = _move(j, delta, data, cfg, wm, it, buf, cfg.mode == 0, lay)
    if cfg.use_gram:
        for k in range(it.beta.shape[0]):
            it.beta[k] += delta * data.gram[j, k]
    return _selection_update(it.alpha, buf.touched, n_touched, cfg, heap, smp, size)
