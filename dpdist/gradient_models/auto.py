"""The default learner: select-then-train when its screening can see the signal, else DP-SGD.

Neither learner is best everywhere (``benchmarks/results/utility/``): with many records per unit of
budget a private screening of 100 columns followed by DP-SGD on them is ahead of DP-SGD on every
column; with few, the screening's noise buries the signal and it picks columns at random. What tells
them apart is public: the standard deviation sigma of the Gaussian noise the screening adds to each
score |x_j^T y| (rows of unit norm, |y| <= 1, so a score is at most n), beside the public count n~ of
the records. This learner runs select-then-train when sigma <= ``screen_noise_limit`` n~ and DP-SGD on
every column otherwise, each at its own defaults. On data with no more columns than select-then-train's
k there is nothing to screen: its DP-SGD phase runs on every column, charged as select-then-train (the
screening's share unspent).

Privacy: the choice is a function of public values only (the released count n~, epsilon, delta and the
two learners' parameters): post-processing of what was already released, so the fit is exactly the
chosen learner's mechanism, charged as that learner charges it; the record names which one ran.

The limit 2.5e-4 (sigma at most 1/4,000 of n~) lies between the benchmark's cells where each learner
won (the dated results under ``benchmarks/results/utility/``); between them the rule is a guess, and
the two learners stay available by name.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from dpdist.gradient_models.base import (
    GradientClassifierMixin,
    GradientModel,
    GradientRegressorMixin,
    Progress,
    SteppedModel,
)
from dpdist.gradient_models.select_train import SelectTrainClassifier, SelectTrainRegressor
from dpdist.gradient_models.sgd import DPSGDClassifier, DPSGDRegressor
from dpdist.privacy.loss import Charge
from dpdist.solvers.dp_sgd import dp_sgd
from dpdist.utils.random import RandomState
from dpdist.utils.validation import AtLeast, check_count

__all__ = ["AutoClassifier", "AutoRegressor"]

SCREEN_NOISE_LIMIT = 2.5e-4


class _Auto(GradientModel):
    """Select-then-train or DP-SGD, chosen from public values (module docstring)."""

    mechanism = "auto"
    row_norm = "l2"  # both learners' default (cosine-normalised rows)
    _pair: tuple[type[SteppedModel], type[SteppedModel]]
    _parameter_constraints: ClassVar[dict[str, Any]] = {"screen_noise_limit": [AtLeast(0.0, finite=False)]}

    def _learners(self) -> tuple[SteppedModel, SteppedModel]:
        """(select-then-train, DP-SGD) at their defaults and this learner's budget, count and labels
        (kept while the parameters stay: their noise calibrations are cached on them)."""
        params = {k: v for k, v in self.get_params().items() if k != "screen_noise_limit"}
        key = repr(sorted(params.items()))
        cache = self.__dict__.setdefault("_learner_cache", {})
        if key not in cache:
            cache.clear()
            cache[key] = (self._pair[0](**params), self._pair[1](**params))
        return cache[key]

    def _check_params(self) -> None:
        for learner in self._learners():
            learner.check_params()

    def chosen(self, n_public: int) -> SteppedModel:
        """The learner a fit on ``n_public`` (public) records runs: select-then-train when its
        screening's noise sigma is at most ``screen_noise_limit`` n~, DP-SGD otherwise. A function of
        n~ and the parameters alone (not of the width: every charge of this fit -- the CLI's and the
        flow's, made before the columns are known, and the tuner's -- names the same learner)."""
        n_public = check_count(n_public, "n_public")
        sparse, dense = self._learners()
        sigma = 1.0 / math.sqrt(2.0 * sparse.privacy_charge(n_public).details["screening_rho"])
        return sparse if sigma <= float(self.screen_noise_limit) * n_public else dense

    def _steps(self, n_public: int) -> tuple[float, int, float]:
        return self.chosen(n_public)._steps(n_public)

    def _scaled_charge(self, n_public: int, noise_scale: float) -> Charge:
        inner = self.chosen(n_public)
        charge = inner.privacy_charge(n_public, noise_scale=noise_scale)
        return Charge(charge.loss, f"{self.mechanism}/{self._loss}", {**charge.details, "learner": inner.mechanism})

    def release_on(
        self, X: sp.csr_matrix, y: np.ndarray, n_public: int | None, charge: Charge, *args: Any
    ) -> dict[str, Any]:
        return {**super().release_on(X, y, n_public, charge, *args), "learner": charge.details["learner"]}

    def _train(
        self,
        X: sp.csr_matrix,
        y: np.ndarray,
        n_public: int,
        noise: dict[str, Any],
        rng: np.random.Generator,
        progress: Progress | None,
    ) -> tuple[np.ndarray, float]:
        inner = self.chosen(n_public)
        if inner.mechanism != noise["learner"]:  # the charge and the fit name the same learner (public values)
            raise RuntimeError(f"auto: charged {noise['learner']}, about to run {inner.mechanism}")
        sparse = self._learners()[0]
        if inner is sparse and X.shape[1] <= int(sparse.get_params()["k"]):
            # no more columns than k: nothing to screen. Its DP-SGD phase runs on every column; the
            # screening's share is charged and not spent (the charge's Renyi curve, the screening's
            # zCDP composed with this DP-SGD's, is above the curve of what runs).
            return dp_sgd(X, y, inner.sgd_plan(n_public, noise["noise_multiplier"]), rng, progress)
        return inner._train(X, y, n_public, noise, rng, progress)


_AUTO_DOC = """
    Parameters
    ----------
    epsilon, delta : the model's budget ((epsilon, delta)-DP; the count's release aside).
    screen_noise_limit : select-then-train runs when its screening's noise standard deviation is at
        most this fraction of the public count n~ (module docstring); 0: always DP-SGD.
    n_records, count_epsilon, random_state : as ``DPSGDClassifier``.
"""


class AutoClassifier(GradientClassifierMixin, _Auto):
    __doc__ = (
        "Private logistic regression by the default learner: SelectTrainClassifier or DPSGDClassifier,\n"
        "    chosen from public values.\n" + _AUTO_DOC + "    classes : the two labels, public (default: those in y).\n"
    )
    _pair = (SelectTrainClassifier, DPSGDClassifier)

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        screen_noise_limit: float = SCREEN_NOISE_LIMIT,
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        classes: Any = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.screen_noise_limit = screen_noise_limit
        self.n_records = n_records
        self.count_epsilon = count_epsilon
        self.classes = classes
        self.random_state = random_state


class AutoRegressor(GradientRegressorMixin, _Auto):
    __doc__ = (
        "Private least squares by the default learner: SelectTrainRegressor or DPSGDRegressor, chosen\n"
        "    from public values.\n" + _AUTO_DOC + "    y_bound : the public bound on |y|.\n"
    )
    _pair = (SelectTrainRegressor, DPSGDRegressor)

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        screen_noise_limit: float = SCREEN_NOISE_LIMIT,
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        y_bound: float = 1.0,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.screen_noise_limit = screen_noise_limit
        self.n_records = n_records
        self.count_epsilon = count_epsilon
        self.y_bound = y_bound
        self.random_state = random_state
