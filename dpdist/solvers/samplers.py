"""Exact exponential-mechanism samplers over D items with changing log-weights.

References: [RKL23] Sec. 3.3; docs/algorithms.md §2.5.

Items carry log-weights v_j; a draw returns j with probability exp(v_j) / sum_k exp(v_k).

Numerically stable weights. The log-weights are held in log space with one shared exponent:
W_j = exp(v_j - ref), ref = max_k v_k at the last rebuild. This is the paper's log-space
representation with the max factored out once for all items instead of once per draw
(the paper and docs/algorithms.md §2.5 normalise by z = logsumexp every draw): it has the same range, it
cannot overflow, and an update costs one ``exp`` instead of the three of the log-sum
update c_b <- c_b + ln(1 - e^{v_old - c_b} + e^{v_new - c_b}). The state is rebuilt
from the log-weights (O(D)) when an item would rise more than e^600 above ref, or when
the total falls below e^-40 (the top item dropped far). Items more than e^-690 below ref
are stored as 0: their probability is then below e^-650, which a double cannot represent
next to 1 anyway (the per-draw normalisation exp(v_j - z) underflowed them too).

Blocks: B contiguous items, B the power of two nearest sqrt(D) (docs/algorithms.md §2.5: ceil(sqrt(D)); a
power of two within a factor sqrt(2) keeps every bound and makes block(j) = j >> shift, a
shift instead of an integer division on every update). Block sums c_b = sum of the W_j of a
block are updated by c_b += W_new - W_old
with a running bound on their rounding error; before a draw, a block is re-summed (B
additions) when that bound exceeds 1e-12 c_b -- this covers the cancellation docs/algorithms.md §2.5 names
(one dominant item demoted), which makes the bound jump past c_b at once.

* Big-Step Little-Step ([RKL23] Alg. 4): the Efraimidis-Spirakis A-ExpJ weighted
  reservoir of size 1 run over the array, jumping whole blocks the skip budget passes over
  ("big steps"). About O(log D) reservoir replacements, each scanning at most one block:
  O(sqrt(D) log D) per draw, O(1) per weight update. The paper's printed algorithm is
  corrected as docs/algorithms.md lists (block(i) = floor(i / B) in both update and draw; the jump to
  the next block start; t = exp(omega_j log T)).
* Brute force (the O(D) reference and the paper's "brute-force noisy max" ablation): the
  exponential race argmax_j W_j / E_j with E_j ~ Exp(1), which is Gumbel-max
  argmax_j v_j - ln E_j written with the same weights.

The kernels draw from the caller's ``numpy`` Generator itself (passed into the njit functions), so its
whole 128-bit PCG64 state drives the noise (a seed handed to numba's legacy generator would be
truncated to 32 bits).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from dpdist.utils.random import RandomState, check_random_state

__all__ = ["BSLSSampler"]

_HEADROOM = 600.0  # rebuild before a weight exceeds e^600 relative to ref
_FLUSH = -690.0  # weights below e^-690 relative to ref are stored as 0
_Z_MIN = math.exp(-40.0)  # rebuild when the total mass falls below this (relative to ref)
_EPS = 2.0**-52
_TOL = 1e-12  # re-sum a block when its rounding-error bound exceeds this relative to its sum
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 split so k * _LN2_HI is exact (Cody-Waite)
_LN2_LO = 1.90821492927058770002e-10


def block_shift(D: int) -> int:
    """log2 of the block size B: the power of two nearest sqrt(D) (block of j = j >> shift)."""
    return max(0, round(math.log2(math.sqrt(D)))) if D > 1 else 0


@numba.njit(cache=True, error_model="numpy")
def _exp_weights(x: np.ndarray, n: int, cref: float, out: np.ndarray, bits: np.ndarray) -> None:
    """out[i] = e + cref / e with e = exp(x[i]) (0 when x[i] < _FLUSH), for i < n; x[i] <= _HEADROOM.

    exp by Cody-Waite reduction x = k ln 2 + r, |r| <= ln(2)/2, a degree-13 Taylor polynomial
    (truncation < 1e-17) and 2^k assembled from its exponent bits: about 1 ulp from libm
    (tested to 2), and the loop vectorises. numba otherwise calls the scalar libm exp per item (the pip llvmlite
    has no SVML), which made this the largest cost of a fast DP-FW step.
    """
    fb = bits.view(np.float64)
    for i in range(n):
        xi = min(max(x[i], _FLUSH - 1.0), _HEADROOM)
        k = math.floor(xi * _LOG2E + 0.5)
        r = (xi - k * _LN2_HI) - k * _LN2_LO
        p = 1.0 + r * (
            1.0
            + r
            * (
                1.0 / 2
                + r
                * (
                    1.0 / 6
                    + r
                    * (
                        1.0 / 24
                        + r
                        * (
                            1.0 / 120
                            + r
                            * (
                                1.0 / 720
                                + r
                                * (
                                    1.0 / 5040
                                    + r
                                    * (
                                        1.0 / 40320
                                        + r
                                        * (
                                            1.0 / 362880
                                            + r
                                            * (
                                                1.0 / 3628800
                                                + r * (1.0 / 39916800 + r * (1.0 / 479001600 + r * (1.0 / 6227020800)))
                                            )
                                        )
                                    )
                                )
                            )
                        )
                    )
                )
            )
        )
        bits[i] = (np.int64(k) + 1023) << 52
        out[i] = p if x[i] >= _FLUSH else 0.0
    for i in range(n):
        e = out[i] * fb[i]
        out[i] = e + cref / e if e > 0.0 else 0.0


@numba.njit(cache=True)
def _resum(W: np.ndarray, c: np.ndarray, err: np.ndarray, shift: int, b: int) -> None:
    lo, hi = b << shift, min(W.shape[0], (b + 1) << shift)
    s = 0.0
    for i in range(lo, hi):
        s += W[i]
    c[b] = s
    err[b] = (hi - lo) * _EPS * s


@numba.njit(cache=True)
def _resum_all(W: np.ndarray, c: np.ndarray, err: np.ndarray, shift: int) -> None:
    for b in range(c.shape[0]):
        _resum(W, c, err, shift, b)


@numba.njit(cache=True)
def _rebuild(
    v: np.ndarray,
    W: np.ndarray,
    c: np.ndarray,
    err: np.ndarray,
    st: np.ndarray,
    shift: int,
    xbuf: np.ndarray,
    bits: np.ndarray,
) -> None:
    """Set ref = max v (st[0]); recompute every W_j = exp(v_j - ref) and every block sum."""
    ref = v.max()
    st[0] = ref
    st[1] = 0.0
    for j in range(v.shape[0]):
        xbuf[j] = v[j] - ref
    _exp_weights(xbuf, v.shape[0], 0.0, W, bits)
    _resum_all(W, c, err, shift)


@numba.njit(cache=True)
def _set(W: np.ndarray, c: np.ndarray, err: np.ndarray, shift: int, j: int, w: float) -> None:
    """W_j <- w, moving its block sum c[j >> shift] and the bound on that sum's rounding error.

    The sum may be inexact until :func:`_settle` re-sums the blocks whose bound grew too big;
    call it before the next draw (a per-update check costs several times the update)."""
    b = j >> shift
    old = W[j]
    W[j] = w
    s = c[b] + (w - old)
    c[b] = s
    err[b] += _EPS * (abs(s) + old + w)


@numba.njit(cache=True)
def _settle_block(W: np.ndarray, c: np.ndarray, err: np.ndarray, shift: int, b: int) -> None:
    """Re-sum block b if its error bound exceeds _TOL of its sum (or the sum cancelled below 0)."""
    if err[b] > _TOL * c[b]:
        _resum(W, c, err, shift, b)


@numba.njit(cache=True)
def _settle(W: np.ndarray, c: np.ndarray, err: np.ndarray, shift: int) -> None:
    """:func:`_settle_block` on every block (O(D / B) checks)."""
    for b in range(c.shape[0]):
        _settle_block(W, c, err, shift, b)


@numba.njit(cache=True)
def _total(c: np.ndarray) -> float:
    z = 0.0
    for b in range(c.shape[0]):
        z += c[b]
    return z


@numba.njit(cache=True)
def _needs_rebuild(z: float) -> bool:
    return not (_Z_MIN <= z < math.inf)


@numba.njit(cache=True)
def _draw(W: np.ndarray, c: np.ndarray, shift: int, z: float, rng: np.random.Generator) -> int:
    """One exact draw: A-ExpJ reservoir over the items, jumping blocks the budget skips."""
    D = W.shape[0]
    inv = 1.0 / z
    res = -1
    log_key = -np.inf  # reservoir key T = U^(1/omega) in log space; none yet
    budget = 0.0  # weight still to skip before the next replacement
    for b in range(c.shape[0]):
        if res >= 0:
            rem = c[b] * inv
            if rem < budget:  # big step: the whole block is skipped
                budget -= rem
                continue
        for pos in range(b << shift, min(D, (b + 1) << shift)):
            om = W[pos] * inv
            if om > 0.0 and om >= budget:  # this item takes the reservoir
                res = pos
                t = math.exp(om * log_key)  # T^omega; 0 for the first reservoir
                r = t + (1.0 - t) * rng.random()
                if r <= 0.0:
                    r = 5e-324
                log_key = math.log(r) / om
                u = rng.random()
                while u <= 0.0:
                    u = rng.random()
                budget = math.log(u) / log_key
            else:
                budget -= om
    return res


@numba.njit(cache=True)
def _race(W: np.ndarray, rng: np.random.Generator) -> int:
    """Brute force over all D: argmax_j W_j / E_j, E_j ~ Exp(1) (Gumbel-max on the same weights)."""
    best, arg = -1.0, -1
    for j in range(W.shape[0]):
        u = rng.random()
        while u <= 0.0:
            u = rng.random()
        key = W[j] / -math.log(u)
        if key > best:
            best, arg = key, j
    return arg


@numba.njit(cache=True)
def _update_log(v, W, c, err, st, shift, xbuf, bits, j, log_weight):
    v[j] = log_weight
    x = log_weight - st[0]
    if x > _HEADROOM:
        _rebuild(v, W, c, err, st, shift, xbuf, bits)
    else:
        _set(W, c, err, shift, j, math.exp(x) if x >= _FLUSH else 0.0)
        _settle_block(W, c, err, shift, j >> shift)


@numba.njit(cache=True)
def _draw_checked(v, W, c, err, st, shift, xbuf, bits, brute, rng):
    z = _total(c)
    if _needs_rebuild(z):
        _rebuild(v, W, c, err, st, shift, xbuf, bits)
        z = _total(c)
    return _race(W, rng) if brute else _draw(W, c, shift, z, rng)


class BSLSSampler:
    """Big-Step Little-Step sampler over log-weights ``v`` (copied), with O(1) updates."""

    def __init__(self, log_weights: np.ndarray, random_state: RandomState = None) -> None:
        self.v = np.array(log_weights, dtype=np.float64)
        if self.v.ndim != 1 or self.v.size == 0 or not np.all(self.v < math.inf):
            raise ValueError("log_weights must be a non-empty vector of values < inf")
        if not np.any(self.v > -math.inf):
            raise ValueError("log_weights: at least one item needs a positive weight")
        D = self.v.size
        self.shift = block_shift(D)
        self.B = 1 << self.shift
        self.W = np.empty(D)
        self.c = np.empty((D + self.B - 1) // self.B)
        self.err = np.empty_like(self.c)
        self.st = np.empty(2)
        self._buf = (np.empty(D), np.empty(D, dtype=np.int64))
        _rebuild(self.v, self.W, self.c, self.err, self.st, self.shift, *self._buf)
        self._rng = check_random_state(random_state)  # its whole state drives the kernels' draws

    @property
    def block_log_sums(self) -> np.ndarray:
        """ln of each block's total weight (the c_b of docs/algorithms.md §2.5)."""
        with np.errstate(divide="ignore"):
            return np.log(self.c) + self.st[0]

    def update(self, j: int, log_weight: float) -> None:
        if not log_weight < math.inf:
            raise ValueError(f"log_weight must be < inf, got {log_weight}")
        _update_log(self.v, self.W, self.c, self.err, self.st, self.shift, *self._buf, int(j), float(log_weight))

    def draw(self) -> int:
        return int(_draw_checked(self.v, self.W, self.c, self.err, self.st, self.shift, *self._buf, False, self._rng))

    def draw_bruteforce(self) -> int:
        """The O(D) reference: an exponential race (Gumbel-max) over the same weights."""
        return int(_draw_checked(self.v, self.W, self.c, self.err, self.st, self.shift, *self._buf, True, self._rng))
