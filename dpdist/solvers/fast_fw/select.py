"""Vertex selection in the fast Frank-Wolfe: the choice of (j, sigma) and the state behind it.

Non-private logistic runs keep the lazy max-queue (:mod:`dpdist.solvers.fast_fw.heap`); private
runs keep the exponential mechanism's weights (:mod:`dpdist.solvers.fast_fw.weights`) and draw
with the BSLS sampler (mode 1) or a race over the weights (mode 2), or use Laplace
report-noisy-max over all 2D signed vertices (mode 3, O(D) a step, no maintained state). For
squared loss every alpha_k moves with w_m, so the choice scans all D coordinates (the argmax, or
the weights rebuilt from alpha). Each mode's state is updated once per moved coordinate
(:func:`_selection_update`) and rebuilt after a full gradient (:func:`_selection_reset`).
"""

from __future__ import annotations

import math

import numba

from dpdist.solvers.fast_fw.heap import _heap_build, _heap_next, _heap_update
from dpdist.solvers.fast_fw.state import Config, Data, Heap, Iterate, Sampler
from dpdist.solvers.fast_fw.weights import _laplace_vertex, _reweight, _vertex, _weights_from_alpha


@numba.njit(cache=True)
def _selection_reset(alpha, cfg: Config, heap: Heap, smp: Sampler, size):
    """The queue (mode 0) or the sampler weights (modes 1, 2) rebuilt from alpha; returns the heap size."""
    if cfg.mode == 0:
        return _heap_build(alpha, heap.keys, heap.items, heap.cur)
    if cfg.mode != 3:
        _weights_from_alpha(alpha, smp, cfg.scale, cfg.shift, cfg.threads)
    return size


@numba.njit(cache=True)
def _selection_update(alpha, touched, n_touched, cfg: Config, heap: Heap, smp: Sampler, size):
    """The queue or the sampler after a move, once per coordinate whose alpha moved (the
    ``n_touched`` listed in ``touched``); returns the heap size."""
    if cfg.mode == 0:
        return _heap_update(alpha, touched, n_touched, heap, size)
    if cfg.mode != 3 and n_touched > 0:
        _reweight(alpha, touched, n_touched, smp, cfg.scale, cfg.shift, cfg.threads)
    return size


@numba.njit(cache=True)
def _argmax_abs(alpha):
    """The first k with the largest |alpha_k|."""
    j, best = 0, -1.0
    for k in range(alpha.shape[0]):
        if abs(alpha[k]) > best:
            best, j = abs(alpha[k]), k
    return j


@numba.njit(cache=True)
def _choose_vertex(data: Data, cfg: Config, wm, it: Iterate, heap: Heap, smp: Sampler, size, rng):
    """The step's vertex sigma lam e_j: returns (j, sigma, heap size). Squared loss first sets
    alpha = w_m beta - X^T y at the current iterate. The sign is the descent direction without
    privacy; with the exponential mechanism it is drawn with the odds of its two vertices'
    weights, e^(-a) against e^(a), a = scale alpha_j (Laplace draws it with j)."""
    alpha, logistic, mode = it.alpha, cfg.logistic, cfg.mode
    if not logistic:
        for k in range(alpha.shape[0]):
            alpha[k] = wm * it.beta[k] - data.ybar[k]
    if mode == 3:
        j, sigma = _laplace_vertex(alpha, cfg.L / cfg.eps0, rng)
    elif not logistic:
        if mode == 0:
            j = _argmax_abs(alpha)
        else:
            _weights_from_alpha(alpha, smp, cfg.scale, cfg.shift, cfg.threads)
            j = _vertex(mode, smp, alpha, cfg.scale, cfg.shift, rng, cfg.threads)
    elif mode == 0:
        j, size = _heap_next(alpha, heap.keys, heap.items, size, heap.cur, heap.popped)
    else:
        j = _vertex(mode, smp, alpha, cfg.scale, cfg.shift, rng, cfg.threads)
    if mode == 0:
        sigma = -1.0 if alpha[j] > 0 else 1.0
    elif mode != 3:
        a = cfg.scale * alpha[j]
        descent = -1.0 if a > 0 else 1.0
        sigma = descent if rng.random() < 1.0 / (1.0 + math.exp(-2.0 * abs(a))) else -descent
    return j, sigma, size
