"""Private top-k by the Gaussian mechanism on the whole score vector, for l2-bounded records.

Scores q = |X^T y| of records with ||x_i||_2 <= 1 and |y_i| <= 1. Adding or removing one record
changes the vector X^T y by y_i x_i, of l2 norm at most 1, and taking absolute values entry by
entry does not increase it (||a| - |b|| <= |a - b| per entry): the score vector's l2 sensitivity
is 1 under ADD/REMOVE. The mechanism releases the indices of the k largest entries of
q + N(0, sigma^2 I_d): the Gaussian mechanism (rho = 1 / (2 sigma^2)-zCDP, Bun & Steinke 2016,
Prop. 1.6) followed by a selection that looks only at its output (post-processing). sigma is the
smallest meeting (epsilon, delta) by the zCDP conversion (``PrivacyLoss.zcdp``).

Why not a top-k exponential mechanism here (the canonical, peeling ones of ``topk`` /
``baselines``): they are built for l_inf-bounded records, whose scores each move by 1, and pay for
each of the k choices. On unit-l2 rows all d scores together move by at most 1 in l2, which the
Gaussian mechanism uses whole: its noise does not grow with k. At the same rho, peeling's k
exponential-mechanism choices each have Gumbel noise of scale sqrt(k / (2 rho)), sqrt(k) times
sigma = sqrt(1 / (2 rho)) (and a Gumbel maximum over d scores lies ~ln d scales high, a Gaussian
one ~sqrt(2 ln d) sigmas).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import PrivacyLoss, calibrate
from dpdist.utils.validation import check_count, check_delta, check_epsilon, check_positive

__all__ = ["GaussianTopK", "zcdp_for"]


@functools.lru_cache(maxsize=256)
def zcdp_for(epsilon: float, delta: float) -> float:
    """The largest rho whose zCDP conversion at ``delta`` meets ``epsilon`` (public; cached)."""
    return calibrate(lambda rho: PrivacyLoss.zcdp(rho, delta), epsilon, delta, 1e6, tol=1e-9)


class GaussianTopK:
    """The k largest of ``scores + N(0, sigma^2)``: rho-zCDP for scores of l2 sensitivity
    ``sensitivity`` (sigma = sensitivity / sqrt(2 rho)); ``for_budget`` calibrates rho."""

    name = "gaussian_topk"

    def __init__(self, k: int, rho: float, delta: float, sensitivity: float = 1.0) -> None:
        self.k = check_count(k, "k")
        self.rho = check_positive(rho, "rho")
        self.delta = check_delta(delta, allow_zero=False)  # the delta its standalone epsilon is stated at
        self.sensitivity = check_positive(sensitivity, "sensitivity")

    @classmethod
    def for_budget(cls, k: int, epsilon: float, delta: float, sensitivity: float = 1.0) -> GaussianTopK:
        """The mechanism with the largest rho whose zCDP conversion meets (epsilon, delta)."""
        return cls(k, zcdp_for(check_epsilon(epsilon), check_delta(delta, allow_zero=False)), delta, sensitivity)

    @property
    def sigma(self) -> float:
        """The noise's standard deviation: sensitivity / sqrt(2 rho)."""
        return self.sensitivity / math.sqrt(2.0 * self.rho)

    @property
    def privacy_loss(self) -> PrivacyLoss:
        return PrivacyLoss.zcdp(self.rho, self.delta)

    def select(self, scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The indices (ascending) of the k largest noisy scores."""
        scores = np.asarray(scores, dtype=np.float64)
        if self.k >= scores.size:
            raise ParameterError(f"k={self.k} must be smaller than the number of scores ({scores.size})")
        noisy = scores + rng.standard_normal(scores.size) * self.sigma
        return np.sort(np.argpartition(-noisy, self.k - 1)[: self.k])
