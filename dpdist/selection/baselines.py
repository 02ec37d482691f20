"""The private top-k baselines [SKDRR24] compared DP-SIS against (docs/algorithms.md §4.3).

Each has the interface of :class:`dpdist.selection.topk.CanonicalTopK`: ``select(scores)``
returns the k released indices in ascending order, and ``epsilon``/``delta``/``true_epsilon``
say what a release costs. Scores are non-monotone unless ``monotone=True`` (counts under
ADD/REMOVE only).

* :class:`PeelingTopK` -- k rounds of the exponential mechanism at epsilon/k each, drawn in
  one shot: top-k of x + Gumbel(scale 2 k Delta / epsilon) (k Delta / epsilon if monotone),
  which has the same distribution (Durfee & Rogers, Lemmas 4.1-4.2; docs/algorithms.md §1.3). Pure DP.
* :class:`LaplaceTopK` -- the oneshot Laplace mechanism of Qiao, Su & Zhang (2021): top-k of
  x + Lap(b), b = 8 Delta sqrt(k ln(d/delta)) / epsilon. The constant is the one recalled by
  docs/algorithms.md, which marks it unverified (docs/algorithms.md §4.3 [R/U]); it is a comparison baseline for the
  experiments and no command releases through it.
* :class:`JointTopK` -- the joint exponential mechanism of Gillenwater et al. (2022) over
  ordered k-sequences s with utility u(s) = -max_i (x_(i) - x_{s_i}), x_(i) the i-th largest
  score, P(s) ∝ exp(epsilon u(s) / (2 Delta_u)). One record moves x_(i) and x_{s_i} by Delta
  each, in opposite directions when the scores are non-monotone, so Delta_u = 2 Delta
  (Delta for monotone counts). Real-valued scores are used directly, without the
  discretisation the original needs for integer counts: ties between the k d differences
  are broken by a fixed, data-independent order, which makes every sequence's maximal pair
  unique. Exact sampling: pick the maximal pair (i, j) with probability
  count(i, j) exp(-epsilon D_ij / (2 Delta_u)), then a uniform sequence with that maximal
  pair. O(d k log(d k) + d k^2) time and O(d k) memory, fine for the microarray sets.
"""

from __future__ import annotations

import hashlib
import math

import numba
import numpy as np

from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import PrivacyLoss
from dpdist.privacy.mechanisms import _Mechanism
from dpdist.utils.random import RandomState
from dpdist.utils.validation import check_count, check_delta, check_positive, check_scores

__all__ = ["JointTopK", "LaplaceTopK", "PeelingTopK"]


class _TopKBase(_Mechanism):
    name = "topk"

    def __init__(
        self, k: int, epsilon: float, sensitivity: float = 1.0, monotone: bool = False, random_state: RandomState = None
    ) -> None:
        self.k = check_count(k, "k")
        super().__init__(epsilon, 0.0, random_state)  # epsilon, delta = 0 and the noise source
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.monotone = bool(monotone)

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """An exponential mechanism over k-sets/sequences: epsilon-bounded-range (epsilon^2/8-zCDP)."""
        return PrivacyLoss.bounded_range(self.epsilon)

    def _normalised(self, scores: np.ndarray) -> np.ndarray:
        q = check_scores(scores)
        if self.k >= q.shape[0]:
            raise ParameterError(f"k must be < the number of scores d={q.shape[0]}, got k={self.k}")
        return q / self.sensitivity

    def _top(self, noisy: np.ndarray) -> np.ndarray:
        return np.sort(np.argpartition(-noisy, self.k - 1)[: self.k])


class PeelingTopK(_TopKBase):
    """Peeling exponential mechanism (k rounds at epsilon/k), sampled in one shot with Gumbel noise."""

    name = "peeling_em"

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """k adaptive exponential mechanisms at epsilon/k each (Durfee & Rogers 2019, Lemmas 4.1-4.2)."""
        return PrivacyLoss.bounded_range(self.epsilon / self.k, self.k)

    def select(self, scores: np.ndarray) -> np.ndarray:
        x = self._normalised(scores)
        scale = (1.0 if self.monotone else 2.0) * self.k / self.epsilon
        return self._top(x + self._rng.gumbel(scale=scale, size=x.shape[0]))


class LaplaceTopK(_TopKBase):
    """Oneshot Laplace top-k (Qiao, Su & Zhang 2021); (epsilon, delta) with docs/algorithms.md's recalled constant."""

    name = "oneshot_laplace"

    def __init__(
        self, k: int, epsilon: float, delta: float, sensitivity: float = 1.0, random_state: RandomState = None
    ) -> None:
        super().__init__(k, epsilon, sensitivity, False, random_state)
        self.delta = check_delta(delta, allow_zero=False)

    @property
    def privacy_loss(self) -> PrivacyLoss:
        return PrivacyLoss.approx(self.epsilon, self.delta)

    def select(self, scores: np.ndarray) -> np.ndarray:
        x = self._normalised(scores)
        b = 8.0 * math.sqrt(self.k * math.log(x.shape[0] / self.delta)) / self.epsilon
        return self._top(x + self._rng.laplace(scale=b, size=x.shape[0]))


@numba.njit(cache=True)
def _joint_log_counts(rank: np.ndarray, order_i: np.ndarray, order_j: np.ndarray) -> np.ndarray:
    """ln of the number of k-sequences whose maximal pair is each pair, in sorted pair order.

    ``rank[i, j]`` is the position of pair (i, j) in the global order and ``order_i/j`` the
    pairs in that order. Sweeping it, ``seen[i]`` counts the pairs of row i below the current
    pair p = (i, j). For a sequence with s_i = j whose other pairs all lie below p, position
    i' may take any of the a_i' = seen[i'] - [(i', j) < p] items; the allowed sets are nested
    in i' (the order puts (i'+1, j') before (i', j') on ties), so choosing positions in
    increasing i' leaves a_i' - (number of earlier positions) choices each.
    """
    k = rank.shape[0]
    n = order_i.shape[0]
    seen = np.zeros(k, dtype=np.int64)
    out = np.empty(n)
    for p in range(n):
        i, j = order_i[p], order_j[p]
        total = 0.0
        used = 0
        for ip in range(k):
            if ip == i:
                continue
            a = seen[ip] - (1 if rank[ip, j] < p else 0) - used
            if a <= 0:
                total = -np.inf
                break
            total += math.log(a)
            used += 1
        out[p] = total
        seen[i] += 1
    return out


class JointTopK(_TopKBase):
    """Joint exponential mechanism over ordered k-sequences (Gillenwater et al. 2022). Pure DP."""

    name = "joint_em"
    _cache: tuple | None = None

    def select(self, scores: np.ndarray) -> np.ndarray:
        return np.sort(self.select_sequence(scores))

    def _prepare(self, x: np.ndarray) -> tuple:
        """The score-dependent, epsilon-free part: pair order and log counts (cached per score vector)."""
        key = hashlib.blake2b(x.tobytes(), digest_size=16).digest()
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        d, k = x.shape[0], self.k
        top = np.sort(x)[::-1][:k]
        diff = top[:, None] - x[None, :]  # D[i, j] = x_(i) - x_j
        ii, jj = np.meshgrid(np.arange(k), np.arange(d), indexing="ij")
        # total order: by D, then later positions first (keeps the allowed sets nested), then item
        order = np.lexsort((jj.ravel(), -ii.ravel(), diff.ravel()))
        rank = np.empty(k * d, dtype=np.int64)
        rank[order] = np.arange(k * d)
        rank = rank.reshape(k, d)
        order_i, order_j = (order // d).astype(np.int64), (order % d).astype(np.int64)
        prepared = (rank, order_i, order_j, _joint_log_counts(rank, order_i, order_j), diff.ravel()[order])
        self._cache = (key, prepared)
        return prepared

    def select_sequence(self, scores: np.ndarray) -> np.ndarray:
        """The released ordered sequence (position i estimates the item of rank i + 1)."""
        x = self._normalised(scores)
        k = self.k
        rank, order_i, order_j, log_count, sorted_diff = self._prepare(x)
        c = self.epsilon / (2.0 * (1.0 if self.monotone else 2.0))
        logw = log_count - c * sorted_diff
        p = int(np.argmax(logw + self._rng.gumbel(size=logw.shape[0])))
        i, j = int(order_i[p]), int(order_j[p])
        seq = np.empty(k, dtype=np.int64)
        seq[i] = j
        taken = [j]
        for ip in range(k):
            if ip == i:
                continue
            allowed = np.flatnonzero(rank[ip] < p)
            allowed = allowed[~np.isin(allowed, taken)]
            pick = int(self._rng.choice(allowed))
            seq[ip] = pick
            taken.append(pick)
        return seq
