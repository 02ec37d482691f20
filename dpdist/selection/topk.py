"""Private top-k selection: the canonical Lipschitz mechanism ([SL22]; [SKDRR24] App. A, Alg. 2).

docs/algorithms.md §4.2 restates it and corrects the paper's class sizes.

Given scores q (sensitivity Delta_inf, one record may move scores in both directions),
normalise x = q / Delta and sort descending, x_[1] >= ... >= x_[d] with item ranks
j_1..j_d (ties broken by index). The loss of a k-set y,

    LOSS_gamma(y | x) = (1 - gamma) max(max_{i not in y} x_i, min_{i in y} x_i) - gamma min_{i in y} x_i,

has sensitivity 1, and the mechanism releases y with probability proportional to
exp(-c LOSS(y)), c = epsilon / 2 (non-monotone scores, required for DP-SIS) or epsilon
(monotone counts). The C(d, k) sets fall into k(d - k) + 1 utility classes (h, t): the top h
ranks, ``k - h - 1`` ranks from j_{h+2}..j_{t-1}, and j_t, of size C(t - h - 2, k - h - 1)
([SKDRR24]'s C(t - h - 1, k - h - 1) double-counts), with utility
U_{h,t} = c (gamma x_[t] - (1 - gamma) x_[h+1]); the true top-k is the class (k - 1, k).

Two noise distributions (``noise=``):

* ``"gumbel"`` (default): exactly the exponential mechanism above. The class is drawn from
  log-weights U_{h,t} + ln|C_{h,t}| in two exact stages: h by Gumbel-max over the per-h
  log-sum-exp over t (computed in O(d k) with no random numbers), then t given h by inverse
  CDF. This is what makes d = 2e7, k = 100 feasible.
* ``"exponential"``: the original mechanism's choice, each set's utility plus Exp(1) noise
  (report-noisy-max with exponential noise, also epsilon-DP). The class noise is the max of
  |C_{h,t}| exponentials, X = -ln(1 - U^{1/m}), evaluated stably in log space (docs/algorithms.md §1.5);
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
from dpdist.privacy.loss import PrivacyLoss
from dpdist.privacy.mechanisms import _Mechanism
from dpdist.utils.random import RandomState
from dpdist.utils.validation import check_count, check_positive, check_scores

__all__ = ["NOISES", "CanonicalTopK"]

NOISES = ("gumbel", "exponential")


# ----------------------------------------------------------------------- kernels


_T_BLOCK = 2048  # ranks t per block of the log-mass kernel
_SPREAD = 600.0  # max log-range of the terms inside a block for the product path (e^-600 >> 1e-308)


@numba.njit(cache=True)
def _block_log_mass_exact(xs: np.ndarray, k: int, cg: float, t0: int, t1: int, out: np.ndarray) -> None:
    """out[r] = log sum_{t0 <= t < t1} exp(cg x_[t] + ln P_r(t)), every term in log space.

    P_r(t) = (t-k)(t-k+1)...(t-k+r-1) = (t-h-2)!/(t-k-1)! with r = k-h-1 (t 1-based).
    Used for blocks whose terms span too many orders of magnitude for the product path.
    """
    mx = np.full(k, -np.inf)
    sm = np.zeros(k)
    for t in range(t0, t1):
        v = cg * xs[t - 1]
        for r in range(k):
            if v > mx[r]:
                sm[r] = sm[r] * math.exp(mx[r] - v) + 1.0
                mx[r] = v
            else:
                sm[r] += math.exp(v - mx[r])
            v += math.log(t - k + r)
    for r in range(k):
        out[r] = mx[r] + math.log(sm[r])


@numba.njit(cache=True, parallel=True)
def _log_mass_per_r(xs: np.ndarray, k: int, cg: float, block: int) -> np.ndarray:
    """L[r] = log sum_{t=k+1..d} exp(cg x_[t]) P_r(t) for r = 0..k-1, in O(d k) flops.

    Within a block [t0, t1) of ranks, with te = t1 - 1, each term is
    exp(cg x_[t0]) P_r(te) * E_t * Q_r(t), where E_t = exp(cg (x_[t] - x_[t0])) <= 1 needs one
    exp per t for all r, and Q_r(t) = P_r(t)/P_r(te) <= 1 follows the recurrence
    Q_{r+1}(t) = Q_r(t) (t-k+r)/(te-k+r): k multiply-adds per t instead of k exps. When the
    block's terms could span more than e^600 (steep scores or the first ranks), the block
    is summed in log space instead, so no term underflows in either path.
    """
    d = xs.shape[0]
    n_blocks = (d - k + block - 1) // block
    part = np.empty((n_blocks, k))
    for b in numba.prange(n_blocks):
        t0 = k + 1 + b * block
        t1 = min(t0 + block, d + 1)
        te = t1 - 1
        spread = cg * (xs[t0 - 1] - xs[te - 1])
        if k > 1:
            spread += (math.lgamma(te - 1.0) - math.lgamma(te - k + 0.0)) - (
                math.lgamma(t0 - 1.0) - math.lgamma(t0 - k + 0.0)
            )
        row = part[b]
        if spread >= _SPREAD:
            _block_log_mass_exact(xs, k, cg, t0, t1, row)
            continue
        m = t1 - t0
        e = np.empty(m)
        q = np.ones(m)
        for i in range(m):
            e[i] = math.exp(cg * (xs[t0 - 1 + i] - xs[t0 - 1]))
        base = cg * xs[t0 - 1]
        log_pe = 0.0  # ln P_r(te)
        for r in range(k):
            acc = 0.0
            for i in range(m):
                acc += e[i] * q[i]
            row[r] = base + log_pe + math.log(acc)
            inv = 1.0 / (te - k + r)
            for i in range(m):
                q[i] *= (t0 + i - k + r) * inv
            log_pe += math.log(te - k + r)
    out = np.empty(k)
    for r in range(k):
        mx = -np.inf
        for b in range(n_blocks):
            mx = max(mx, part[b, r])
        s = 0.0
        for b in range(n_blocks):
            s += math.exp(part[b, r] - mx)
        out[r] = mx + math.log(s)
    return out


@numba.njit(cache=True)
def _draw_t(xs: np.ndarray, k: int, h: int, c: float, gamma: float, log_mass: float, u: float) -> int:
    """t (1-based) with probability exp(U_{h,t} + ln|C_{h,t}| - log_mass), by inverse CDF of u.

    ln P_r(t) advances by ln(t-k+r) - ln(t-k) per rank and is reset exactly (lgamma) every
    block, so rounding cannot drift over millions of ranks.
    """
    d = xs.shape[0]
    r = k - h - 1
    shift = -c * (1.0 - gamma) * xs[h] - math.lgamma(r + 1.0) - log_mass
    acc = 0.0
    log_p = 0.0
    for t in range(k + 1, d + 1):
        if (t - k - 1) % _T_BLOCK == 0:
            log_p = math.lgamma(t - h - 1.0) - math.lgamma(t - k + 0.0)  # ln (t-h-2)!/(t-k-1)!
        acc += math.exp(shift + c * gamma * xs[t - 1] + log_p)
        if acc >= u:
            return t
        log_p += math.log(t - k + r) - math.log(t - k)
    return d  # u beyond the rounded total mass: the last class


@numba.njit(cache=True)
def _max_exp_noise(log_u: float, ln_m: float) -> float:
    """Max of m i.i.d. Exp(1) from one uniform: -ln(1 - U^(1/m)), stable for huge m (docs/algorithms.md §1.5)."""
    a = math.log(-log_u) - ln_m
    if a > -700.0:
        return -math.log(-math.expm1(-math.exp(a)))
    return -a


@numba.njit(cache=True)
def _best_exponential_class(
    xs: np.ndarray, k: int, h: int, c: float, gamma: float, lnfact: np.ndarray, log_u: np.ndarray
) -> tuple[float, int]:
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


def log_mass_per_h(xs: np.ndarray, k: int, c: float, gamma: float, block: int = _T_BLOCK) -> np.ndarray:
    """log of the total weight sum_t exp(U_{h,t}) |C_{h,t}| of the classes with h, for h = 0..k-1.

    ``xs`` holds the normalised scores sorted descending. The classes (h, t) have
    U_{h,t} = c (gamma x_[t] - (1 - gamma) x_[h+1]) and |C_{h,t}| = P_r(t)/r! with r = k-h-1.
    """
    per_r = _log_mass_per_r(xs, k, c * gamma, block)
    h = np.arange(k)
    r = k - h - 1
    return -c * (1.0 - gamma) * xs[h] - gammaln(r + 1.0) + per_r[r]


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


class CanonicalTopK(_Mechanism):
    """The canonical Lipschitz top-k mechanism (pure epsilon-DP).

    Parameters: ``k`` items out of the scores; ``epsilon``; ``sensitivity`` = Delta_inf of
    the scores; ``gamma`` in [0, 1] ([SKDRR24] uses 1/2); ``monotone`` only for counts that
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
        super().__init__(epsilon, 0.0, random_state)  # epsilon, delta = 0 and the noise source
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        if not (isinstance(gamma, (int, float)) and 0.0 <= float(gamma) <= 1.0):
            raise ParameterError(f"gamma must lie in [0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        self.monotone = bool(monotone)
        if noise not in NOISES:
            raise ParameterError(f"noise must be one of {NOISES}, got {noise!r}")
        self.noise = noise

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """ "gumbel" is an exponential mechanism: epsilon-bounded-range (epsilon^2/8-zCDP); the
        exponential-noise variant is report-noisy-max: pure epsilon-DP."""
        return PrivacyLoss.bounded_range(self.epsilon) if self.noise == "gumbel" else PrivacyLoss.pure(self.epsilon)

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
        h, t = self._draw_class(xs, k)
        ranks = list(range(h))  # 0-based ranks j_1..j_h
        if (h, t) != (k - 1, k):
            middle = np.arange(h + 1, t - 1)  # 0-based ranks of j_{h+2}..j_{t-1}
            ranks += self._rng.choice(middle, size=k - h - 1, replace=False).tolist()
        ranks.append(t - 1)
        return np.sort(_items_at_ranks(x, xs, np.asarray(ranks, dtype=np.int64)))

    def _draw_class(self, xs: np.ndarray, k: int) -> tuple[int, int]:
        c, g = self.c, self.gamma
        top_value = c * (2.0 * g - 1.0) * xs[k - 1]  # class (k-1, k): x_[h+1] = x_[t] = x_[k], one member
        if self.noise == "gumbel":
            log_mass = log_mass_per_h(xs, k, c, g)
            scores = np.append(log_mass, top_value) + self._rng.gumbel(size=k + 1)
            h = int(np.argmax(scores))
            if h == k:
                return k - 1, k
            return h, int(_draw_t(xs, k, h, c, g, float(log_mass[h]), float(self._rng.random())))
        lnfact = gammaln(np.arange(1, xs.shape[0] + 1, dtype=np.float64))  # lnfact[n] = ln(n!)
        best, best_class = top_value + self._rng.exponential(), (k - 1, k)
        for h in range(k):
            log_u = np.log(self._rng.random(xs.shape[0] - k))
            v, t = _best_exponential_class(xs, k, h, c, g, lnfact, log_u)
            if v > best:
                best, best_class = v, (h, int(t))
        return best_class
