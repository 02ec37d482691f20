"""Private top-k selection: the canonical Lipschitz mechanism (seed 003 App. A, Alg. 2).

Spec: ``../shared/spec/algorithms.md`` 4.2, which corrects the seed's class sizes.

Given scores q (sensitivity Delta_inf, one record may move scores in both directions),
normalise x = q / Delta and sort descending, x_[1] >= ... >= x_[d] with item ranks
j_1..j_d (ties broken by index). The loss of a k-set y,

    LOSS_gamma(y | x) = (1 - gamma) max(max_{i not in y} x_i, min_{i in y} x_i) - gamma min_{i in y} x_i,

has sensitivity 1, and the mechanism releases y with probability proportional to
exp(-c LOSS(y)), c = epsilon / 2 (non-monotone scores, required for DP-SIS) or epsilon
(monotone counts). The C(d, k) sets fall into k(d - k) + 1 utility classes (h, t): the top h
ranks, ``k - h - 1`` ranks from j_{h+2}..j_{t-1}, and j_t, of size C(t - h - 2, k - h - 1)
(the seed's C(t - h - 1, k - h - 1) double-counts), with utility
U_{h,t} = c (gamma x_[t] - (1 - gamma) x_[h+1]); the true top-k is the class (k - 1, k).

Two noise distributions (``noise=``):

* ``"gumbel"`` (default): exactly the exponential mechanism above. The class is drawn from
  log-weights U_{h,t} + ln|C_{h,t}| in two exact stages: h by Gumbel-max over the per-h
  log-sum-exp over t (computed in O(d k) with no random numbers), then t given h by inverse
  CDF. This is what makes d = 2e7, k = 100 feasible.
* ``"exponential"``: the original mechanism's choice, each set's utility plus Exp(1) noise
  (report-noisy-max with exponential noise, also epsilon-DP). The class noise is the max of
  |C_{h,t}| exponentials, X = -ln(1 - U^{1/m}), evaluated stably in log space (spec 1.5);
  this needs one uniform per class, O(d k) random numbers.

Either way, a uniform member of the chosen class is returned. Only the selected index set
is released.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from scipy.special import gammaln

from dpdist.exceptions import ParameterError
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_epsilon, check_positive, check_scores

__all__ = ["NOISES", "CanonicalTopK", "class_log_sizes"]

NOISES = ("gumbel", "exponential")


# ----------------------------------------------------------------------- kernels


_T_BLOCK = 2048  # ranks t per block: xs and lnfact slices stay in cache across all h of a chunk


@numba.njit(cache=True, parallel=True, fastmath=True)
def _log_mass_per_h(xs: np.ndarray, k: int, c: float, gamma: float, lnfact: np.ndarray, n_chunks: int) -> np.ndarray:
    """For each h in 0..k-1: log sum_{t=k+1..d} exp(U_{h,t} + ln C(t-h-2, k-h-1)) (t 1-based).

    ln C(n, r) = lnfact[n] - lnfact[r] - lnfact[n - r]. The ranks t are visited in blocks;
    for every block and every h a block maximum rescales the running sum (an online
    log-sum-exp), so the tables are streamed from memory once per chunk of h instead of
    twice per h, and the inner loops have no loop-carried dependency.
    """
    d = xs.shape[0]
    cg = c * gamma
    mx = np.full(k, -np.inf)
    sm = np.zeros(k)
    for chunk in numba.prange(n_chunks):
        for t0 in range(k + 1, d + 1, _T_BLOCK):
            t1 = min(t0 + _T_BLOCK, d + 1)
            for h in range(chunk, k, n_chunks):
                m = -np.inf
                for t in range(t0, t1):
                    m = max(m, cg * xs[t - 1] + lnfact[t - h - 2] - lnfact[t - k - 1])
                if m > mx[h]:
                    sm[h] *= math.exp(mx[h] - m)
                    mx[h] = m
                ref = mx[h]
                acc = 0.0
                for t in range(t0, t1):
                    acc += math.exp(cg * xs[t - 1] + lnfact[t - h - 2] - lnfact[t - k - 1] - ref)
                sm[h] += acc
    out = np.empty(k)
    for h in range(k):
        out[h] = -c * (1.0 - gamma) * xs[h] - lnfact[k - h - 1] + mx[h] + math.log(sm[h])
    return out


@numba.njit(cache=True)
def _draw_t(xs: np.ndarray, k: int, h: int, c: float, gamma: float, lnfact: np.ndarray, log_mass: float,
            u: float) -> int:
    """t (1-based) with probability exp(U_{h,t} + ln|C_{h,t}| - log_mass), by inverse CDF of u."""
    d = xs.shape[0]
    r = k - h - 1
    shift = -c * (1.0 - gamma) * xs[h] - lnfact[r] - log_mass
    acc = 0.0
    for t in range(k + 1, d + 1):
        acc += math.exp(shift + c * gamma * xs[t - 1] + lnfact[t - h - 2] - lnfact[t - k - 1])
        if acc >= u:
            return t
    return d  # u beyond the rounded total mass: the last class


@numba.njit(cache=True)
def _max_exp_noise(log_u: float, ln_m: float) -> float:
    """Max of m i.i.d. Exp(1) from one uniform: -ln(1 - U^(1/m)), stable for huge m (spec 1.5)."""
    a = math.log(-log_u) - ln_m
    if a > -700.0:
        return -math.log(-math.expm1(-math.exp(a)))
    return -a


@numba.njit(cache=True)
def _best_exponential_class(xs: np.ndarray, k: int, h: int, c: float, gamma: float, lnfact: np.ndarray,
                            log_u: np.ndarray) -> tuple[float, int]:
    """max over t of U_{h,t} + maxExp(|C_{h,t}|), with its t; ``log_u[t-k-1]`` = ln of a uniform."""
    d = xs.shape[0]
    base = -c * (1.0 - gamma) * xs[h]
    r = k - h - 1
    best, best_t = -np.inf, -1
    for t in range(k + 1, d + 1):
        lnm = lnfact[t - h - 2] - lnfact[r] - lnfact[t - k - 1]
        v = base + c * gamma * xs[t - 1] + _max_exp_noise(log_u[t - k - 1], lnm)
        if v > best:
            best, best_t = v, t
    return best, best_t


# --------------------------------------------------------------------- mechanism


def class_log_sizes(d: int, k: int) -> dict[tuple[int, int], float]:
    """ln|C_{h,t}| for every class (h, t), t 1-based (small d; used by tests and diagnostics)."""
    from scipy.special import gammaln

    def lnbinom(n: int, r: int) -> float:
        return float(gammaln(n + 1) - gammaln(r + 1) - gammaln(n - r + 1))

    sizes = {(k - 1, k): 0.0}
    for h in range(k):
        for t in range(k + 1, d + 1):
            sizes[(h, t)] = lnbinom(t - h - 2, k - h - 1)
    return sizes


def _items_at_ranks(x: np.ndarray, xs: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Item indices at the given 0-based ranks of the descending order of x, ties by index.

    ``xs`` is x sorted descending. Equal values hold a contiguous run of ranks; within it the
    items are taken in index order. One scan of x for the needed values replaces a full argsort.
    """
    values = xs[ranks]
    first_rank = x.shape[0] - np.searchsorted(xs[::-1], values, side="right")  # rank of the first tie
    hits = np.flatnonzero(np.isin(x, np.unique(values)))  # ascending indices
    by_value = np.argsort(x[hits], kind="stable")  # equal values keep ascending index order
    hits, hit_values = hits[by_value], x[hits][by_value]
    return hits[np.searchsorted(hit_values, values, side="left") + (ranks - first_rank)]


class CanonicalTopK:
    """The canonical Lipschitz top-k mechanism (pure epsilon-DP).

    Parameters: ``k`` items out of the scores; ``epsilon``; ``sensitivity`` = Delta_inf of
    the scores; ``gamma`` in [0, 1] (seed 003 uses 1/2); ``monotone`` only for counts that
    every record moves in the same direction; ``noise`` "gumbel" (exact EM) or "exponential".
    """

    name = "canonical_topk"

    def __init__(
        self,
        k: int,
        epsilon: float,
        sensitivity: float = 1.0,
        gamma: float = 0.5,
        monotone: bool = False,
        noise: str = "gumbel",
        random_state: RandomState = None,
    ) -> None:
        self.k = check_count(k, "k")
        self.epsilon = check_epsilon(epsilon)
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        if not (isinstance(gamma, (int, float)) and 0.0 <= float(gamma) <= 1.0):
            raise ParameterError(f"gamma must lie in [0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        self.monotone = bool(monotone)
        if noise not in NOISES:
            raise ParameterError(f"noise must be one of {NOISES}, got {noise!r}")
        self.noise = noise
        self.delta = 0.0
        self._rng = check_random_state(random_state)

    @property
    def true_epsilon(self) -> float:
        return self.epsilon

    @property
    def c(self) -> float:
        return self.epsilon if self.monotone else self.epsilon / 2.0

    def select(self, scores: np.ndarray) -> np.ndarray:
        """The released k-set: feature indices in ascending order."""
        q = check_scores(scores)
        d, k = q.shape[0], self.k
        if k >= d:
            raise ParameterError(f"k must be < the number of scores d={d}, got k={k}")
        x = q / self.sensitivity
        xs = np.ascontiguousarray(np.sort(x)[::-1])  # values only: the order is needed for k ranks
        lnfact = gammaln(np.arange(1, d + 1, dtype=np.float64))  # lnfact[n] = ln(n!)
        h, t = self._draw_class(xs, k, lnfact)
        ranks = list(range(h))  # 0-based ranks j_1..j_h
        if (h, t) != (k - 1, k):
            middle = np.arange(h + 1, t - 1)  # 0-based ranks of j_{h+2}..j_{t-1}
            ranks += self._rng.choice(middle, size=k - h - 1, replace=False).tolist()
        ranks.append(t - 1)
        return np.sort(_items_at_ranks(x, xs, np.asarray(ranks, dtype=np.int64)))

    def _draw_class(self, xs: np.ndarray, k: int, lnfact: np.ndarray) -> tuple[int, int]:
        c, g = self.c, self.gamma
        top_value = c * (2.0 * g - 1.0) * xs[k - 1]  # class (k-1, k): x_[h+1] = x_[t] = x_[k], one member
        if self.noise == "gumbel":
            log_mass = _log_mass_per_h(xs, k, c, g, lnfact, min(k, numba.get_num_threads()))
            scores = np.append(log_mass, top_value) + self._rng.gumbel(size=k + 1)
            h = int(np.argmax(scores))
            if h == k:
                return k - 1, k
            return h, int(_draw_t(xs, k, h, c, g, lnfact, float(log_mass[h]), float(self._rng.random())))
        best, best_class = top_value + self._rng.exponential(), (k - 1, k)
        for h in range(k):
            log_u = np.log(self._rng.random(xs.shape[0] - k))
            v, t = _best_exponential_class(xs, k, h, c, g, lnfact, log_u)
            if v > best:
                best, best_class = v, (h, int(t))
        return best_class
