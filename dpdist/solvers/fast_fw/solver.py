"""The fast sparse (DP) Frank-Wolfe solver: Alg. 2 of [RKL23] with the lazy max-queue (Alg. 3) and
the BSLS sampler (Alg. 4), :func:`fast_frank_wolfe`.

Same problem, losses, privacy plan and vertex distribution as :mod:`dpdist.solvers.frank_wolfe`
(Alg. 1); what changes is the cost of a step. The weights are kept as w = w_m * w~ (the shrink
w <- (1 - eta) w is one scalar multiply) and the margins as X w = w_m * vbar, so moving to vertex
sigma lambda e_j touches only the rows that contain feature j (:mod:`dpdist.solvers.fast_fw.move`):

* squared loss -- exact: alpha = X^T (X w - y) = w_m beta - X^T y with beta = X^T X w~ kept up to
  date. Every alpha_k moves with w_m, so vertex selection scans all D coordinates (non-private
  argmax, or the sampler rebuilt from all D weights for the exponential mechanism). The
  coordinate sequence and weights are Alg. 1's (tested).
* logistic loss -- cached row derivatives qbar_i refreshed only on the touched rows, alpha =
  X^T qbar following them, and the vertex from the lazy max-queue (non-private) or the exact
  exponential-mechanism sampler over the weights 2 cosh(eps0 alpha_j / (2 L)), each updated in
  O(1) (:mod:`dpdist.solvers.fast_fw.weights`); a full refresh every ``refresh`` steps bounds the
  staleness (:mod:`dpdist.solvers.fast_fw.kernel`).

Modes: ``selection=None`` (queue), ``"exponential"`` (BSLS, Alg. 2 + 4),
``"exponential-bruteforce"`` (an O(D) exponential race -- Gumbel-max -- over the same maintained
weights, [RKL23]'s Alg. 2 + brute-force noisy-max ablation), ``"laplace"`` ([TTZ15]'s Laplace
report-noisy-max over the 2D signed vertices, O(D) per step, as Alg. 1 draws it).

``gram=True`` (squared loss, small D): beta moves by delta times a row of the precomputed X^T X
instead of through the rows of column j, so a step costs O(S_r + D) instead of O(S_r S_c), the
difference on dense low-dimensional data; O(n D^2) once. ``screening``: scheduled passes that zero
coordinates inside the kernel (:mod:`dpdist.solvers.fast_fw.screen`).

This module checks the arguments, prepares the kernel's grouped arguments
(:mod:`dpdist.solvers.fast_fw.state`) and runs the kernel, compiled or loaded before the clock
starts, in a thread that reports progress.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Callable

import numba
import numpy as np
import scipy.sparse as sp

from dpdist.exceptions import ParameterError
from dpdist.solvers.fast_fw.checks import _check_csc, _dots_parallel, _dots_serial
from dpdist.solvers.fast_fw.kernel import _fast_fw
from dpdist.solvers.fast_fw.state import Config, Data, Screen
from dpdist.solvers.fast_fw.threads import _threaded, _threads
from dpdist.solvers.frank_wolfe import (
    FWPrivacy,
    FWResult,
    Progress,
    check_init,
    check_problem,
    column_norms,
    privacy_plan,
)
from dpdist.solvers.samplers import block_shift
from dpdist.solvers.screening import ScreeningPlan
from dpdist.utils.random import RandomState, check_random_state

__all__ = ["FAST_SELECTIONS", "fast_frank_wolfe"]

FAST_SELECTIONS = (None, "exponential", "exponential-bruteforce", "laplace")
_MODES = {None: 0, "exponential": 1, "exponential-bruteforce": 2, "laplace": 3}
logger = logging.getLogger(__name__)
# A move whose row-order update (Alg. 2 of [RKL23]) would visit more entries than this share of
# nnz + D + n, divided by the column passes' threads (the row scatter stays on one), goes through
# X by columns instead (:func:`dpdist.solvers.fast_fw.move._move`; the same state to the bit). Set
# from benchmarks/fw_heavy_steps.py (one thread; its dated results say where the two break even);
# math.inf: always by rows, as [RKL23].
_HEAVY_SHARE = 0.1
_ROW_BAND = 1 << 19  # rows per band of g in the column layout's tiles: 4 MB, held in the last-level cache


def _load_kernel(args: tuple) -> None:
    """Compile (or load from numba's cache) the solver kernel for these arguments' types, so
    that the timed solve measures iterations only (not the first load in a process)."""
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


def _extra_args(
    plan: ScreeningPlan | None, X: sp.spmatrix, T: int, init: np.ndarray | None = None, gram: np.ndarray | None = None
) -> tuple:
    """The kernel's arguments after ``done``: the start (empty: 0), the Gram matrix (empty: none), the
    screening (mode 0 and dummies without it) and the share of X's size above which a move's update
    goes by columns (:data:`_HEAVY_SHARE` over the threads), the rows per band of such a pass
    (:data:`_ROW_BAND`) and how many threads its column passes use
    (:func:`~dpdist.solvers.fast_fw.threads._threads`)."""
    start = np.zeros(0) if init is None else check_init(init, X.shape[1], math.inf)
    w0 = (start, np.zeros((0, 0)) if gram is None else gram)
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


def _kernel_args(flat: tuple) -> tuple:
    """The kernel's grouped arguments ``(data, cfg, rng, done, w0, scr)`` from the flat tuple of the
    solver's arrays and settings: X's CSR arrays (3), its CSC arrays (3), y, X^T y, lam, T, whether
    the loss is logistic, the selection mode, eps0, L, refresh, record_every, the sampler's block
    shift, the generator, the ``done`` counter, then :func:`_extra_args`. The scalars are converted
    to one type each, so the kernel has one signature per dtype of X."""
    (*arrays, lam, T, logistic, mode, eps0, L, refresh, record_every, shift, rng, done) = flat[:19]
    w0, gram, code, mask, colnorm, scoef, events, n_events, heavy, band, threads = flat[19:]
    r_ptr, r_idx, r_val, c_ptr, c_idx, c_val, y, ybar = arrays
    D = ybar.shape[0]
    data = Data(r_ptr, r_idx, r_val, c_ptr, c_idx, c_val, y, ybar, gram)
    eps0, L, logistic = float(eps0), float(L), bool(logistic)
    use_gram = not logistic and gram.shape[0] == D
    cfg = Config(
        float(lam), int(T), logistic, int(mode), eps0, L, eps0 / (2.0 * L), int(refresh), int(record_every),
        int(shift), float(heavy), int(band), int(threads), use_gram,
    )  # fmt: skip
    zero_buf = np.empty(D if code in (1, 2) else 1, dtype=np.int64)
    return data, cfg, rng, done, w0, Screen(int(code), mask, colnorm, scoef, events, n_events, zero_buf)


def _check_selection(selection: str | None, screening: ScreeningPlan | None, refresh: int) -> None:
    """The selection mode, its pairing with the screening plan, and the refresh period."""
    if selection not in FAST_SELECTIONS:
        raise ParameterError(f"selection must be one of {FAST_SELECTIONS}, got {selection!r}")
    if selection is not None and screening is not None and screening.mode == "exact":
        raise ParameterError(
            f"screening plan mode 'exact' is not private and does not go with the private "
            f"selection={selection!r}: screen private runs with 'rnm' or 'adp'"
        )
    if refresh < 0:
        raise ParameterError(f"refresh must be >= 0, got {refresh}")


def _private_plan(
    selection: str | None,
    epsilon: float | None,
    delta: float | None,
    max_iter: int,
    loss: str,
    lam: float,
    y_bound: float,
    calibration: str,
    lipschitz_noise: float | None,
) -> tuple[FWPrivacy | None, float, float]:
    """The privacy plan of a private run (None otherwise) and the kernel's eps0 and L: the kernel
    draws Lap(L / eps0) for ``"laplace"``, so L is doubled there under the safe calibration
    (2 L / eps0), and kept for the papers' L / eps0 (calibration="paper")."""
    if selection is None:
        return None, 1.0, 1.0
    if epsilon is None or delta is None:
        raise ParameterError("a private run needs epsilon and delta")
    mechanism = "laplace" if selection == "laplace" else "exponential"
    plan = privacy_plan(epsilon, delta, max_iter, loss, lam, y_bound, mechanism, calibration, lipschitz_noise)
    L = plan.lipschitz
    if selection == "laplace":
        L *= 2.0 if calibration == "safe" else 1.0
    return plan, plan.eps0, L


def _canonical(X: sp.csr_matrix) -> sp.csr_matrix:
    """X checked for the kernel (dimensions below 2**31, finite entries) in canonical format: sorted
    rows, no repeated entry, the order both of a move's update paths follow."""
    if max(X.shape) >= 2**31:  # n is private: the message names neither dimension's value
        raise ParameterError("X must have fewer than 2**31 rows and fewer than 2**31 columns")
    if X.nnz and not (np.isfinite(X.data.min()) and np.isfinite(X.data.max())):  # min/max: no O(nnz) temporary
        raise ParameterError("X has a non-finite entry (inf or NaN)")
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return X


_DENSE_GRAM = 0.05  # the density above which X^T X is formed by dense BLAS over row blocks
_BLOCK_ENTRIES = 8 << 20  # entries of one dense row block (64 MiB in float64)


def _gram_float64(Xc: sp.csc_matrix) -> np.ndarray:
    """X^T X in float64. scipy's sparse product costs per pair of non-zeros sharing a row, so on
    dense data (density above ``_DENSE_GRAM``, e.g. a regression table) it is several times slower
    than BLAS on dense row blocks of ``_BLOCK_ENTRIES`` entries each (``benchmarks/screening_tables.py``'s
    BlogFeedback runs); the blocks are summed in order, so the result is deterministic."""
    n, D = Xc.shape
    if Xc.nnz < _DENSE_GRAM * n * D:
        Xg = Xc.astype(np.float64, copy=False)
        return np.asarray((Xg.T @ Xg).toarray())
    Xr = Xc.tocsr()
    G = np.zeros((D, D))
    step = max(1, _BLOCK_ENTRIES // max(D, 1))
    for start in range(0, n, step):
        B = Xr[start : start + step].toarray().astype(np.float64, copy=False)
        G += B.T @ B
    return G


def _gram_matrix(gram: bool | np.ndarray, loss: str, Xc: sp.csc_matrix, private: bool) -> np.ndarray | None:
    """X^T X for ``gram=True`` (float64; D <= 20,000), the caller's matrix for a non-private run, or None."""
    D = Xc.shape[1]
    if gram is False:
        return None
    if loss != "squared" or D > 20000:
        raise ParameterError("gram is for squared loss with at most 20,000 features (a dense D x D matrix)")
    if gram is not True and private:
        raise ParameterError(
            "a private run computes X^T X itself (gram=True): a supplied matrix is not checked "
            "against X, and the privacy analysis bounds only X's own"
        )
    if gram is True:  # X^T X in float64 (D <= 20,000; float32 products would round)
        G = _gram_float64(Xc)
    else:
        G = np.asarray(gram, dtype=np.float64)
    if G.shape != (D, D) or not np.all(np.isfinite(G)):
        raise ParameterError(f"gram must be X^T X, a finite {D} x {D} matrix")
    return G


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
    """Alg. 2 of [RKL23] (+ Alg. 3 queue, or + Alg. 4 sampler when private). ``refresh``: full
    gradient refresh every that many steps (logistic only; 0 = never, as [RKL23]). ``screening``:
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
    private = selection is not None or (screening is not None and screening.loss is not None)
    X, y = check_problem(X, y, loss, lam, max_iter, private, y_bound, record_every)
    _check_selection(selection, screening, refresh)
    plan, eps0, L = _private_plan(
        selection, epsilon, delta, max_iter, loss, lam, y_bound, calibration, lipschitz_noise
    )  # fmt: skip
    X = _canonical(X)
    rng = check_random_state(random_state)
    Xc = X.tocsc() if X_csc is None else _check_csc(X_csc, X, plan is not None)
    # one kernel signature: int64 pointers (nnz may pass 2**31), int32 indices (less memory traffic)
    rows = (X.indptr.astype(np.int64, copy=False), X.indices.astype(np.int32, copy=False), X.data)
    cols = (Xc.indptr.astype(np.int64, copy=False), Xc.indices.astype(np.int32, copy=False), Xc.data)
    ybar = _threaded(_dots_serial, _dots_parallel, X.nnz, *cols, y)  # X^T y, as scipy's X.T @ y (the same bits)
    if init is not None:
        check_init(init, X.shape[1], lam)
    G = _gram_matrix(gram, loss, Xc, private)
    scr = _extra_args(screening, Xc, max_iter, init, G)
    done = np.zeros(1, dtype=np.int64)  # the kernel's completed iterations
    settings = (float(lam), int(max_iter), loss == "logistic", _MODES[selection], eps0, L, int(refresh))
    args = _kernel_args((*rows, *cols, y, ybar, *settings, int(record_every), block_shift(X.shape[1]), rng, done, *scr))
    _load_kernel(args)
    t0 = time.perf_counter()
    coef, path, objective, _, _ = _run_watched(_fast_fw, args, done, max_iter, progress)
    seconds = time.perf_counter() - t0
    screened = scr[6][: int(scr[7][0])].tolist()
    return FWResult(coef, max_iter, seconds, objective.tolist(), path.tolist(), plan, screened)
