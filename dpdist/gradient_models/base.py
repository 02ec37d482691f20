"""What the gradient learners share (``GradientModel``): the per-record preprocessing (``row_norm``),
the public count of the records, the release of the learner's mechanism and prediction, as the package
docstring (:mod:`dpdist.gradient_models`) states them; the parameter groups of the noisy steps
(``StepParams``, ``EpochSchedule``); and the two target mixins (two public classes, or clipped real
targets).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import is_classifier
from sklearn.preprocessing import normalize
from sklearn.utils.validation import check_is_fitted, validate_data

from dpdist.base import (
    PARAMETERS,
    CountParams,
    PrivacyParams,
    PrivateClassifierMixin,
    PrivateLearner,
    PrivateRegressorMixin,
    ReleaseRun,
    noisy_count,
)
from dpdist.data.record_maps import map_rows
from dpdist.data.transforms import Matrix
from dpdist.evaluation import sparse_coef
from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import Charge, PrivacyLoss, calibrate
from dpdist.released import model_result
from dpdist.solvers.dp_sgd import SGDPlan
from dpdist.utils.validation import AtLeast, Boolean, Count, Delta, Epsilon, Options, Positive, check_positive

__all__ = [
    "EpochSchedule",
    "GradientClassifierMixin",
    "GradientModel",
    "GradientRegressorMixin",
    "ROW_NORMS",
    "StepParams",
    "SteppedModel",
    "noisy_count",
]


ROW_NORMS = ("l2", "max", None)


def _calibrated_noise(make: Callable[[float], PrivacyLoss], epsilon: float, delta: float) -> float:
    """The smallest noise multiplier z (to a relative 1e-6) whose loss ``make(z)`` meets (epsilon,
    delta) (``calibrate`` on 1/z, which the loss grows with)."""
    return 1.0 / calibrate(lambda inv: make(1.0 / inv), epsilon, delta, 1e3, tol=1e-6)


class GradientModel(PrivateLearner, PrivacyParams, CountParams):
    """What the gradient learners share: preprocessing, the public count, the release, prediction."""

    _loss = "logistic"
    mechanism = "dp-sgd"
    counted = True
    row_norm: str | None
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "epsilon": [Epsilon()],
        "delta": [Delta(zero=False)],
        "n_records": [None, Count()],
        "count_epsilon": [Epsilon()],
        "random_state": "no_validation",  # check_random_state, when the fit draws
    }

    # ------------------------------------------------------------------ parameters

    @abstractmethod
    def _steps(self, n_public: int) -> tuple[float, int, float]:
        """(sampling rate q, steps T, normaliser B) of the training phase for a public count."""

    def _training_loss(self, z: float, n_public: int) -> PrivacyLoss:
        q, steps, _ = self._steps(n_public)
        return PrivacyLoss.subsampled_gaussian(z, q, steps, self._training_budget()[1])

    def _training_budget(self) -> tuple[float, float]:
        """The (epsilon, delta) the training's noise is calibrated to."""
        return float(self.epsilon), float(self.delta)

    def _base_noise(self, n_public: int) -> float:
        """The training's noise multiplier calibrated to its budget for a public count (cached: a
        function of public parameters only)."""
        cache = self.__dict__.setdefault("_noise_cache", {})
        key = (n_public, repr(sorted(self.get_params().items())))
        if key not in cache:
            cache[key] = _calibrated_noise(lambda z: self._training_loss(z, n_public), *self._training_budget())
        return cache[key]

    def _charge(self, n_public: int | None, n_features: int | None, noise_scale: float = 1.0) -> Charge:
        """What a fit charges for a public count of its records (the count's own release aside).

        ``noise_scale`` >= 1 (``privacy_charge(..., noise_scale=s)``) multiplies every noise scale of the
        calibration to (epsilon, delta): the private search (``dpdist.tuning``) runs candidates so, to pay
        for choosing among them.
        """
        assert n_public is not None  # a counted estimator's (the planned count until it is released)
        return self._scaled_charge(n_public, check_positive(noise_scale, "noise_scale"))

    def _scaled_charge(self, n_public: int, noise_scale: float) -> Charge:
        z = self._base_noise(n_public) * noise_scale
        return Charge(self._training_loss(z, n_public), f"{self.mechanism}/{self._loss}", {"noise_multiplier": z})

    def release_params(self, n_features: int | None = None, n_public: int | None = None) -> dict[str, Any]:
        """Every parameter of a fit, for the ledger's release identity."""
        return {**super().release_params(n_features, n_public), "loss": self._loss}

    # ------------------------------------------------------------------ fitting

    def map_records(self, X: Matrix, y: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray]:
        """The records as the mechanism reads them: each row by its ``row_norm`` map, a regression's
        targets clipped to [-y_bound, y_bound] (maps of one record at a time: no privacy cost)."""
        X = sp.csr_matrix(X, dtype=np.float64)
        if self.row_norm is not None and X.shape[0] > 0:  # normalize refuses no rows; there is nothing to map
            X = normalize(X, norm=self.row_norm, copy=True)
        y = np.asarray(y, dtype=np.float64)
        return X, (np.clip(y, -self.y_bound, self.y_bound) if self._loss == "squared" else y)

    # ------------------------------------------------------------------ the released model

    def _set_released(self, out: dict[str, Any]) -> None:
        self.n_features_in_ = int(out["n_features"])
        w = sparse_coef(out["indices"], out["values"], self.n_features_in_)
        self.coef_ = w[np.newaxis, :] if is_classifier(self) else w  # scikit-learn's shapes: (1, d) for two classes
        self.intercept_ = float(out.get("intercept", 0.0))
        self.row_norm_ = out.get("row_norm", self.row_norm)
        self._from_result(out)

    def _from_result(self, result: dict[str, Any]) -> None:
        pass

    @classmethod
    def from_release(cls, record: dict[str, Any], **params: Any) -> GradientModel:
        """A fitted estimator from a recorded release (a ledger record's ``result``, an export, or
        the bare result); ``params`` are the estimator's parameters."""
        result = model_result(record)  # a ledger row's weights: from their artefact
        if not {"indices", "values", "n_features", "intercept"} <= set(result):
            raise ParameterError("not a released gradient model (needs indices, values, intercept and n_features)")
        est = cls(**params)
        est._set_released(result)
        return est

    def _margins(self, X: Matrix) -> np.ndarray:
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, accept_sparse="csr", reset=False)
        if self.row_norm_ is not None and X.shape[0]:
            X = map_rows(sp.csr_matrix(X, dtype=np.float64), self.row_norm_)
        return np.asarray(X @ self.coef_.ravel()).ravel() + self.intercept_

    def __sklearn_tags__(self):  # noqa: ANN204
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


@dataclass(**PARAMETERS)
class StepParams:
    """The noisy steps' public parameters (each learner declares its own step size ``lr``): ``clip`` the
    per-record gradient norm, ``l2`` the penalty, ``intercept_scaling`` the intercept's feature value,
    ``average`` (the mean of the second half's iterates) and the rows' ``row_norm``."""

    clip: float = 1.0
    l2: float = 0.0
    intercept_scaling: float = 1.0
    average: bool = True
    row_norm: str | None = "l2"


class SteppedModel(GradientModel, StepParams):
    """A gradient learner that runs DP-SGD steps (its schedule ``_steps``; every learner but ``auto``)."""

    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "lr": [Positive()],
        "clip": [Positive()],
        "l2": [AtLeast(0.0)],
        "intercept_scaling": [AtLeast(0.0)],
        "average": [Boolean()],
        "row_norm": [Options(*ROW_NORMS)],
    }

    def release_on(self, X: sp.csr_matrix, y: np.ndarray, run: ReleaseRun) -> dict[str, Any]:
        """The mechanism's output on mapped records (:meth:`map_records`) under ``run.charge``'s
        calibration: the released model. It charges nothing: its caller does (``fit``, or the private
        search for its runs)."""
        w, b = self._train(X, y, run)
        nz = np.flatnonzero(w)
        return {
            "indices": nz.tolist(),
            "values": w[nz].tolist(),
            "intercept": float(b),
            "n_features": int(X.shape[1]),
            "row_norm": self.row_norm,
            "method": self.mechanism,
            **run.extra,
        }

    @abstractmethod
    def _train(self, X: sp.csr_matrix, y: np.ndarray, run: ReleaseRun) -> tuple[np.ndarray, float]:
        """The noisy fit: (w, b) of the model on the prepared (X, y), at the run's charge's noise scales."""

    def step_size(self) -> float:
        """The step size of the noisy steps (its ``lr``)."""
        return float(self.lr)

    def run_plan(self, run: ReleaseRun) -> SGDPlan:
        """:meth:`sgd_plan` of a run: at its public count and its charge's noise multiplier."""
        return self.sgd_plan(run.count(), run.charge.details["noise_multiplier"])

    def sgd_plan(self, n_public: int, noise_multiplier: float) -> SGDPlan:
        """The public parameters of the steps for a public count and the charge's noise multiplier."""
        q, steps, normaliser = self._steps(n_public)
        return SGDPlan(
            self._loss,
            float(self.clip),
            noise_multiplier,
            q,
            steps,
            self.step_size(),
            normaliser,
            float(self.l2),
            float(self.intercept_scaling),
            0.5 if self.average else 1.0,
        )


@dataclass(**PARAMETERS)
class EpochSchedule:
    """Poisson batches of expected size ``batch_size`` for ``epochs`` passes: the sampling rate
    q = batch_size / n~ (1 when the batch is the whole set) and T = epochs / q steps."""

    epochs: float = 40.0
    batch_size: int = 4000
    _parameter_constraints: ClassVar[dict[str, Any]] = {"epochs": [Positive()], "batch_size": [Count()]}

    def _steps(self, n_public: int) -> tuple[float, int, float]:
        q = min(1.0, self.batch_size / n_public)
        return q, max(1, int(round(self.epochs / q))), q * n_public


class GradientClassifierMixin(PrivateClassifierMixin):
    """Two public classes, mapped to -1/+1 (the skeleton's fit, :mod:`dpdist.base`)."""

    _loss = "logistic"
    _parameter_constraints: ClassVar[dict[str, Any]] = {"classes": "no_validation"}  # _binary_classes


class GradientRegressorMixin(PrivateRegressorMixin):
    """Real targets, clipped to [-y_bound, y_bound] (a per-record map) for training."""

    _loss = "squared"
    _parameter_constraints: ClassVar[dict[str, Any]] = {"y_bound": [Positive()]}

    def predict(self, X: Matrix) -> np.ndarray:
        return self._margins(X)
