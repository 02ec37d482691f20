"""The main loop of the fast (DP) Frank-Wolfe: Alg. 2 of [RKL23] as one numba kernel.

Each iteration chooses a vertex (:mod:`dpdist.solvers.fast_fw.select`), moves the weights
w <- (1 - eta) w + eta sigma lam e_j as w_m <- (1 - eta) w_m and w~_j += delta
(:mod:`dpdist.solvers.fast_fw.move`), folds the scale back and refreshes the stale logistic
derivatives when due, and runs a scheduled screening pass (:mod:`dpdist.solvers.fast_fw.screen`).
For logistic loss the shrink changes the margins of untouched rows too, so their cached qbar are
stale (docs/algorithms.md §2.4); a full refresh every ``refresh`` steps recomputes qbar and alpha
exactly (O(nnz), :func:`_full_gradient`) and bounds the drift. Privacy is unaffected: every qbar_i
is l' at a past iterate fixed by the public history, so one record still moves each alpha_k by at
most L. The scale w_m is folded back into w~, vbar (and beta) at every refresh and whenever it
drops below 1e-30, so neither underflows.

The kernel takes its state grouped (:mod:`dpdist.solvers.fast_fw.state`) and releases the GIL, so
a caller's thread can report the completed iterations while it runs.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from dpdist.solvers.fast_fw.columns import _by_columns
from dpdist.solvers.fast_fw.layout import _column_layout
from dpdist.solvers.fast_fw.move import _by_rows, _move_and_update, _sigmoid
from dpdist.solvers.fast_fw.screen import _fast_screen
from dpdist.solvers.fast_fw.select import _choose_vertex, _selection_reset
from dpdist.solvers.fast_fw.state import Config, Data, Heap, Iterate, Layout, Sampler, Scratch, Screen


@numba.njit(cache=True)
def _mean_loss(logistic: bool, wm: float, vbar: np.ndarray, y: np.ndarray) -> float:
    """The mean loss at the margins wm * vbar."""
    s = 0.0
    for i in range(y.shape[0]):
        m = wm * vbar[i]
        if logistic:
            s += max(m, 0.0) + math.log1p(math.exp(-abs(m))) - y[i] * m
        else:
            s += 0.5 * (m - y[i]) ** 2
    return s / y.shape[0]


@numba.njit(cache=True)
def _full_gradient(data: Data, wm, it: Iterate, buf: Scratch, lay: Layout, threads):
    """Exact qbar_i = l'(w_m vbar_i; y_i) (logistic) on every row and alpha = X^T qbar: O(nnz).
    Whenever the kernel keeps the column buffers (``buf.fcol`` non-empty: the column-order moves
    are on) alpha comes from the column passes (:func:`~dpdist.solvers.fast_fw.columns._by_columns`,
    on the threads), faster than by rows on wide data, where the row pass scatters into a D-long
    alpha (benchmarks/fw_full_shape_steps.py measures both). The same terms in the same order (ascending
    rows) except the q_i = 0 ones, which add +-0 to a sum that starts at +0 and so leave its bits
    as they are (a sum of non-zero terms that cancels is +0 too). ``buf.fcol`` is scratch then."""
    alpha, q, y = it.alpha, it.q, data.y
    alpha[:] = 0.0
    for i in range(y.shape[0]):
        m = wm * it.vbar[i]
        q[i] = _sigmoid(m) - y[i]
    if buf.fcol.shape[0] > 0:
        _by_columns(data.c_ptr, data.c_idx, data.c_val, q, alpha, buf.fcol, buf.nfirst, buf.touched, 0, lay, threads)
        return
    r_ptr, r_idx, r_val = data.r_ptr, data.r_idx, data.r_val
    for i in range(y.shape[0]):
        qi = q[i]
        for p in range(r_ptr[i], r_ptr[i + 1]):
            alpha[r_idx[p]] += qi * r_val[p]


@numba.njit(cache=True)
def _start_at(w0, data: Data, it: Iterate, logistic):
    """A public starting point w0: w~ = w0, vbar = X w0, beta = X^T vbar (squared); O(nnz)."""
    r_ptr, r_idx, r_val = data.r_ptr, data.r_idx, data.r_val
    it.wt[:] = w0
    for i in range(it.vbar.shape[0]):
        s = 0.0
        for p in range(r_ptr[i], r_ptr[i + 1]):
            s += r_val[p] * w0[r_idx[p]]
        it.vbar[i] = s
        if not logistic:
            for p in range(r_ptr[i], r_ptr[i + 1]):
                it.beta[r_idx[p]] += s * r_val[p]


@numba.njit(cache=True)
def _new_state(n, D, cfg: Config, cols):
    """The zero iterate and the buffers of the run: the queue (non-private logistic runs), the
    sampler (modes 1, 2; otherwise one-item dummies) and the move's scratch (the column passes'
    buffers only with ``cols``)."""
    it = Iterate(np.zeros(D), np.zeros(n), np.zeros(D), np.zeros(n), np.zeros(1 if cfg.logistic else D))
    heap = cfg.logistic and cfg.mode == 0
    cap = 4 * D + 16 if heap else 1
    queue = Heap(
        np.empty(cap),
        np.empty(cap, dtype=np.int64),
        np.empty(D if heap else 1),
        np.empty(D if heap else 1, dtype=np.int64),
    )
    ns = D if cfg.mode in (1, 2) else 1
    c = np.empty((ns + (1 << cfg.shift) - 1) >> cfg.shift)
    # wbuf is not xbuf: an in-place call would not vectorise (aliasing); st = (ref, exp(-2 ref))
    smp = Sampler(
        np.empty(ns), c, np.empty_like(c), np.empty(2), np.empty(ns), np.empty(ns), np.empty(ns, dtype=np.int64)
    )
    buf = Scratch(
        np.zeros(D, dtype=np.uint8),
        np.empty(D + 1, dtype=np.int64),
        np.zeros(n if cols else 0),
        np.full(D if cols else 0, -1, dtype=np.int64),  # -1: the empty columns, which no pass writes
        np.empty(n + 1 if cols else 0, dtype=np.int64),
    )
    return it, queue, smp, buf


@numba.njit(cache=True)
def _fold_and_refresh(t, data: Data, cfg: Config, wm, it: Iterate, buf: Scratch, lay: Layout, heap, smp, size):
    """Fold the scale w_m into w~, vbar (and beta) when it drops below 1e-30 or a refresh is due,
    then refresh the stale derivatives and the selection state (logistic, every ``refresh``
    steps); returns (w_m, heap size)."""
    do_refresh = cfg.logistic and cfg.refresh > 0 and t % cfg.refresh == 0
    if wm < 1e-30 or do_refresh:
        for k in range(it.wt.shape[0]):
            it.wt[k] *= wm
        if not cfg.logistic:
            for k in range(it.beta.shape[0]):
                it.beta[k] *= wm
        for i in range(it.vbar.shape[0]):
            it.vbar[i] *= wm
        wm = 1.0
    if do_refresh:
        _full_gradient(data, wm, it, buf, lay, cfg.threads)
        size = _selection_reset(it.alpha, cfg, heap, smp, size)
    return wm, size


@numba.njit(cache=True, nogil=True)  # nogil: a caller's thread can watch ``done`` while it runs
def _fast_fw(data: Data, cfg: Config, rng, done, w0, scr: Screen):
    """``cfg.T`` steps of the fast Frank-Wolfe from w0 (empty: 0); ``done[0]``: the completed
    iterations (a public count). Returns (w, path, objective, (alpha, W, c, st), band): the last
    two are internal state for the tests (alpha is the raw gradient; the band of the column
    passes' layout, 0: never built), which :func:`~dpdist.solvers.fast_fw.solver.fast_frank_wolfe`
    drops."""
    n, D = data.y.shape[0], data.ybar.shape[0]
    cols = math.isfinite(cfg.heavy) and not cfg.use_gram  # buffers of the column-order update (_move)
    it, heap, smp, buf = _new_state(n, D, cfg, cols)
    if w0.shape[0] == D:
        _start_at(w0, data, it, cfg.logistic)
    path = np.empty(cfg.T, dtype=np.int64)
    objective = np.empty(cfg.T // cfg.record_every if cfg.record_every > 0 else 0)
    # the row-order copies of the column passes: built at the first move that goes by columns (a run
    # whose moves all go by rows never pays for them; until then the passes read CSC alone)
    lay = _column_layout(data.r_ptr, data.r_idx, data.r_val, data.c_ptr, data.c_val, 0, cfg.threads)
    lazy = cols and n > cfg.band
    wm, size = 1.0, 0
    if cfg.logistic:
        _full_gradient(data, wm, it, buf, lay, cfg.threads)
        size = _selection_reset(it.alpha, cfg, heap, smp, size)
    for t in range(1, cfg.T + 1):
        done[0] = t - 1  # iterations completed, for a progress display (a public count)
        j, sigma, size = _choose_vertex(data, cfg, wm, it, heap, smp, size, rng)
        path[t - 1] = int(sigma) * (j + 1)
        # ---- move: w <- (1 - eta) w + eta sigma lam e_j
        eta = 2.0 / (t + 2.0)
        wm *= 1.0 - eta
        delta = eta * sigma * cfg.lam / wm
        it.wt[j] += delta
        if lazy and not _by_rows(j, data.r_ptr, data.c_ptr, data.c_idx, cfg.heavy, D, n):  # _move's own test
            lay = _column_layout(data.r_ptr, data.r_idx, data.r_val, data.c_ptr, data.c_val, cfg.band, cfg.threads)
            lazy = False
        size = _move_and_update(j, delta, data, cfg, wm, it, buf, lay, heap, smp, size)
        wm, size = _fold_and_refresh(t, data, cfg, wm, it, buf, lay, heap, smp, size)
        if scr.mode > 0 and scr.mask[t] != 0:
            size = _fast_screen(t, scr, data, cfg, wm, it, buf, lay, heap, smp, size, rng)
        if cfg.record_every > 0 and t % cfg.record_every == 0:
            objective[t // cfg.record_every - 1] = _mean_loss(cfg.logistic, wm, it.vbar, data.y)
    done[0] = cfg.T
    return it.wt * wm, path, objective, (it.alpha, smp.W, smp.c, smp.st), lay.band
