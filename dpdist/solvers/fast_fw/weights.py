"""The exponential mechanism's weights in the fast private Frank-Wolfe, and its vertex draws.

For logistic loss the mechanism's weights 2 cosh(eps0 alpha_j / (2 L)) are held as
W_j = 2 cosh(a_j) e^-ref with one shared exponent ref (:mod:`dpdist.solvers.samplers`), their block
sums kept for the Big-Step Little-Step sampler (Alg. 4 of [RKL23]). A step updates the weights of
the coordinates it moved, each in O(1) (:func:`_reweight`), or rebuilds them all from alpha in one
vectorised pass, threaded in runs of whole blocks (:func:`_all_weights`). A vertex is drawn by the
sampler, by an O(D) exponential race over the same weights (the brute-force ablation), or by
Talwar et al.'s Laplace report-noisy-max (:func:`_laplace_vertex`; [TTZ15]).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from dpdist.solvers.fast_fw.state import _AHEAD, Sampler
from dpdist.solvers.fast_fw.threads import _serial_and_parallel
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
)
from dpdist.solvers.screening import _laplace
from dpdist.utils.prefetch import prefetch


@numba.njit(cache=True)
def _log2cosh(a: float) -> float:
    """ln(2 cosh a), without overflow."""
    x = abs(a)
    return x + math.log1p(math.exp(-2.0 * x))


@numba.njit(cache=True)
def _rebuilds(n_moved, D):
    """Whether a step that moved ``n_moved`` of the D coordinates rebuilds every sampler weight
    (:func:`_reweight`) instead of setting each: from a sixteenth of them on."""
    return 16 * n_moved >= D


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
def _weights_from_alpha(alpha, smp: Sampler, scale, shift, threads):
    """:func:`_all_weights` on ``threads`` threads (1: serially)."""
    if threads > 1:
        _weights_parallel(alpha, scale, smp.W, smp.c, smp.err, smp.st, shift, smp.xbuf, smp.bits, 8 * threads)
    else:
        _weights_serial(alpha, scale, smp.W, smp.c, smp.err, smp.st, shift, smp.xbuf, smp.bits, 1)


@numba.njit(cache=True)
def _reweight(alpha, touched, n_touched, smp, scale, shift, threads):
    """The sampler weights of the ``n_touched`` coordinates listed in ``touched`` after their alpha
    moved: each set in O(1) with its block sum, or all rebuilt from alpha (:func:`_weights_from_alpha`)
    when a weight would pass the headroom or when at least a sixteenth of the D coordinates moved
    (a step on a column in many rows): one sequential vectorised pass on the threads is then
    cheaper than the scattered updates and, after a column pass, the listing of the moved
    coordinates it spares (benchmarks/fw_full_shape_steps.py). Setting each, alpha_k and W_k are asked for ``_AHEAD``
    coordinates ahead (a prefetch, as :func:`dpdist.solvers.fast_fw.move._move`). Either way the
    weights are 2 cosh(scale alpha_k) up to the shared factor e^-ref; the choice depends on the
    number of moved coordinates, a function of the data that changes only the step's time and
    the rounding."""
    if _rebuilds(n_touched, alpha.shape[0]):
        _weights_from_alpha(alpha, smp, scale, shift, threads)
        return
    xbuf, W = smp.xbuf, smp.W
    ref, xmax = smp.st[0], -np.inf
    for p in range(n_touched):
        if p + _AHEAD < n_touched:
            prefetch(alpha, touched[p + _AHEAD])
        xbuf[p] = scale * abs(alpha[touched[p]]) - ref
        xmax = max(xmax, xbuf[p])
    if xmax > _HEADROOM:
        _weights_from_alpha(alpha, smp, scale, shift, threads)
    else:
        _exp_weights(xbuf, n_touched, smp.st[1], smp.wbuf, smp.bits)
        for p in range(n_touched):
            if p + _AHEAD < n_touched:
                prefetch(W, touched[p + _AHEAD])
            _set(W, smp.c, smp.err, shift, touched[p], smp.wbuf[p])
        _settle(W, smp.c, smp.err, shift)


@numba.njit(cache=True)
def _vertex(mode, smp: Sampler, alpha, scale, shift, rng, threads):
    """A coordinate drawn with probability proportional to its weight: by the BSLS sampler (mode 1)
    or an exponential race over the weights (mode 2), after a rebuild if the sums need one."""
    z = _total(smp.c)
    if _needs_rebuild(z):
        _weights_from_alpha(alpha, smp, scale, shift, threads)
        z = _total(smp.c)
    return _draw(smp.W, smp.c, shift, z, rng) if mode == 1 else _race(smp.W, rng)


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
