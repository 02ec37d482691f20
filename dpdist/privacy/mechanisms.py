"""Differential-privacy mechanisms used by the papers dpdist implements.

Calibrations follow docs/algorithms.md §1, including its corrections of the papers (§9):

* ``Laplace``: value + Lap(Delta_1 / epsilon)                                  (docs/algorithms.md §1.1)
* ``Gaussian``: the classic calibration sigma = Delta_2 sqrt(2 ln(1.25/delta)) / epsilon,
  valid only for epsilon < 1 ([KLR23]/[KLR25]; [KLR25] App. B misprints the
  parenthesis)                                                                (docs/algorithms.md §1.2)
* ``AnalyticGaussian``: the exact calibration of Balle & Wang (2018), for any epsilon
* ``ExponentialMechanism``: P(o) proportional to exp(epsilon u(o) / (2 Delta_u)), or
  exp(epsilon u / Delta_u) for monotone utilities; sampled by Gumbel-max in log space
  so weights spanning hundreds of orders of magnitude are exact        (docs/algorithms.md §1.3, 1.5)
* ``ReportNoisyMax`` / ``ReportNoisyMin``: argmax of score + Lap(b) with
  b = 2 Delta/epsilon for scores one record can move in both directions and
  b = Delta/epsilon only for monotone scores                                  (docs/algorithms.md §1.3)

Only the selected index leaves a selection mechanism: the noisy winning value is not
protected by report-noisy-max and is never returned (docs/algorithms.md §1.3, 9.5). A selection mechanism
built with ``size=k`` returns k independent selections from each ``select`` call and its
``privacy_loss`` is the composition of k selections; ``select`` draws exactly what
``privacy_loss`` charges, never more.

Every mechanism carries ``epsilon`` and ``delta`` (what it was asked for),
``true_epsilon`` (what it guarantees; different only in the papers' ``"paper"``
calibration), ``name`` and ``privacy_loss``: its loss in the strongest form it has
(:mod:`dpdist.privacy.loss`), which is what the accountant charges. The exponential mechanism
is epsilon-bounded-range (epsilon^2/8-zCDP), Gaussian noise is Delta^2/(2 sigma^2)-zCDP, Laplace
noise has its exact Renyi curve, and report-noisy-max is pure true_epsilon-DP.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
from scipy.special import log_ndtr, ndtr

from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import PrivacyLoss
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_delta, check_epsilon, check_positive, check_scores

__all__ = [
    "AnalyticGaussian",
    "analytic_gaussian_delta",
    "ExponentialMechanism",
    "Gaussian",
    "Laplace",
    "ReportNoisyMax",
    "ReportNoisyMin",
    "TopKMechanism",
    "gumbel_max",
]

CALIBRATIONS = ("safe", "paper")


class _Mechanism:
    """Common fields: the privacy parameters and the random generator."""

    name: ClassVar[str] = "mechanism"

    def __init__(self, epsilon: float, delta: float, random_state: RandomState) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = delta
        self._rng = check_random_state(random_state)

    @property
    def true_epsilon(self) -> float:
        """The epsilon this mechanism actually guarantees (what the accountant charges)."""
        return self.epsilon

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """The loss the accountant charges (pure true_epsilon-DP unless a subclass knows better)."""
        return PrivacyLoss.pure(self.true_epsilon)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon!r}, delta={self.delta!r})"


# --------------------------------------------------------------------------- additive


class _Additive(_Mechanism, ABC):
    """``value + noise``; subclasses name the noise (``noise_name``) and draw it (``_noise``)."""

    noise_name: ClassVar[str]

    @abstractmethod
    def _noise(self, shape: tuple[int, ...]) -> np.ndarray:
        """Noise of the given shape from this mechanism's generator."""

    def randomise(self, value: float | np.ndarray) -> float | np.ndarray:
        arr = np.asarray(value, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise ParameterError(f"value passed to the {self.noise_name} mechanism must be finite")
        noisy = arr + self._noise(arr.shape)
        return float(noisy) if noisy.ndim == 0 else noisy


class Laplace(_Additive):
    """The Laplace mechanism: ``value + Lap(sensitivity / epsilon)`` (pure epsilon-DP).

    ``sensitivity`` is the l1-sensitivity of the whole released vector.
    """

    name = "laplace"
    noise_name = "Laplace"

    def __init__(self, epsilon: float, sensitivity: float = 1.0, random_state: RandomState = None) -> None:
        super().__init__(epsilon, 0.0, random_state)
        self.sensitivity = check_positive(sensitivity, "sensitivity")

    @property
    def scale(self) -> float:
        return self.sensitivity / self.epsilon

    @property
    def privacy_loss(self) -> PrivacyLoss:
        return PrivacyLoss.laplace(self.epsilon)

    def _noise(self, shape: tuple[int, ...]) -> np.ndarray:
        return self._rng.laplace(0.0, self.scale, size=shape)


class _GaussianBase(_Additive):
    """``value + N(0, sigma^2)``, sigma calibrated by the subclass (``_calibrated_sigma``). ``sensitivity`` is l2."""

    noise_name = "Gaussian"

    def __init__(
        self,
        epsilon: float,
        delta: float,
        sensitivity: float = 1.0,
        random_state: RandomState = None,
    ) -> None:
        super().__init__(epsilon, check_delta(delta, allow_zero=False), random_state)
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.sigma = self._calibrated_sigma()

    @abstractmethod
    def _calibrated_sigma(self) -> float:
        """The noise's standard deviation for (epsilon, delta) and the sensitivity (or a refusal)."""

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """rho = Delta^2 / (2 sigma^2)-zCDP; standalone (epsilon, delta) as calibrated."""
        rho = self.sensitivity**2 / (2.0 * self.sigma**2)
        return PrivacyLoss((("zcdp", rho),), self.epsilon, self.delta)

    def _noise(self, shape: tuple[int, ...]) -> np.ndarray:
        return self._rng.normal(0.0, self.sigma, size=shape)


class Gaussian(_GaussianBase):
    """The classic Gaussian mechanism (Dwork & Roth Thm A.1), as [KLR23]/[KLR25] use it.

    sigma = sensitivity * sqrt(2 ln(1.25/delta)) / epsilon gives (epsilon, delta)-DP for
    epsilon < 1 only; larger epsilon is refused (use ``AnalyticGaussian``).
    """

    name = "gaussian"

    def _calibrated_sigma(self) -> float:
        if self.epsilon >= 1.0:
            raise ParameterError(
                f"the classic Gaussian calibration is only valid for epsilon < 1, got epsilon={self.epsilon!r}; "
                "use AnalyticGaussian for larger epsilon"
            )
        return self.sensitivity * math.sqrt(2.0 * math.log(1.25 / self.delta)) / self.epsilon


class AnalyticGaussian(_GaussianBase):
    """The analytic Gaussian mechanism (Balle & Wang 2018, Thm 8): the smallest sigma with

        Phi(D/(2s) - e s/D) - e^e Phi(-D/(2s) - e s/D) <= delta,

    found by bisection; valid for every epsilon > 0.
    """

    name = "analytic_gaussian"

    def _calibrated_sigma(self) -> float:
        return _analytic_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)


def analytic_gaussian_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """The exact delta of N(0, sigma^2) noise at ``epsilon`` for l2-sensitivity ``sensitivity``."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return float(ndtr(a - b) - math.exp(epsilon + log_ndtr(-a - b)))


def _analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    lo, hi = sensitivity * 1e-6, sensitivity
    while analytic_gaussian_delta(epsilon, hi, sensitivity) > delta:
        lo, hi = hi, hi * 2.0
    while analytic_gaussian_delta(epsilon, lo, sensitivity) <= delta:
        lo /= 2.0
    for _ in range(200):  # bisection on a monotone function; hi always satisfies the bound
        mid = 0.5 * (lo + hi)
        if analytic_gaussian_delta(epsilon, mid, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-14 * hi:
            break
    return hi


# -------------------------------------------------------------------------- selection


def gumbel_max(log_weights: np.ndarray, rng: np.random.Generator, size: int | None = None) -> int | np.ndarray:
    """Sample index i with probability exp(log_weights[i]) / sum_j exp(log_weights[j]).

    Gumbel-max: argmax_i (log_weights[i] + G_i) with G_i standard Gumbel. Works entirely
    in log space, so weights whose ratio exceeds the float range are sampled exactly.
    ``size`` draws that many independent samples at once.
    """
    if size is None:
        return int(np.argmax(log_weights + rng.gumbel(size=log_weights.shape[0])))
    g = rng.gumbel(size=(size, log_weights.shape[0]))
    g += log_weights
    return np.asarray(np.argmax(g, axis=1))


class _Selection(_Mechanism):
    """A selection over scores; ``size`` (None: one selection, returned as an int; k >= 1: k
    independent selections, returned as an array) is fixed at construction, so the loss charged
    before ``select`` runs covers every draw ``select`` makes."""

    def __init__(
        self,
        epsilon: float,
        sensitivity: float = 1.0,
        monotone: bool = False,
        random_state: RandomState = None,
        *,
        size: int | None = None,
    ) -> None:
        super().__init__(epsilon, 0.0, random_state)
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.monotone = bool(monotone)
        self.size = None if size is None else check_count(size, "size")

    @property
    def count(self) -> int:
        """How many independent selections one ``select`` call draws (and ``privacy_loss`` charges)."""
        return 1 if self.size is None else self.size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon!r}, size={self.size!r})"


class ExponentialMechanism(_Selection):
    """The exponential mechanism over an array of scores (higher is better).

    P(i) proportional to exp(epsilon * score_i / (2 * sensitivity)); with ``monotone=True``
    (every score moves in the same direction between neighbours) exp(epsilon * score_i /
    sensitivity). Sampled by Gumbel-max on the log-weights: exact for weights that span
    hundreds of orders of magnitude.

    ``size=k`` makes each ``select`` call draw k independent selections; ``privacy_loss`` is
    then that of k epsilon-bounded-range mechanisms (composition of k).
    """

    name = "exponential"

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """k = ``count`` independent epsilon-bounded-range selections: k epsilon^2/8-zCDP, and
        (k epsilon, 0)-DP standalone. Proof: [docs/proofs/mechanisms.md][proof-exponential-mechanism].
        """
        return PrivacyLoss.bounded_range(self.epsilon, count=self.count)

    @property
    def multiplier(self) -> float:
        """The factor c of the log-weights c * score."""
        return self.epsilon / (self.sensitivity if self.monotone else 2.0 * self.sensitivity)

    def select(self, scores: np.ndarray) -> int | np.ndarray:
        """Index of the selected item (or the ``size`` independent selections the loss charges)."""
        s = check_scores(scores)
        return gumbel_max(self.multiplier * s, self._rng, self.size)


class ReportNoisyMax(_Selection):
    """Report-noisy-max with Laplace noise: argmax_i (score_i + Lap(b)); only i is released.

    ``calibration="safe"`` (default): b = 2 * sensitivity / epsilon, which is epsilon-DP
    for scores that one record can move in different directions (a rival up by Delta and
    the winner down by Delta is a 2 Delta shift); b = sensitivity / epsilon when
    ``monotone=True``.

    ``calibration="paper"``: b = sensitivity / epsilon on non-monotone scores, as Talwar et
    al.'s DP-FW, RNM-Screen and [RKL23] Alg. 1 do. That is only 2 * epsilon-DP;
    ``true_epsilon`` reports it and the accountant charges it (docs/algorithms.md §9.4).

    ``size=k`` makes each ``select`` call draw k independent selections; ``privacy_loss`` is
    then that of k pure ``true_epsilon``-DP selections (composition of k).
    """

    name = "report_noisy_max"

    def __init__(
        self,
        epsilon: float,
        sensitivity: float = 1.0,
        monotone: bool = False,
        calibration: str = "safe",
        random_state: RandomState = None,
        *,
        size: int | None = None,
    ) -> None:
        super().__init__(epsilon, sensitivity, monotone, random_state, size=size)
        if calibration not in CALIBRATIONS:
            raise ParameterError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
        self.calibration = calibration

    @property
    def scale(self) -> float:
        if self.monotone or self.calibration == "paper":
            return self.sensitivity / self.epsilon
        return 2.0 * self.sensitivity / self.epsilon

    @property
    def true_epsilon(self) -> float:
        # scale b protects a 2*Delta shift at level 2*Delta/b
        return self.sensitivity / self.scale if self.monotone else 2.0 * self.sensitivity / self.scale

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """k = ``count`` independent selections, each pure ``true_epsilon``-DP: k true_epsilon^2/2-zCDP,
        and (k true_epsilon, 0)-DP standalone (for k = 1, ``PrivacyLoss.pure(true_epsilon)``). Proof:
        [docs/proofs/mechanisms.md][proof-report-noisy-max].
        """
        return PrivacyLoss.pure_steps(self.true_epsilon, count=self.count)

    def _oriented(self, scores: np.ndarray) -> np.ndarray:
        return scores

    def select(self, scores: np.ndarray) -> int | np.ndarray:
        """Index of the noisy maximum (or the ``size`` independent selections the loss charges)."""
        s = self._oriented(check_scores(scores))
        size = self.size
        if size is None:
            return int(np.argmax(s + self._rng.laplace(0.0, self.scale, size=s.shape[0])))
        noisy = self._rng.laplace(0.0, self.scale, size=(size, s.shape[0]))
        noisy += s
        return np.asarray(np.argmax(noisy, axis=1))


class ReportNoisyMin(ReportNoisyMax):
    """Report-noisy-min: report-noisy-max on the negated scores (same calibration)."""

    name = "report_noisy_min"

    def _oriented(self, scores: np.ndarray) -> np.ndarray:
        return -scores


# --------------------------------------------------------------------------- top-k


class TopKMechanism(_Mechanism):
    """The common part of the top-k mechanisms of :mod:`dpdist.selection` (one set of k of the d
    scored items per ``select``): ``k``, the Delta_inf ``sensitivity`` of the scores, ``monotone``
    (counts every record moves in the same direction) and pure DP (``delta`` = 0). The loss is that
    of one exponential mechanism over k-sets or sequences, epsilon-bounded-range (epsilon^2/8-zCDP),
    unless a subclass says otherwise.
    """

    name = "topk"

    def __init__(
        self, k: int, epsilon: float, sensitivity: float = 1.0, monotone: bool = False, random_state: RandomState = None
    ) -> None:
        self.k = check_count(k, "k")
        super().__init__(epsilon, 0.0, random_state)
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.monotone = bool(monotone)

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """An exponential mechanism over k-sets/sequences: epsilon-bounded-range (epsilon^2/8-zCDP)."""
        return PrivacyLoss.bounded_range(self.epsilon)

    def _normalised(self, scores: np.ndarray) -> np.ndarray:
        """The checked scores over ``sensitivity``; k must be below their number d."""
        q = check_scores(scores)
        if self.k >= q.shape[0]:
            raise ParameterError(f"k must be < the number of scores d={q.shape[0]}, got k={self.k}")
        return q / self.sensitivity
