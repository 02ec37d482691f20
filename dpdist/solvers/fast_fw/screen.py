"""Screening inside the fast Frank-Wolfe kernel: a pass over the solver's state that zeroes coordinates.

At a scheduled iteration (:mod:`dpdist.solvers.screening`), after the move and after a refresh due
at that iteration, one pass computes u^T g, ||u||, ||g|| over the rows (O(n): u_i = w_m vbar_i;
g_i = u_i - y_i, or the cached qbar_i for logistic loss), alpha (squared: w_m beta - X^T y, O(D);
logistic: maintained) and the precomputed column norms, and zeroes the chosen coordinates. Zeroing
j is the move w~_j <- 0 through the same bookkeeping as a Frank-Wolfe step
(:func:`dpdist.solvers.fast_fw.move._move_and_update`): vbar on the rows of column j, beta
(squared) or qbar and alpha on those rows (logistic), then the sampler weights or heap keys of
every touched coordinate; w_m is untouched. So the invariants (w = w_m w~, X w = w_m vbar,
beta = X^T X w~, alpha = X^T qbar) hold after every pass.
"""

from __future__ import annotations

import math

import numba

from dpdist.solvers.fast_fw.move import _move_and_update
from dpdist.solvers.fast_fw.state import Config, Data, Heap, Iterate, Layout, Sampler, Scratch, Screen
from dpdist.solvers.screening import _pass_constants, _screen_rnm, _screen_set


@numba.njit(cache=True)
def _screen_sums(data: Data, logistic, wm, it: Iterate):
    """(u^T g, ||u||^2, ||g||^2) over the rows, u = X w and g the loss derivatives at w."""
    ug, un2, gn2 = 0.0, 0.0, 0.0
    for i in range(data.y.shape[0]):
        ui = wm * it.vbar[i]
        gi = it.q[i] if logistic else ui - data.y[i]
        ug += ui * gi
        un2 += ui * ui
        gn2 += gi * gi
    return ug, un2, gn2


@numba.njit(cache=True)
def _zero_coordinate(j, data: Data, cfg: Config, wm, it: Iterate, buf: Scratch, lay: Layout, heap, smp, size):
    """w~_j <- 0 with the same state updates as a Frank-Wolfe move of coordinate j; returns the heap size."""
    delta = -it.wt[j]
    it.wt[j] = 0.0
    return _move_and_update(j, delta, data, cfg, wm, it, buf, lay, heap, smp, size)


@numba.njit(cache=True)
def _chosen(scr: Screen, wt, alpha, const, rt, Bc, rng):
    """The coordinates the pass zeroes, into ``scr.zero_buf``: one by the noisy min (mode 3) if it
    screens a non-zero, else the rule's set; returns their number."""
    scoef = scr.scoef
    if scr.mode == 3:
        j, screened = _screen_rnm(alpha, scr.colnorm, const, rt, Bc, scoef, scoef[9], scoef[10], rng)
        if screened and wt[j] != 0.0:
            scr.zero_buf[0] = j
            return 1
        return 0
    sigma = scoef[9] if scr.mode == 2 else 0.0
    return _screen_set(alpha, scr.colnorm, wt, const, rt, Bc, scoef, sigma, scr.zero_buf, rng)


@numba.njit(cache=True)
def _fast_screen(
    t,
    scr: Screen,
    data: Data,
    cfg: Config,
    wm,
    it: Iterate,
    buf: Scratch,
    lay: Layout,
    heap: Heap,
    smp: Sampler,
    size,
    rng,
):
    """One screening pass at iteration t from the solver's state (module doc), each zeroing
    recorded in ``scr.events``; returns the heap size."""
    alpha = it.alpha
    if not cfg.logistic:  # alpha at the moved iterate
        for k in range(alpha.shape[0]):
            alpha[k] = wm * it.beta[k] - data.ybar[k]
    ug, un2, gn2 = _screen_sums(data, cfg.logistic, wm, it)
    const, rt, Bc = _pass_constants(alpha, ug, math.sqrt(un2), math.sqrt(gn2), scr.scoef)
    count = _chosen(scr, it.wt, alpha, const, rt, Bc, rng)
    for p in range(count):
        j = scr.zero_buf[p]
        size = _zero_coordinate(j, data, cfg, wm, it, buf, lay, heap, smp, size)
        scr.events[scr.n_events[0], 0] = t
        scr.events[scr.n_events[0], 1] = j
        scr.n_events[0] += 1
    return size
