"""Fast sparse (DP) Frank-Wolfe (seed 004 Alg. 2) with the lazy max-queue (Alg. 3) and the BSLS sampler (Alg. 4).

Same problem, losses, privacy plan and vertex distribution as
:mod:`dpdist.solvers.frank_wolfe` (Alg. 1); what changes is the cost of a step. The weights are
kept as w = w_m * w~ (the shrink w <- (1 - eta) w is one scalar multiply) and the margins as
X w = w_m * vbar. Moving to vertex sigma lambda e_j touches only the S_r rows that contain
feature j and, through them, O(S_r S_c) entries of the gradient:

* squared loss -- exact: alpha = X^T (X w - y) = w_m beta - X^T y with beta = X^T X w~ kept
  up to date (beta += delta X^T x_(j)). Every alpha_k moves with w_m, so vertex selection
  scans all D coordinates (non-private argmax, or the sampler rebuilt from all D weights
  for the exponential mechanism). The coordinate sequence and weights are Alg. 1's (tested).
* logistic loss -- seed 004's Alg. 2: cached row derivatives qbar_i = l'(w_m vbar_i; y_i) are
  refreshed only on the touched rows, alpha = X^T qbar follows them in O(S_r S_c), and the
  vertex comes from the lazy max-queue (non-private) or the exact exponential-mechanism
  sampler over the weights 2 cosh(eps0 alpha_j / (2 L)), held as W_j = 2 cosh(a_j) e^-ref
  with one shared exponent ref (:mod:`dpdist.solvers.samplers`) and updated in O(1) each:
  the touched coordinates of a step are gathered once (a coordinate in several touched rows
  is updated once) and their weights computed in one vectorised pass. The shrink
  changes the margins of untouched rows too, so their qbar are stale (spec 2.4 FLAG); a full
  refresh every ``refresh`` steps recomputes qbar and alpha exactly (O(nnz)) and bounds the
  drift. Privacy is unaffected: every qbar_i is l' at a past iterate fixed by the public
  history, so one record still moves each alpha_k by at most L.

Columns in most rows. Seed 004's cost argument assumes S_r small; on KDDA-like data the
mechanism keeps choosing the most frequent columns (in up to ~98% of the rows), and a step of
Alg. 2 then scatters ~nnz random updates into the D-long gradient. Such a step (its row-order
work above ``_HEAVY_SHARE`` of nnz + D + n) is summed column by column instead (:func:`_move`,
:func:`_by_columns`): each alpha_k (or beta_k) over the moved rows in the same order as the row
pass (ascending rows), and the moved coordinates are listed in the row pass's first-touch
order, so the state after the step is the same to the bit (tested) and the choice, a function
of the data, changes only the step's time (the operator's log, never a release). For a g
longer than the cache, the sums come from copies of X made at the fit's first such step
(:func:`_column_layout`): the frequent columns' entries in row order, one range of columns per
thread, and the rare ones in tiles of (range of columns, band of rows), so that g is read in
sequence and the sums stay in cache. A pass over at least ``_PARALLEL_NNZ`` entries runs on
numba's threads (each column's sum on one: the same bits), as do the updates of column j's rows
and, when a step moves a sixteenth of the D coordinates or more, the rebuild of every sampler
weight (:func:`_reweight`). On KDDA's train half (6.7M x 20.2M, 246M entries, 2 cores) a step on
its most frequent column went from ~1.7 s (row order) to ~0.83 s (threaded CSC passes), then to
~0.44 s (row-order copies; same run: 1.00 s before) and ~0.35 s (binary tiles, threaded max:
benchmarks/fw_full_shape_steps.py, 2026-11-24).

Memory stalls. A step of Alg. 2 reads and writes alpha_k (a D-long array: 133 MB at Webspam's
16.6M columns), a mark and then the sampler weight W_k at scattered coordinates, one cache miss
each when D is large. The row pass of a move and the re-weighting ask for these loads some
entries ahead (software prefetch, :mod:`dpdist.utils.prefetch`), so they overlap: on a
Webspam-shaped set of 60,000 rows (all 16.6M columns) a step at epsilon = 0.1 went from 1.02 to
0.56 ms, on News20's shape from 0.127 to 0.091 ms (benchmarks/fw_prefetch.py; the same path and
weights to the bit; RCV1's 47k columns stay in cache: no change), on Webspam's train half at full
shape from 6.6 to 4.0 ms (epsilon = 0.1) and 5.2 to 2.6 ms (epsilon = 1;
benchmarks/fw_full_shape_steps.py, 2026-11-27).

The scale w_m is folded back into w~, vbar (and beta) at every refresh and whenever it drops
below 1e-30, so neither underflows. Modes: ``selection=None`` (queue), ``"exponential"``
(BSLS, Alg. 2 + 4), ``"exponential-bruteforce"`` (an O(D) exponential race -- Gumbel-max --
over the same maintained weights, the seed's Alg. 2 + brute-force noisy-max ablation),
``"laplace"`` (Talwar et al.'s Laplace report-noisy-max over the 2D signed vertices, O(D) per
step, as Alg. 1 draws it: the DP-FW of seeds 000/001).

``gram=True`` (squared loss, small D): beta moves by delta times a row of the precomputed X^T X
instead of through the rows of column j, so a step costs O(S_r + D) instead of O(S_r S_c) --
the difference on dense low-dimensional data (seed 001's regression sets); O(n D^2) once.

Screening (``screening``; :mod:`dpdist.solvers.screening`): at a scheduled iteration, after the
move (and after a refresh due at that iteration), one pass computes u^T g, ||u||, ||g|| over the
rows (O(n): u_i = w_m vbar_i; g_i = u_i - y_i, or the cached qbar_i for logistic loss), alpha
(squared: w_m beta - X^T y, O(D); logistic: maintained) and the precomputed column norms, and
zeroes the chosen coordinates. Zeroing j is the move w~_j <- 0 through the same bookkeeping as
a Frank-Wolfe step (:func:`_zero_coordinate`): vbar on the rows of column j, beta (squared) or
qbar and alpha on those rows (logistic), then the sampler weights or heap keys of every touched
coordinate; w_m is untouched. So the invariants (w = w_m w~, X w = w_m vbar, beta = X^T X w~,
alpha = X^T qbar) hold after every pass. The kernel code of screening lives in the functions
below ``_fast_fw``; the loop only calls :func:`_fast_screen`.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import types
from typing import Any, Callable

import numba
import numpy as np
import scipy.sparse as sp

from dpdist.data.transforms import check_row_bound
from dpdist.exceptions import ParameterError
from dpdist.solvers.frank_wolfe import FWResult, Progress, check_init, check_problem, column_norms, privacy_plan
from dpdist.solvers.samplers import (
    _FLUSH,
    _HEADROOM,
    _draw,
    _exp_weights,
    _needs_rebuild,
    _race,
    _resum,
    _set,
    _settle,
    _total,
    block_shift,
)
from dpdist.solvers.screening import ScreeningPlan, _laplace, _pass_constants, _screen_rnm, _screen_set
from dpdist.utils.prefetch import prefetch
from dpdist.utils.random import RandomState, check_random_state

__all__ = ["FAST_SELECTIONS", "fast_frank_wolfe"]

FAST_SELECTIONS = (None, "exponential", "exponential-bruteforce", "laplace")
_MODES = {None: 0, "exponential": 1, "exponential-bruteforce": 2, "laplace": 3}
logger = logging.getLogger(__name__)
# A move whose row-order update (seed 004 Alg. 2) would visit more entries than this share of
# nnz + D + n, divided by the column passes' threads (the row scatter stays on one), goes through
# X by columns instead (:func:`_move`; the same state to the bit). Set from
# benchmarks/fw_heavy_steps.py (one thread); on KDDA's train half with 2 threads a step by rows
# cost ~22 ns per entry visited and one by columns ~0.36 s: even at a work share of ~0.055;
# math.inf: always by rows, as the seed.
_HEAVY_SHARE = 0.1


def _load_kernel(args: tuple) -> None:
    """Compile (or load from numba's cache) the solver kernel for these arguments' types, so
    that the timed solve measures iterations only (the first load in a process takes ~0.4 s)."""
    sig = tuple(numba.typeof(a) for a in args)
    if sig in _fast_fw.overloads:
        return
    t0 = time.perf_counter()
    _fast_fw.compile(sig)
    logger.debug(
        "fast_frank_wolfe: kernel compiled or loaded in %.2f s, outside the timed solve", time.perf_counter() - t0
    )


def _run_watched(
    kernel: Callable[..., Any], args: tuple, done: np.ndarray, total: int, progress: Progress | None
) -> Any:
    """``kernel(*args)``; with ``progress``, in a thread (the kernel releases the GIL) while this
    one reports ``done[0]`` of ``total`` every 0.25 s. An interrupt stops the wait, not the kernel
    (its thread is a daemon: the process exits without it)."""
    if progress is None:
        return kernel(*args)
    box: dict[str, Any] = {}
    n_threads = numba.get_num_threads()  # numba's setting is per thread: the caller's, in the kernel's

    def work() -> None:
        try:
            numba.set_num_threads(n_threads)
            box["out"] = kernel(*args)
        except BaseException as e:  # re-raised in the caller's thread
            box["err"] = e

    thread = threading.Thread(target=work, name="fast-fw-kernel", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.25)
        progress(int(done[0]), total)
    if "err" in box:
        raise box["err"]
    return box["out"]


def _serial_and_parallel(body: Callable[..., Any]) -> tuple[Any, Any]:
    """Two numba builds of one body: serial (``prange`` is ``range``) and threaded. The threaded one
    compiles a renamed twin: numba keys its on-disk cache by the function's name and bytecode, not
    its flags, so the two builds of one function would load each other from the cache."""
    twin = types.FunctionType(body.__code__, body.__globals__, body.__name__, body.__defaults__, body.__closure__)
    twin.__qualname__ = body.__qualname__ + "_parallel"
    return numba.njit(cache=True)(body), numba.njit(cache=True, parallel=True)(twin)


# ------------------------------------------------------------------ lazy max-queue (Alg. 3)


@numba.njit(cache=True)
def _heap_push(keys: np.ndarray, items: np.ndarray, size: int, key: float, item: int) -> int:
    i = size
    keys[i], items[i] = key, item
    while i > 0:
        parent = (i - 1) // 2
        if keys[parent] >= keys[i]:
            break
        keys[parent], keys[i] = keys[i], keys[parent]
        items[parent], items[i] = items[i], items[parent]
        i = parent
    return size + 1


@numba.njit(cache=True)
def _heap_pop(keys: np.ndarray, items: np.ndarray, size: int) -> int:
    size -= 1
    keys[0], items[0] = keys[size], items[size]
    i = 0
    while True:
        left, right, top = 2 * i + 1, 2 * i + 2, i
        if left < size and keys[left] > keys[top]:
            top = left
        if right < size and keys[right] > keys[top]:
            top = right
        if top == i:
            break
        keys[top], keys[i] = keys[i], keys[top]
        items[top], items[i] = items[i], items[top]
        i = top
    return size


@numba.njit(cache=True)
def _heap_build(alpha: np.ndarray, keys: np.ndarray, items: np.ndarray, cur: np.ndarray) -> int:
    size = 0
    for k in range(alpha.shape[0]):
        cur[k] = abs(alpha[k])
        size = _heap_push(keys, items, size, cur[k], k)
    return size


@numba.njit(cache=True)
def _heap_next(
    alpha: np.ndarray, keys: np.ndarray, items: np.ndarray, size: int, cur: np.ndarray, popped: np.ndarray
) -> tuple[int, int]:
    """Exact argmax_k |alpha_k| (lowest k on ties) from upper-bound keys; returns (k, new size)."""
    best_val, best_k, n_popped = -1.0, -1, 0
    while size > 0 and keys[0] >= best_val:
        key, k = keys[0], items[0]
        size = _heap_pop(keys, items, size)
        if key != cur[k]:
            continue  # a stale duplicate: k has a newer entry
        cur[k] = -1.0  # popped: no live entry until re-inserted
        popped[n_popped] = k
        n_popped += 1
        true = abs(alpha[k])
        if true > best_val or (true == best_val and k < best_k):
            best_val, best_k = true, k
    for i in range(n_popped):
        k = popped[i]
        cur[k] = abs(alpha[k])
        size = _heap_push(keys, items, size, cur[k], k)
    return best_k, size


# ------------------------------------------------------------------------- the solver


@numba.njit(cache=True)
def _log2cosh(a: float) -> float:
    x = abs(a)
    return x + math.log1p(math.exp(-2.0 * x))


@numba.njit(cache=True)
def _sigmoid(m: float) -> float:
    if m >= 0:
        return 1.0 / (1.0 + math.exp(-m))
    e = math.exp(m)
    return e / (1.0 + e)


@numba.njit(cache=True)
def _mean_loss(logistic: bool, wm: float, vbar: np.ndarray, y: np.ndarray) -> float:
    s = 0.0
    for i in range(y.shape[0]):
        m = wm * vbar[i]
        if logistic:
            s += max(m, 0.0) + math.log1p(math.exp(-abs(m))) - y[i] * m
        else:
            s += 0.5 * (m - y[i]) ** 2
    return s / y.shape[0]


@numba.njit(cache=True)
def _full_gradient(
    r_ptr, r_idx, r_val, c_ptr, c_idx, c_val, y, wm, vbar, q, alpha, logistic, fcol, nfirst, touched, lay, threads
):
    """Exact qbar_i = l'(w_m vbar_i; y_i) on every row and alpha = X^T qbar: O(nnz). Whenever the
    kernel keeps the column buffers (``fcol`` non-empty: the column-order moves are on) alpha comes
    from the column passes (:func:`_by_columns`, on the threads): KDDA's train half ~0.4 s from
    the layout once built, ~0.9 s from CSC alone, ~3 s by rows; Webspam's (280k rows in one band,
    16.6M columns) 1.6 s instead of 7.3 s, where the row pass scatters into an alpha of 133 MB.
    The same terms in the same order (ascending rows) except the q_i = 0 ones, which add +-0 to a
    sum that starts at +0 and so leave its bits as they are (a sum of non-zero terms that cancels
    is +0 too). ``fcol`` is scratch then."""
    alpha[:] = 0.0
    for i in range(y.shape[0]):
        m = wm * vbar[i]
        q[i] = _sigmoid(m) - y[i] if logistic else m - y[i]
    if fcol.shape[0] > 0:
        _by_columns(c_ptr, c_idx, c_val, q, alpha, fcol, nfirst, touched, 0, lay, threads)
        return
    for i in range(y.shape[0]):
        qi = q[i]
        for p in range(r_ptr[i], r_ptr[i + 1]):
            alpha[r_idx[p]] += qi * r_val[p]


@numba.njit(cache=True)
def _run(q, parts, nb, shift, D):
    """Run q of ``parts`` runs of whole blocks (of 2^shift coordinates; nb blocks): its blocks
    b0..b1-1 and coordinates lo..hi-1."""
    b0, b1 = nb * q // parts, nb * (q + 1) // parts
    return b0, b1, b0 << shift, min(D, b1 << shift)


def _all_weights(alpha, scale, W, c, err, st, shift, xbuf, bits, parts):
    """Sampler state from scratch: W_k = 2 cosh(a_k) e^-ref, a_k = scale alpha_k, ref = max_k ln(2 cosh a_k).

    W_k = e^(|a_k| - ref) + e^(-2 ref) / e^(|a_k| - ref); st = (ref, e^(-2 ref)). The weights and
    their block sums in ``parts`` runs of whole blocks (the threads take runs): each weight is
    computed alone and each block summed in order, so the state is the same to the bit however
    many runs or threads (tested)."""
    D = alpha.shape[0]
    nb = c.shape[0]
    top = np.zeros(parts)  # max |alpha_k| of each run: a max is exact, so the same in any order
    for q in numba.prange(parts):
        _, _, lo, hi = _run(q, parts, nb, shift, D)
        most = 0.0
        for k in range(lo, hi):
            most = max(most, abs(alpha[k]))
        top[q] = most
    amax = 0.0
    for q in range(parts):
        amax = max(amax, top[q])
    ref = _log2cosh(scale * amax)
    st[0] = ref
    st[1] = math.exp(-2.0 * ref) if 2.0 * ref < -_FLUSH else 0.0
    for q in numba.prange(parts):
        b0, b1, lo, hi = _run(q, parts, nb, shift, D)
        for k in range(lo, hi):
            xbuf[k] = scale * abs(alpha[k]) - ref
        _exp_weights(xbuf[lo:hi], hi - lo, st[1], W[lo:hi], bits[lo:hi])
        for b in range(b0, b1):
            _resum(W, c, err, shift, b)


_weights_serial, _weights_parallel = _serial_and_parallel(_all_weights)


@numba.njit(cache=True)
def _weights_from_alpha(alpha, scale, W, c, err, st, shift, xbuf, bits, threads):
    """:func:`_all_weights` on ``threads`` threads (1: serially)."""
    if threads > 1:
        _weights_parallel(alpha, scale, W, c, err, st, shift, xbuf, bits, 8 * threads)
    else:
        _weights_serial(alpha, scale, W, c, err, st, shift, xbuf, bits, 1)


@numba.njit(cache=True)
def _reweight(alpha, touched, n_touched, scale, W, c, err, st, shift, xbuf, wbuf, bits, threads):
    """The sampler weights of the ``n_touched`` coordinates listed in ``touched`` after their alpha
    moved: each set in O(1) with its block sum, or all rebuilt from alpha (:func:`_weights_from_alpha`)
    when a weight would pass the headroom or when at least a sixteenth of the D coordinates moved
    (a step on a column in many rows): one sequential vectorised pass on the threads is then
    cheaper than the scattered updates and, after a column pass, the listing of the moved
    coordinates it spares (KDDA's 20.2M, 2 threads: 0.04 s against 0.03 s + 0.08 s for 1.3M
    moved, 0.05 s + 0.09 s for 2.1M). Setting each, alpha_k and W_k are asked for ``_AHEAD``
    coordinates ahead (a prefetch, as :func:`_move`). Either way the weights are
    2 cosh(scale alpha_k) up to the shared factor e^-ref; the choice depends on the number of moved
    coordinates, a function of the data that changes only the step's time and the rounding."""
    if _rebuilds(n_touched, alpha.shape[0]):
        _weights_from_alpha(alpha, scale, W, c, err, st, shift, xbuf, bits, threads)
        return
    ref, xmax = st[0], -np.inf
    for p in range(n_touched):
        if p + _AHEAD < n_touched:
            prefetch(alpha, touched[p + _AHEAD])
        xbuf[p] = scale * abs(alpha[touched[p]]) - ref
        xmax = max(xmax, xbuf[p])
    if xmax > _HEADROOM:
        _weights_from_alpha(alpha, scale, W, c, err, st, shift, xbuf, bits, threads)
    else:
        _exp_weights(xbuf, n_touched, st[1], wbuf, bits)
        for p in range(n_touched):
            if p + _AHEAD < n_touched:
                prefetch(W, touched[p + _AHEAD])
            _set(W, c, err, shift, touched[p], wbuf[p])
        _settle(W, c, err, shift)


@numba.njit(cache=True)
def _vertex(mode, W, c, err, st, shift, xbuf, bits, alpha, scale, rng, threads):
    z = _total(c)
    if _needs_rebuild(z):
        _weights_from_alpha(alpha, scale, W, c, err, st, shift, xbuf, bits, threads)
        z = _total(c)
    return _draw(W, c, shift, z, rng) if mode == 1 else _race(W, rng)


@numba.njit(cache=True, nogil=True)  # nogil: a caller's thread can watch ``done`` while it runs
def _fast_fw(
    r_ptr,
    r_idx,
    r_val,
    c_ptr,
    c_idx,
    c_val,
    y,
    ybar,
    lam,
    T,
    logistic,
    mode,
    eps0,
    L,
    refresh,
    record_every,
    shift,
    rng,
    done,
    w0,
    gram,
    scr_mode,
    scr_mask,
    colnorm,
    scoef,
    events,
    n_events,
    heavy,
    band,
    threads,
):
    n, D = y.shape[0], ybar.shape[0]
    wt = np.zeros(D)
    vbar = np.zeros(n)
    wm = 1.0
    alpha = np.zeros(D)
    q = np.zeros(n)
    beta = np.zeros(1 if logistic else D)  # squared loss: X^T X w~
    use_gram = not logistic and gram.shape[0] == D
    if w0.shape[0] == D:
        _start_at(w0, r_ptr, r_idx, r_val, wt, vbar, beta, logistic)
    path = np.empty(T, dtype=np.int64)
    n_rec = T // record_every if record_every > 0 else 0
    objective = np.empty(n_rec)
    # vertex selection state: lazy heap (non-private) or sampler weights with block sums
    heap = logistic and mode == 0
    cap = 4 * D + 16 if heap else 1
    keys = np.empty(cap)
    items = np.empty(cap, dtype=np.int64)
    cur = np.empty(D if heap else 1)
    popped = np.empty(D if heap else 1, dtype=np.int64)
    size = 0
    ns = D if mode in (1, 2) else 1
    W = np.empty(ns)
    c = np.empty((ns + (1 << shift) - 1) >> shift)
    err = np.empty_like(c)
    st = np.empty(2)  # ref, exp(-2 ref)
    xbuf = np.empty(ns)
    wbuf = np.empty(ns)  # not xbuf: an in-place call would not vectorise (aliasing)
    bits = np.empty(ns, dtype=np.int64)
    scale = eps0 / (2.0 * L)
    mark = np.zeros(D, dtype=np.uint8)
    touched = np.empty(D + 1, dtype=np.int64)
    cols = math.isfinite(heavy) and not use_gram  # buffers of the column-order update (_move)
    gbuf = np.zeros(n if cols else 0)
    fcol = np.full(D if cols else 0, -1, dtype=np.int64)  # -1: the empty columns, which no pass writes
    # the row-order copies of the column passes: built at the first move that goes by columns (a run
    # whose moves all go by rows never pays for them; until then the passes read CSC alone)
    lay = _column_layout(r_ptr, r_idx, r_val, c_ptr, c_val, 0, threads)
    lazy = cols and n > band
    nfirst = np.empty(n + 1 if cols else 0, dtype=np.int64)
    if logistic:
        _full_gradient(
            r_ptr, r_idx, r_val, c_ptr, c_idx, c_val, y, wm, vbar, q, alpha, True, fcol, nfirst, touched, lay, threads
        )
        if mode == 0:
            size = _heap_build(alpha, keys, items, cur)
        elif mode != 3:
            _weights_from_alpha(alpha, scale, W, c, err, st, shift, xbuf, bits, threads)
    zero_buf = np.empty(D if scr_mode in (1, 2) else 1, dtype=np.int64)
    for t in range(1, T + 1):
        done[0] = t - 1  # iterations completed, for a progress display (a public count)
        # ---- choose the vertex (j, sigma)
        if not logistic:
            for k in range(D):
                alpha[k] = wm * beta[k] - ybar[k]
        if mode == 3:
            j, sigma = _laplace_vertex(alpha, L / eps0, rng)
        elif not logistic:
            if mode == 0:
                j, best = 0, -1.0
                for k in range(D):
                    if abs(alpha[k]) > best:
                        best, j = abs(alpha[k]), k
            else:
                _weights_from_alpha(alpha, scale, W, c, err, st, shift, xbuf, bits, threads)
                j = _vertex(mode, W, c, err, st, shift, xbuf, bits, alpha, scale, rng, threads)
        elif mode == 0:
            j, size = _heap_next(alpha, keys, items, size, cur, popped)
        else:
            j = _vertex(mode, W, c, err, st, shift, xbuf, bits, alpha, scale, rng, threads)
        if mode == 0:
            sigma = -1.0 if alpha[j] > 0 else 1.0
        elif mode != 3:
            a = scale * alpha[j]
            descent = -1.0 if a > 0 else 1.0
            sigma = descent if rng.random() < 1.0 / (1.0 + math.exp(-2.0 * abs(a))) else -descent
        path[t - 1] = int(sigma) * (j + 1)
        # ---- move: w <- (1 - eta) w + eta sigma lam e_j
        eta = 2.0 / (t + 2.0)
        wm *= 1.0 - eta
        delta = eta * sigma * lam / wm
        wt[j] += delta
        if lazy and not _by_rows(j, r_ptr, c_ptr, c_idx, heavy, D, n):  # _move's own test, the same arguments
            lay = _column_layout(r_ptr, r_idx, r_val, c_ptr, c_val, band, threads)
            lazy = False
        n_touched = _move(
            j,
            delta,
            r_ptr,
            r_idx,
            r_val,
            c_ptr,
            c_idx,
            c_val,
            y,
            logistic,
            use_gram,
            wm,
            vbar,
            alpha,
            q,
            beta,
            mark,
            touched,
            gbuf,
            fcol,
            nfirst,
            heavy,
            mode == 0,
            lay,
            threads,
        )
        if use_gram:
            for k in range(D):
                beta[k] += delta * gram[j, k]
        # ---- queue / sampler: once per coordinate whose alpha moved in this step
        if mode == 0:
            for p in range(n_touched):
                k = touched[p]
                ak = abs(alpha[k])
                if ak > cur[k]:
                    if size == keys.shape[0]:  # compact: one live entry per coordinate
                        size = _heap_build(alpha, keys, items, cur)
                    size = _heap_push(keys, items, size, ak, k)
                    cur[k] = ak
        elif mode != 3 and n_touched > 0:
            _reweight(alpha, touched, n_touched, scale, W, c, err, st, shift, xbuf, wbuf, bits, threads)
        # ---- fold the scale, refresh the stale derivatives
        do_refresh = logistic and refresh > 0 and t % refresh == 0
        if wm < 1e-30 or do_refresh:
            for k in range(D):
                wt[k] *= wm
            if not logistic:
                for k in range(D):
                    beta[k] *= wm
            for i in range(n):
                vbar[i] *= wm
            wm = 1.0
        if do_refresh:
            _full_gradient(
                r_ptr,
                r_idx,
                r_val,
                c_ptr,
                c_idx,
                c_val,
                y,
                wm,
                vbar,
                q,
                alpha,
                True,
                fcol,
                nfirst,
                touched,
                lay,
                threads,
            )
            if mode == 0:
                size = _heap_build(alpha, keys, items, cur)
            elif mode != 3:
                _weights_from_alpha(alpha, scale, W, c, err, st, shift, xbuf, bits, threads)
        if scr_mode > 0 and scr_mask[t] != 0:
            size = _fast_screen(
                t,
                scr_mode,
                scoef,
                colnorm,
                events,
                n_events,
                zero_buf,
                r_ptr,
                r_idx,
                r_val,
                c_ptr,
                c_idx,
                c_val,
                y,
                ybar,
                logistic,
                mode,
                wt,
                vbar,
                wm,
                alpha,
                q,
                beta,
                gram,
                use_gram,
                keys,
                items,
                cur,
                size,
                W,
                c,
                err,
                st,
                shift,
                xbuf,
                wbuf,
                bits,
                scale,
                mark,
                touched,
                gbuf,
                fcol,
                nfirst,
                heavy,
                lay,
                threads,
                rng,
            )
        if record_every > 0 and t % record_every == 0:
            objective[t // record_every - 1] = _mean_loss(logistic, wm, vbar, y)
    done[0] = T
    # the last two items are internal state for the tests (alpha is the raw gradient; the band of the
    # column passes' layout, 0: never built): fast_frank_wolfe drops them
    return wt * wm, path, objective, (alpha, W, c, st), lay[0]


# ------------------------------------------------------------ a move's update, by rows or by columns


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
def _move(
    j,
    delta,
    r_ptr,
    r_idx,
    r_val,
    c_ptr,
    c_idx,
    c_val,
    y,
    logistic,
    use_gram,
    wm,
    vbar,
    alpha,
    q,
    beta,
    mark,
    touched,
    gbuf,
    fcol,
    nfirst,
    heavy,
    ordered,
    lay,
    threads,
):
    """w~_j += delta: vbar += delta x_(j), and the gradient state follows it. Logistic: qbar on the
    rows of column j, alpha through them, the moved coordinates listed in ``touched`` in the order
    they were first touched (returned: their number; unless ``ordered``, the list is left unwritten
    when :func:`_rebuilds` says so: the sampler then rebuilds every weight,
    :func:`_reweight`, and reads no list). Squared (no Gram): beta += delta X^T x_(j).

    Seed 004 Alg. 2 goes through the rows of column j: O(S_r S_c) scattered updates of alpha. A
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
    if gbuf.shape[0] > 0 and not _by_rows(j, r_ptr, c_ptr, c_idx, heavy, alpha.shape[0], y.shape[0]):
        if threads > 1:
            _moves_parallel(j, delta, c_ptr, c_idx, c_val, y, logistic, wm, vbar, q, gbuf)
        else:
            _moves_serial(j, delta, c_ptr, c_idx, c_val, y, logistic, wm, vbar, q, gbuf)
        n_touched = _by_columns(
            c_ptr,
            c_idx,
            c_val,
            gbuf,
            alpha if logistic else beta,
            fcol,
            nfirst,
            touched,
            (1 if ordered else 2) if logistic else 0,
            lay,
            threads,
        )
        for p in range(c_ptr[j], c_ptr[j + 1]):
            gbuf[c_idx[p]] = 0.0
        return n_touched
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


# Software prefetch in the row pass of a move (:func:`_move`) and the re-weighting of the moved
# coordinates (:func:`_reweight`): each entry's scattered access (alpha_k, its mark, beta_k, W_k) is
# asked for this many entries ahead, so the loads overlap instead of waiting one by one (a hint: the
# same results to the bit). ``benchmarks/fw_prefetch.py --row-pass``, 2026-11-27, load 0.9: 50
# Webspam-shaped rows (184k entries over 16.6M columns) 4.12 ms without, 1.44 / 1.12 / 1.11 ms at
# 32 / 64 / 128 entries ahead; 20,000 KDDA-shaped rows (721k entries over 20.2M) 17.7 ms without,
# 13.8 / 14.3 / 14.5 ms. _ROWS_AHEAD: the rows of column j whose vbar, qbar and first entries are
# asked for ahead (rows of a few entries, as KDDA's, are shorter than _AHEAD); not tuned.
_AHEAD = 64
_ROWS_AHEAD = 8


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


_ROW_BAND = 1 << 19  # rows per band of g in _column_layout's tiles: 4 MB, held in the last-level cache
# A pass over at least this many entries of X (the column passes, the fit's X^T y and X_csc digest)
# runs on all of numba's threads (the cores, unless NUMBA_NUM_THREADS or numba.set_num_threads says
# fewer); smaller ones stay on one, where starting the threads would cost more than it saves. Each
# column's sum is one thread's, in the same order: the same bits either way (:func:`_threads`).
_PARALLEL_NNZ = 1 << 22
_FORKED = [False]  # set in a forked child: GNU OpenMP (numba's threading layer here) kills such a child
if hasattr(os, "register_at_fork"):  # that enters a parallel region (no fork, no hook: Windows)
    os.register_at_fork(after_in_child=lambda: _FORKED.__setitem__(0, True))


def _threads(nnz: int) -> int:
    """How many of numba's threads a pass over X (``nnz`` entries) runs on (1: serially): all
    from ``_PARALLEL_NNZ`` entries, never in a forked child (whose parent may have started OpenMP's
    threads, which do not survive a fork: spawn the processes that fit large data). Decided here,
    in Python, and passed to the kernel: a numba function that calls ``numba.get_num_threads``
    cannot be cached on disk (a ctypes pointer), nor can any function that calls it, up to the
    kernel, which would then be compiled anew in every process (tested)."""
    return numba.get_num_threads() if nnz >= _PARALLEL_NNZ and not _FORKED[0] else 1


@numba.njit(cache=True)
def _rebuilds(n_moved, D):
    """Whether a step that moved ``n_moved`` of the D coordinates rebuilds every sampler weight
    (:func:`_reweight`) instead of setting each: from a sixteenth of them on."""
    return 16 * n_moved >= D


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


def _layout_fill(r_ptr, r_idx, r_val, num, rof, Rh, band, hptr, tptr, h_col, h_val, e_row, e_col, e_val):
    """:func:`_column_layout`'s copies, a band of rows at a time (the threads take bands), the rows
    of a band in ascending order: each range's CSR rows and each tile fill in ascending rows
    (``h_val``, ``e_val`` empty: the frequent, the rare columns' values are all 1, and not copied)."""
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
def _column_layout(r_ptr, r_idx, r_val, c_ptr, c_val, band, threads):
    """What :func:`_by_columns` needs of X beside its CSC form: ``(band, hot, hbounds, hptr, h_col,
    h_val, rc, bounds, tptr, e_row, e_col, e_val, acc, fc)``, built by the kernel at the fit's first
    move by columns (``band`` 0: not built, empty; the passes read CSC alone until then, and a fit
    whose moves all go by rows never builds it: on URL's train half the build took 2.7 s of a
    3.4 s run of 4,000 sparse steps). With g in one band of ``band`` rows (n <= band) it holds
    nothing: every column goes in one pass over its CSC entries (:func:`_single_pass_sums`).

    Otherwise a column's reads of g from CSC are at scattered rows of a g larger than the cache,
    a memory access each (KDDA's train half: 0.88 s a pass on two cores), so X is copied here in
    row order, by ranges of columns whose sums ``acc`` (and first rows ``fc``) stay in cache:

    * the columns with at least ``min_count`` = 8 entries per band (``hot``, ascending; KDDA's
      train half: 75k of 20.2M columns, 89% of the entries) in ``threads`` ranges of about
      equal work (``hbounds`` into ``hot``; fewer when their row pointers would take more
      memory than half the copy: each range has n + 1), each range in CSR form: row i's entries
      in range r from ``hptr[r * (n + 1) + i]``, their position in ``hot`` and value (``h_col``,
      ``h_val``; 12 bytes an entry; binary X, no ``h_val``: 4 bytes). :func:`_hot_sums`:
      0.13 s.
    * the others, non-empty (``rc``, ascending: the rare ones, a few entries each), numbered
      0..C-1 and cut into ranges of about equal work (``bounds``, at most about ``_RANGE_COLS``
      columns each), a range's entries cut by band of rows: tile (range r, band b) holds its
      entries in ascending rows, from ``tptr[r * bands + b]``: their row, number in ``rc`` and
      value (``e_row``, ``e_col``, ``e_val``; 16 bytes an entry; binary X, no ``e_val``: 8 bytes).
      :func:`_tiled_sums`: 0.12 s.

    Either way each column's entries come in ascending rows, so its sum adds the same terms in
    the same order as one pass over the column (the same bits). ``acc``, ``fc``: scratch for
    the larger of the two. O(nnz) time: a pass over the values, and two passes on the threads
    (a band of rows each)."""
    n, D = r_ptr.shape[0] - 1, c_ptr.shape[0] - 1
    n_bands = -(-n // band) if band > 0 else 1
    i64, i32 = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
    v0 = np.empty(0, dtype=r_val.dtype)  # the copies' values in X's own dtype (float32 X: 4 bytes an entry)
    if n_bands <= 1:
        return (
            band,
            i64,
            np.zeros(1, dtype=np.int64),
            i64,
            i32,
            v0,
            i64,
            np.zeros(1, dtype=np.int64),
            np.zeros(1, dtype=np.int64),
            i32,
            i32,
            v0,
            np.empty(0),
            i64,
        )
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
    R = bounds.shape[0] - 1
    num = np.full(D, -1, dtype=np.int32)  # column -> its number in hot or rc (-1: empty)
    rof = np.empty(D, dtype=np.int32)  # column -> its range: hot ranges 0..Rh-1, the rare ones Rh + r
    for r in range(Rh):
        for h in range(hbounds[r], hbounds[r + 1]):
            num[hot[h]] = h
            rof[hot[h]] = r
    for r in range(R):
        for c in range(bounds[r], bounds[r + 1]):
            num[rc[c]] = c
            rof[rc[c]] = Rh + r
    hptr = np.zeros(Rh * (n + 1), dtype=np.int64)
    tptr = np.zeros(R * n_bands + 1, dtype=np.int64)
    if threads > 1:
        _counts_parallel(r_ptr, r_idx, rof, Rh, band, hptr, tptr)
    else:
        _counts_serial(r_ptr, r_idx, rof, Rh, band, hptr, tptr)
    for q in range(1, Rh * (n + 1)):  # one prefix sum over the ranges in order (each starts at the last's end)
        hptr[q] += hptr[q - 1]
    for t in range(R * n_bands):
        tptr[t + 1] += tptr[t]
    h_unit = _unit_values(c_ptr, c_val, hot)  # binary (as KDDA, URL): no h_val, e_val (8 bytes an entry less)
    e_unit = _unit_values(c_ptr, c_val, rc)
    h_col = np.empty(hptr[Rh * (n + 1) - 1], dtype=np.int32)
    h_val = np.empty(0 if h_unit else hptr[Rh * (n + 1) - 1], dtype=r_val.dtype)
    E = tptr[R * n_bands]
    e_row, e_col, e_val = (
        np.empty(E, dtype=np.int32),
        np.empty(E, dtype=np.int32),
        np.empty(0 if e_unit else E, dtype=r_val.dtype),
    )
    if threads > 1:
        _fill_parallel(r_ptr, r_idx, r_val, num, rof, Rh, band, hptr, tptr, h_col, h_val, e_row, e_col, e_val)
    else:
        _fill_serial(r_ptr, r_idx, r_val, num, rof, Rh, band, hptr, tptr, h_col, h_val, e_row, e_col, e_val)
    return (
        band,
        hot,
        hbounds,
        hptr,
        h_col,
        h_val,
        rc,
        bounds,
        tptr,
        e_row,
        e_col,
        e_val,
        np.empty(max(H, C)),
        np.empty(max(H, C), dtype=np.int64),
    )


def _hot_sums(c_ptr, c_idx, g, target, fcol, hot, hbounds, hptr, h_col, h_val, acc):
    """The frequent columns' sums from their row-order copy (:func:`_column_layout`): each range
    (the threads take ranges) goes through the rows in ascending order, reading g in sequence and adding
    g_i x_ik to its columns' sums in cache. Each sum adds its terms in ascending rows (the same
    bits as one pass over the column). No ``h_val``: every value is 1 (binary data, as KDDA's and
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
    """The rare columns' sums from the tiles of :func:`_column_layout`: a range at a time (the
    threads take ranges), its columns' sums started from target and their first rows from -1,
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
def _by_columns(c_ptr, c_idx, c_val, g, target, fcol, nfirst, touched, listing, lay, threads):
    """target_k += sum_i g_i x_ik over the rows with g_i != 0, for every column k, in ascending i
    (the row pass's order). ``listing`` 1: the moved k into ``touched`` ordered by (first such row,
    k) -- the row pass's first-touch order for canonical X -- by a counting sort over the rows
    (``fcol``: each column's first such row, -1: none, which the caller set for the empty
    columns; ``nfirst``: n + 1 counts); returns their number. 2: the same unless
    :func:`_rebuilds` (then only their number). 0: neither (returns 0).

    With g in one band or the layout ``lay`` (:func:`_column_layout`) not built yet (band 0), one
    pass over each column's CSC entries (:func:`_single_pass_sums`); otherwise the frequent
    columns from their row-order copy (:func:`_hot_sums`) and the rare ones from their tiles
    (:func:`_tiled_sums`). With ``threads`` > 1 (:func:`_threads`) the passes run on numba's
    threads, each column on one."""
    D, n = target.shape[0], g.shape[0]
    band, hot, hbounds, hptr, h_col, h_val, rc, bounds, tptr, e_row, e_col, e_val, acc, fc = lay
    if n <= band or band == 0:  # g in one band, or the layout not built (band 0)
        if threads > 1:
            m = _single_parallel(c_ptr, c_idx, c_val, g, target, fcol, 8 * threads)
        else:
            m = _single_serial(c_ptr, c_idx, c_val, g, target, fcol, 1)
    elif threads > 1:
        m = _hot_parallel(c_ptr, c_idx, g, target, fcol, hot, hbounds, hptr, h_col, h_val, acc)
        m += _tiled_parallel(g, target, fcol, rc, bounds, tptr, e_row, e_col, e_val, acc, fc)
    else:
        m = _hot_serial(c_ptr, c_idx, g, target, fcol, hot, hbounds, hptr, h_col, h_val, acc)
        m += _tiled_serial(g, target, fcol, rc, bounds, tptr, e_row, e_col, e_val, acc, fc)
    if listing == 0:
        return 0
    if listing == 2 and _rebuilds(m, D):
        return m
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
    return m


@numba.njit(cache=True)
def _laplace_vertex(alpha, b, rng):
    """Talwar et al.'s report-noisy-max over the 2D signed vertices: argmax -sigma alpha_j + Lap(b)."""
    best, j, sigma = -np.inf, 0, 1.0
    for k in range(alpha.shape[0]):
        v = -alpha[k] + _laplace(b, rng)
        if v > best:
            best, j, sigma = v, k, 1.0
        v = alpha[k] + _laplace(b, rng)
        if v > best:
            best, j, sigma = v, k, -1.0
    return j, sigma


# ------------------------------------------------------------------ screening (kernel side)


@numba.njit(cache=True)
def _start_at(w0, r_ptr, r_idx, r_val, wt, vbar, beta, logistic):
    """A public starting point w0 (seeds 000/001): w~ = w0, vbar = X w0, beta = X^T vbar (squared); O(nnz)."""
    wt[:] = w0
    for i in range(vbar.shape[0]):
        s = 0.0
        for p in range(r_ptr[i], r_ptr[i + 1]):
            s += r_val[p] * w0[r_idx[p]]
        vbar[i] = s
        if not logistic:
            for p in range(r_ptr[i], r_ptr[i + 1]):
                beta[r_idx[p]] += s * r_val[p]


@numba.njit(cache=True)
def _fast_screen(
    t,
    scr_mode,
    scoef,
    colnorm,
    events,
    n_events,
    zero_buf,
    r_ptr,
    r_idx,
    r_val,
    c_ptr,
    c_idx,
    c_val,
    y,
    ybar,
    logistic,
    mode,
    wt,
    vbar,
    wm,
    alpha,
    q,
    beta,
    gram,
    use_gram,
    keys,
    items,
    cur,
    size,
    W,
    c,
    err,
    st,
    shift,
    xbuf,
    wbuf,
    bits,
    scale,
    mark,
    touched,
    gbuf,
    fcol,
    nfirst,
    heavy,
    lay,
    threads,
    rng,
):
    """One screening pass from the solver's state (module doc); returns the heap size."""
    if not logistic:  # alpha at the moved iterate
        for k in range(alpha.shape[0]):
            alpha[k] = wm * beta[k] - ybar[k]
    ug, un2, gn2 = 0.0, 0.0, 0.0
    for i in range(y.shape[0]):
        ui = wm * vbar[i]
        gi = q[i] if logistic else ui - y[i]
        ug += ui * gi
        un2 += ui * ui
        gn2 += gi * gi
    const, rt, Bc = _pass_constants(alpha, ug, math.sqrt(un2), math.sqrt(gn2), scoef)
    if scr_mode == 3:
        j, screened = _screen_rnm(alpha, colnorm, const, rt, Bc, scoef, scoef[9], scoef[10], rng)
        count = 0
        if screened and wt[j] != 0.0:
            zero_buf[0] = j
            count = 1
    else:
        count = _screen_set(alpha, colnorm, wt, const, rt, Bc, scoef, scoef[9] if scr_mode == 2 else 0.0, zero_buf, rng)
    for p in range(count):
        j = zero_buf[p]
        size = _zero_coordinate(
            j,
            r_ptr,
            r_idx,
            r_val,
            c_ptr,
            c_idx,
            c_val,
            y,
            logistic,
            mode,
            wt,
            vbar,
            wm,
            alpha,
            q,
            beta,
            gram,
            use_gram,
            keys,
            items,
            cur,
            size,
            W,
            c,
            err,
            st,
            shift,
            xbuf,
            wbuf,
            bits,
            scale,
            mark,
            touched,
            gbuf,
            fcol,
            nfirst,
            heavy,
            lay,
            threads,
        )
        events[n_events[0], 0] = t
        events[n_events[0], 1] = j
        n_events[0] += 1
    return size


@numba.njit(cache=True)
def _zero_coordinate(
    j,
    r_ptr,
    r_idx,
    r_val,
    c_ptr,
    c_idx,
    c_val,
    y,
    logistic,
    mode,
    wt,
    vbar,
    wm,
    alpha,
    q,
    beta,
    gram,
    use_gram,
    keys,
    items,
    cur,
    size,
    W,
    c,
    err,
    st,
    shift,
    xbuf,
    wbuf,
    bits,
    scale,
    mark,
    touched,
    gbuf,
    fcol,
    nfirst,
    heavy,
    lay,
    threads,
):
    """w~_j <- 0 with the same state updates as a Frank-Wolfe move of coordinate j; returns the heap size."""
    delta = -wt[j]
    wt[j] = 0.0
    n_touched = _move(
        j,
        delta,
        r_ptr,
        r_idx,
        r_val,
        c_ptr,
        c_idx,
        c_val,
        y,
        logistic,
        use_gram,
        wm,
        vbar,
        alpha,
        q,
        beta,
        mark,
        touched,
        gbuf,
        fcol,
        nfirst,
        heavy,
        mode == 0,
        lay,
        threads,
    )
    if use_gram:
        for k in range(beta.shape[0]):
            beta[k] += delta * gram[j, k]
    if mode == 0:
        for p in range(n_touched):
            k = touched[p]
            ak = abs(alpha[k])
            if ak > cur[k]:
                if size == keys.shape[0]:
                    size = _heap_build(alpha, keys, items, cur)
                size = _heap_push(keys, items, size, ak, k)
                cur[k] = ak
    elif mode != 3 and n_touched > 0:
        _reweight(alpha, touched, n_touched, scale, W, c, err, st, shift, xbuf, wbuf, bits, threads)
    return size


def _extra_args(
    plan: ScreeningPlan | None, X: sp.spmatrix, T: int, init: np.ndarray | None = None, gram: np.ndarray | None = None
) -> tuple:
    """The kernel's arguments after ``done``: the start (empty: 0), the Gram matrix (empty: none), the
    screening (mode 0 and dummies without it) and the share of X's size above which a move's update
    goes by columns (:data:`_HEAVY_SHARE` over the threads, :func:`_move`), the rows per band of such a pass
    (:data:`_ROW_BAND`) and how many threads its column passes use (:func:`_threads`)."""
    w0 = np.zeros(0) if init is None else check_init(init, X.shape[1], math.inf)
    w0 = (w0, np.zeros((0, 0)) if gram is None else gram)
    if plan is None:
        return (
            *w0,
            0,
            np.zeros(1, dtype=np.uint8),
            np.zeros(1),
            np.zeros(11),
            np.zeros((1, 2), dtype=np.int64),
            np.zeros(1, dtype=np.int64),
            _HEAVY_SHARE / _threads(X.nnz),
            _ROW_BAND,
            _threads(X.nnz),
        )
    if plan.mask.shape[0] != T + 1:
        raise ParameterError(f"the screening plan is for {plan.mask.shape[0] - 1} iterations, not {T}")
    plan.check_features(X.shape[1])
    scoef = np.concatenate([plan.coef, [plan.sigma if plan.mode == "adp" else plan.rnm_scale, plan.threshold_scale]])
    events = T + 1 + (0 if init is None else X.shape[1])  # each zeroing removes a non-zero: at most T + D
    return (
        *w0,
        plan.code,
        plan.mask,
        column_norms(X),
        scoef,
        np.zeros((events, 2), dtype=np.int64),
        np.zeros(1, dtype=np.int64),
        _HEAVY_SHARE / _threads(X.nnz),
        _ROW_BAND,
        _threads(X.nnz),
    )


def _entries_digest(ptr, idx, val, by_rows, parts):  # a body: compiled by _serial_and_parallel, called by _digest
    """An order-free digest of a sparse matrix's entries: the wrap-around sum over them of a
    splitmix64 mix of (row, column, the value's bits as float64: float32 values convert exactly);
    the same for X in CSR and in CSC form. The threads take ``parts`` runs of rows (or columns)
    of about equal work; a wrap-around sum is the same in any order."""
    total = np.uint64(0)
    bounds = _even_ranges(ptr, parts)
    for r in numba.prange(parts):
        one = np.empty(1)
        bits = one.view(np.uint64)
        part = np.uint64(0)
        for a in range(bounds[r], bounds[r + 1]):
            for p in range(ptr[a], ptr[a + 1]):
                r0, c0 = (np.uint64(a), np.uint64(idx[p])) if by_rows else (np.uint64(idx[p]), np.uint64(a))
                one[0] = val[p]
                z = (r0 * np.uint64(0x9E3779B97F4A7C15)) ^ (c0 * np.uint64(0xC2B2AE3D27D4EB4F)) ^ bits[0]
                z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                part += z ^ (z >> np.uint64(31))
        total += part
    return total


def _column_dots(c_ptr, c_idx, c_val, g, parts):  # a body: compiled by _serial_and_parallel, called by _threaded
    """X^T g from X's CSC form: each column's products added in ascending rows, as scipy's
    ``X.T @ g`` (the same bits); the threads take ``parts`` runs of columns of about equal work.
    The threaded form of :func:`dpdist.solvers.frank_wolfe._csr_matvec` (Alg. 1 keeps that serial
    one, its baseline). Not :func:`_single_pass_sums`: its test for g_i = 0 mispredicts on a 0/1
    y (Webspam's train half, measured: 5.0 s for X^T y, against 2.9-3.0 s serially and 1.4 s here)."""
    D = c_ptr.shape[0] - 1
    out = np.empty(D)
    bounds = _even_ranges(c_ptr, parts)
    for r in numba.prange(parts):
        for k in range(bounds[r], bounds[r + 1]):
            s = 0.0
            for p in range(c_ptr[k], c_ptr[k + 1]):
                s += c_val[p] * g[c_idx[p]]
            out[k] = s
    return out


_digest_serial, _digest_parallel = _serial_and_parallel(_entries_digest)
_dots_serial, _dots_parallel = _serial_and_parallel(_column_dots)


def _threaded(serial: Callable[..., Any], parallel: Callable[..., Any], nnz: int, *args: Any) -> Any:
    """One of the two builds of a pass over ``nnz`` entries with its last argument, the runs the
    threads take: serially (1 run) unless :func:`_threads` gives it the threads (8 runs each)."""
    threads = _threads(nnz)
    return parallel(*args, 8 * threads) if threads > 1 else serial(*args, 1)


def _digest(M: sp.spmatrix, by_rows: bool) -> int:
    """:func:`_entries_digest` of a CSR (``by_rows``) or CSC matrix."""
    return _threaded(
        _digest_serial, _digest_parallel, M.nnz, M.indptr.astype(np.int64, copy=False), M.indices, M.data, by_rows
    )


def _check_csc(Xc: sp.spmatrix, X: sp.csr_matrix, private: bool) -> sp.csc_matrix:
    """``X_csc`` as the kernel reads it, checked against X without a copy of either: the format,
    the shape and an order-free digest of the entries (their rows, columns and values; the CSC
    copy of another matrix would break the kernel's invariants, and the equality of _move's two
    update orders) and, for a private run, the bound on every entry."""
    if not (sp.issparse(Xc) and Xc.format == "csc" and Xc.dtype == X.dtype and Xc.has_canonical_format):
        raise ParameterError(
            f"X_csc must be a {X.dtype} CSC matrix (X's dtype) in canonical format (sorted rows, no repeated entry)"
        )
    if Xc.shape != X.shape or Xc.nnz != X.nnz or _digest(Xc, False) != _digest(X, True):
        raise ParameterError("X_csc is not X in CSC form (its shape or its entries differ)")
    if private:
        check_row_bound(Xc.data, name="X_csc")
    return Xc


def fast_frank_wolfe(
    X: sp.spmatrix,
    y: np.ndarray,
    lam: float,
    max_iter: int,
    loss: str = "logistic",
    selection: str | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    y_bound: float = 1.0,
    refresh: int = 0,
    record_every: int = 0,
    calibration: str = "safe",
    random_state: RandomState = None,
    screening: ScreeningPlan | None = None,
    init: np.ndarray | None = None,
    lipschitz_noise: float | None = None,
    gram: bool | np.ndarray = False,
    progress: Progress | None = None,
    X_csc: sp.spmatrix | None = None,
) -> FWResult:
    """Seed 004 Alg. 2 (+ Alg. 3 queue, or + Alg. 4 sampler when private). ``refresh``: full
    gradient refresh every that many steps (logistic only; 0 = never, as the seed). ``screening``:
    zero coordinates at the scheduled iterations (module doc); ``init``: a public start in the ball;
    ``gram``: precompute X^T X (squared loss; module doc), or the precomputed matrix itself.
    ``progress(done, max_iter)``: called about 4 times a second while the kernel runs (and once at
    the end) with the number of completed iterations, for the operator's progress display.
    ``X_csc``: the same matrix in CSC form (e.g. a store's CSC copy, ``SparseStore.csc``), used
    instead of converting X (one copy of the data less: 3 GB on KDDA's train half); it must be
    CSC in canonical format with X's shape, entries and dtype, within the same bounds. X (and
    X_csc) in float32 are held as they are, in half the memory of float64 values (every product
    and sum is taken in float64 after an exact conversion: the same steps as the float64
    matrix of the same values)."""
    X, y = check_problem(
        X,
        y,
        loss,
        lam,
        max_iter,
        selection is not None or (screening is not None and screening.loss is not None),
        y_bound,
        record_every,
    )
    if selection not in FAST_SELECTIONS:
        raise ParameterError(f"selection must be one of {FAST_SELECTIONS}, got {selection!r}")
    if selection is not None and screening is not None and screening.mode == "exact":
        raise ParameterError(
            f"screening plan mode 'exact' is not private and does not go with the private "
            f"selection={selection!r}: screen private runs with 'rnm' or 'adp'"
        )
    if refresh < 0:
        raise ParameterError(f"refresh must be >= 0, got {refresh}")
    n, D = X.shape
    plan = None
    eps0, L = 1.0, 1.0
    if selection is not None:
        if epsilon is None or delta is None:
            raise ParameterError("a private run needs epsilon and delta")
        plan = privacy_plan(
            epsilon,
            delta,
            max_iter,
            loss,
            lam,
            y_bound,
            "laplace" if selection == "laplace" else "exponential",
            calibration,
            lipschitz_noise,
        )
        eps0, L = plan.eps0, plan.lipschitz
        if selection == "laplace":  # the kernel draws Lap(L / eps0): 2 L / eps0, or the seeds' L / eps0
            L *= 2.0 if calibration == "safe" else 1.0
    if max(n, D) >= 2**31:  # n is private: the message names neither dimension's value
        raise ParameterError("X must have fewer than 2**31 rows and fewer than 2**31 columns")
    if X.nnz and not (np.isfinite(X.data.min()) and np.isfinite(X.data.max())):  # min/max: no O(nnz) temporary
        raise ParameterError("X has a non-finite entry (inf or NaN)")
    if not X.has_canonical_format:  # sorted rows, no repeated entry: the order both of _move's paths follow
        X = X.copy()
        X.sum_duplicates()
    rng = check_random_state(random_state)
    Xc = X.tocsc() if X_csc is None else _check_csc(X_csc, X, plan is not None)
    # one kernel signature: int64 pointers (nnz may pass 2**31), int32 indices (less memory traffic)
    rows = (X.indptr.astype(np.int64, copy=False), X.indices.astype(np.int32, copy=False), X.data)
    cols = (Xc.indptr.astype(np.int64, copy=False), Xc.indices.astype(np.int32, copy=False), Xc.data)
    ybar = _threaded(_dots_serial, _dots_parallel, X.nnz, *cols, y)  # X^T y, as scipy's X.T @ y (the same bits)
    if init is not None:
        check_init(init, D, lam)
    G = None
    if gram is not False:
        if loss != "squared" or D > 20000:
            raise ParameterError("gram is for squared loss with at most 20,000 features (a dense D x D matrix)")
        if gram is not True and (selection is not None or (screening is not None and screening.loss is not None)):
            raise ParameterError(
                "a private run computes X^T X itself (gram=True): a supplied matrix is not checked "
                "against X, and the privacy analysis bounds only X's own"
            )
        if gram is True:  # X^T X in float64 (D <= 20,000; float32 products would round)
            Xg = Xc.astype(np.float64, copy=False)
            G = (Xg.T @ Xg).toarray()
        else:
            G = np.asarray(gram, dtype=np.float64)
        if G.shape != (D, D) or not np.all(np.isfinite(G)):
            raise ParameterError(f"gram must be X^T X, a finite {D} x {D} matrix")
    scr = _extra_args(screening, Xc, max_iter, init, G)
    done = np.zeros(1, dtype=np.int64)  # the kernel's completed iterations
    args = (
        *rows,
        *cols,
        y,
        ybar,
        float(lam),
        int(max_iter),
        loss == "logistic",
        _MODES[selection],
        eps0,
        L,
        int(refresh),
        int(record_every),
        block_shift(D),
        rng,
        done,
        *scr,
    )
    _load_kernel(args)
    t0 = time.perf_counter()
    coef, path, objective, _, _ = _run_watched(_fast_fw, args, done, max_iter, progress)
    seconds = time.perf_counter() - t0
    screened = scr[6][: int(scr[7][0])].tolist()
    return FWResult(coef, max_iter, seconds, objective.tolist(), path.tolist(), plan, screened)
