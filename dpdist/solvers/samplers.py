"""Exact exponential-mechanism samplers over D items with changing log-weights (seed 004 Sec. 3.3; spec 2.5).

Items carry log-weights v_j; a draw returns j with probability exp(v_j) / sum_k exp(v_k).

* Big-Step Little-Step (seed 004 Alg. 4): the Efraimidis-Spirakis A-ExpJ weighted reservoir
  of size 1 run over the array, with blocks of B = ceil(sqrt(D)) contiguous items whose
  log-sums c_b are maintained, so whole blocks the skip budget passes over are jumped
  ("big steps"). About O(log D) reservoir replacements, each scanning at most one block:
  O(sqrt(D) log D) per draw, O(1) per weight update. The seed's printed algorithm is
  corrected as the spec lists (block(i) = floor(i / B) in both update and draw; the jump to
  the next block start; t = exp(omega_j log T)).
* Gumbel-max over all D items (the O(D) reference and the "brute-force noisy max" ablation).

Block sums are updated incrementally, c_b <- c_b + ln(1 - e^{v_old - c_b} + e^{v_new - c_b}),
and recomputed from the block when that argument falls below 1e-12 (cancellation).
The kernels draw from numba's generator, seeded from the caller's ``numpy`` Generator.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from dpdist.utils.random import RandomState, check_random_state

__all__ = ["BSLSSampler"]


@numba.njit(cache=True)
def _seed(seed: int) -> None:
    np.random.seed(seed)


@numba.njit(cache=True)
def _block_logsum(v: np.ndarray, lo: int, hi: int) -> float:
    m = -np.inf
    for i in range(lo, hi):
        if v[i] > m:
            m = v[i]
    if m == -np.inf:
        return -np.inf
    s = 0.0
    for i in range(lo, hi):
        s += math.exp(v[i] - m)
    return m + math.log(s)


@numba.njit(cache=True)
def _build(v: np.ndarray, B: int) -> np.ndarray:
    D = v.shape[0]
    nb = (D + B - 1) // B
    c = np.empty(nb)
    for b in range(nb):
        c[b] = _block_logsum(v, b * B, min(D, (b + 1) * B))
    return c


@numba.njit(cache=True)
def _update(v: np.ndarray, c: np.ndarray, B: int, j: int, new: float) -> None:
    """Set v[j] = new and keep its block's log-sum c[j // B]."""
    b = j // B
    old = v[j]
    v[j] = new
    cb = c[b]
    if cb == -np.inf:
        c[b] = new
        return
    arg = 1.0 - math.exp(old - cb) + math.exp(new - cb)
    if arg < 1e-12:
        c[b] = _block_logsum(v, b * B, min(v.shape[0], (b + 1) * B))
    else:
        c[b] = cb + math.log(arg)


@numba.njit(cache=True)
def _draw(v: np.ndarray, c: np.ndarray, B: int) -> int:
    """One exact draw: A-ExpJ reservoir over the items, jumping blocks the budget skips."""
    D = v.shape[0]
    z = _block_logsum(c, 0, c.shape[0])
    res = -1
    log_key = -np.inf  # reservoir key T = U^(1/omega) in log space; none yet
    budget = 0.0  # weight still to skip before the next replacement
    pos = 0
    while pos < D:
        b = pos // B
        if pos == b * B and res >= 0:
            rem = math.exp(c[b] - z)
            if rem < budget:  # big step: the whole block is skipped
                budget -= rem
                pos = min(D, (b + 1) * B)
                continue
        om = math.exp(v[pos] - z)
        if om > 0.0 and om >= budget:  # this item takes the reservoir
            res = pos
            t = math.exp(om * log_key)  # T^omega; 0 for the first reservoir
            r = t + (1.0 - t) * np.random.random()
            if r <= 0.0:
                r = 5e-324
            log_key = math.log(r) / om
            u = np.random.random()
            while u <= 0.0:
                u = np.random.random()
            budget = math.log(u) / log_key
        else:
            budget -= om
        pos += 1
    return res


@numba.njit(cache=True)
def _gumbel_max(v: np.ndarray) -> int:
    best, arg = -np.inf, -1
    for j in range(v.shape[0]):
        u = np.random.random()
        while u <= 0.0:
            u = np.random.random()
        g = v[j] - math.log(-math.log(u))
        if g > best:
            best, arg = g, j
    return arg


class BSLSSampler:
    """Big-Step Little-Step sampler over log-weights ``v`` (copied), with O(1) updates."""

    def __init__(self, log_weights: np.ndarray, random_state: RandomState = None) -> None:
        self.v = np.array(log_weights, dtype=np.float64)
        if self.v.ndim != 1 or self.v.size == 0:
            raise ValueError("log_weights must be a non-empty vector")
        self.B = max(1, math.ceil(math.sqrt(self.v.size)))
        self.c = _build(self.v, self.B)
        _seed(int(check_random_state(random_state).integers(2**62)))

    def update(self, j: int, log_weight: float) -> None:
        _update(self.v, self.c, self.B, int(j), float(log_weight))

    def draw(self) -> int:
        return int(_draw(self.v, self.c, self.B))

    def draw_gumbel(self) -> int:
        """The O(D) reference: Gumbel-max over the same log-weights."""
        return int(_gumbel_max(self.v))
