"""What the gradient learners share (``GradientModel``): preprocessing, the public count, the
release, prediction; and the two target mixins (two public classes, or clipped real targets).

* **Per-record preprocessing** (``row_norm``): each row divided by its l2 norm (``"l2"``, the
  default: cosine-normalised rows, as TF-IDF text is) or its largest |x_ij| (``"max"``), or left
  alone (``None``). A map of one record at a time: no privacy cost, and the released model
  carries it, so ``predict`` applies it again.
* **A public count** of the training records: ``n_records`` when the caller has one (a noisy
  count released earlier, e.g. the run's row counts), else the fit first releases a Laplace
  count of its own (``count_epsilon``, a separate release charged before the model's: the
  model's loss depends on it through q and T, and a loss must be fixed before it is charged).
  The exact n is never used: n is private under ADD/REMOVE.
* **The learner's mechanism**, charged as one release in its strongest form, then the model
  ``{"indices", "values", "intercept", ...}`` (non-zero weights only) recorded by the ledger.
"""

from __future__ import annotations

import math
import time
import uuid
from abc import ABCMeta, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, RegressorMixin, is_classifier
from sklearn.preprocessing import normalize
from sklearn.utils.validation import check_is_fitted, validate_data

from dpdist.data.transforms import Matrix
from dpdist.evaluation import sparse_coef
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.guard import require_accountant
from dpdist.privacy.loss import Charge, PrivacyLoss, calibrate
from dpdist.released import model_result, widen
from dpdist.solvers.dp_sgd import SGDPlan
from dpdist.utils.classifier import BinaryLinearClassifierMixin
from dpdist.utils.model_selection import warn_if_exact_model_selection
from dpdist.utils.operator_log import timing
from dpdist.utils.random import check_random_state
from dpdist.utils.validation import check_count, check_delta, check_epsilon, check_positive

__all__ = [
    "GradientClassifierMixin",
    "GradientModel",
    "GradientRegressorMixin",
    "Ledger",
    "Progress",
    "ROW_NORMS",
    "charged_to",
    "noisy_count",
]


ROW_NORMS = ("l2", "max", None)
Progress = Callable[[int, int], None]
Ledger = tuple[Accountant, str]  # the accountant a fit charges and the dataset it charges


def charged_to(accountant: Accountant | None, dataset: str | None) -> Ledger | None:
    """(accountant, dataset) a fit charges, or None without an accountant (the dataset is required
    with one)."""
    if accountant is None:
        return None
    if dataset is None:
        raise ParameterError("dataset is required to charge the accountant")
    return accountant, dataset


def noisy_count(n: int, epsilon: float, rng: np.random.Generator) -> int:
    """A public count of ``n`` records: n + Laplace(1/epsilon) (sensitivity 1 under ADD/REMOVE),
    rounded, at least 1 (post-processing)."""
    return max(1, int(round(n + rng.laplace(scale=1.0 / epsilon))))


def _calibrated_noise(make: Callable[[float], PrivacyLoss], epsilon: float, delta: float) -> float:
    """The smallest noise multiplier z (to a relative 1e-6) whose loss ``make(z)`` meets (epsilon,
    delta) (``calibrate`` on 1/z, which the loss grows with)."""
    return 1.0 / calibrate(lambda inv: make(1.0 / inv), epsilon, delta, 1e3, tol=1e-6)


class GradientModel(BaseEstimator, metaclass=ABCMeta):
    """What the gradient learners share: preprocessing, the public count, the release, prediction."""

    _loss = "logistic"
    mechanism = "dp-sgd"

    # ------------------------------------------------------------------ parameters

    def _validate(self) -> None:
        check_epsilon(self.epsilon)
        check_delta(self.delta, allow_zero=False)
        if self.row_norm not in ROW_NORMS:
            raise ParameterError(f"row_norm must be one of {ROW_NORMS}, got {self.row_norm!r}")
        for name in ("lr", "clip"):
            check_positive(getattr(self, name), name)
        if not (self.l2 >= 0 and math.isfinite(self.l2)):
            raise ParameterError(f"l2 must be a finite number >= 0, got {self.l2!r}")
        if self.n_records is not None:
            check_count(self.n_records, "n_records")
        else:
            check_epsilon(self.count_epsilon, "count_epsilon")
        if self._loss == "squared":
            check_positive(self.y_bound, "y_bound")
        self._validate_extra()

    def _validate_extra(self) -> None:
        """Subclass parameters."""

    def _check_width(self, n_features: int) -> None:
        """Parameters that depend on the (public) number of features."""

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

    def privacy_charge(self, n_public: int, noise_scale: float = 1.0) -> Charge:
        """What a fit charges, for a public count of its records (the count's own release aside).

        ``noise_scale`` >= 1 multiplies every noise scale of the calibration to (epsilon, delta):
        the private tuner (``dpdist.tuning``) runs candidates so, to pay for choosing among them.
        """
        self._validate()
        n_public = check_count(n_public, "n_public")
        z = self._base_noise(n_public) * check_positive(noise_scale, "noise_scale")
        return Charge(self._training_loss(z, n_public), f"{self.mechanism}/{self._loss}", {"noise_multiplier": z})

    def count_charge(self) -> Charge:
        """The public count's own release (when ``n_records`` is None)."""
        return Charge(PrivacyLoss.laplace(float(self.count_epsilon)), "count/laplace")

    def release_params(self, n_features: int, n_public: int) -> dict[str, Any]:
        """Every parameter of a fit, for the ledger's release identity."""
        params = self.get_params()
        params.pop("random_state", None)
        params["classes"] = None if params.get("classes") is None else [_plain(c) for c in params["classes"]]
        return {
            **params,
            "method": self.mechanism,
            "loss": self._loss,
            "n_features": int(n_features),
            "n_public": int(n_public),
        }

    # ------------------------------------------------------------------ fitting

    def _prepare(self, X: Matrix) -> sp.csr_matrix:
        X = sp.csr_matrix(X, dtype=np.float64)
        if self.row_norm is not None:
            X = normalize(X, norm=self.row_norm, copy=True)
        return X

    def _target(self, y: np.ndarray) -> np.ndarray:
        return np.clip(y, -self.y_bound, self.y_bound) if self._loss == "squared" else y

    def _public_count(self, X: sp.csr_matrix, ledger: Ledger | None, key: str, rng: np.random.Generator) -> int:
        if self.n_records is not None:
            return int(self.n_records)
        charge = self.count_charge()
        compute = lambda: noisy_count(X.shape[0], float(self.count_epsilon), rng)  # noqa: E731
        if ledger is None:
            return int(compute())
        accountant, dataset = ledger
        return int(
            accountant.release(
                dataset,
                charge,
                f"{key}/count",
                compute,
                {"count_epsilon": self.count_epsilon, "of": "training records"},
            )
        )

    def _fit(
        self,
        X: Matrix,
        y: np.ndarray,
        accountant: Accountant | None,
        dataset: str | None,
        key: str | None,
        extra: dict[str, Any],
        progress: Progress | None,
        columns: tuple[Any, int] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> None:
        self._validate()
        ledger = charged_to(accountant, dataset)
        warn_if_exact_model_selection(self)
        if accountant is None:
            require_accountant(self)
        rng = check_random_state(self.random_state)
        key = key or f"{self.mechanism}-{uuid.uuid4().hex}"
        Xp, yp = self._prepare(X), self._target(y)
        self._check_width(int(Xp.shape[1]))  # the public width: before anything is charged
        n_public = self._public_count(Xp, ledger, key, rng)
        charge = self.privacy_charge(n_public)
        held, width = columns if columns is not None else (None, None)

        def compute() -> dict[str, Any]:
            return widen(self._released(Xp, yp, n_public, charge, rng, progress, extra), held, width, schema)

        t0 = time.perf_counter()
        if ledger is None:
            out = compute()
            self.release_ = None
        else:
            params = self.release_params(Xp.shape[1], n_public)
            if held is not None:
                params["columns"] = [int(j) for j in held]
            out = ledger[0].release(ledger[1], charge, key, compute, params)
            self.release_ = {"key": key, "epsilon": charge.epsilon, "delta": charge.delta}
        timing("%s: fit in %.3f s", self.mechanism, time.perf_counter() - t0)
        self.n_public_ = n_public
        self.release_record_ = out  # the released model as recorded (public)
        self._set_released(out)

    def _released(
        self,
        X: sp.csr_matrix,
        y: np.ndarray,
        n_public: int,
        charge: Charge,
        rng: np.random.Generator,
        progress: Progress | None,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        """The noisy fit on prepared (X, y) under ``charge``'s calibration, as the released model."""
        w, b = self._train(X, y, n_public, charge.details, rng, progress)
        nz = np.flatnonzero(w)
        return {
            "indices": nz.tolist(),
            "values": w[nz].tolist(),
            "intercept": float(b),
            "n_features": int(X.shape[1]),
            "row_norm": self.row_norm,
            "method": self.mechanism,
            **extra,
        }

    @abstractmethod
    def _train(
        self,
        X: sp.csr_matrix,
        y: np.ndarray,
        n_public: int,
        noise: dict[str, float],
        rng: np.random.Generator,
        progress: Progress | None,
    ) -> tuple[np.ndarray, float]:
        """The noisy fit: (w, b) of the model on the prepared (X, y), at the charge's noise scales."""

    def _sgd_plan(self, n_public: int, z: float) -> SGDPlan:
        q, steps, normaliser = self._steps(n_public)
        return SGDPlan(
            self._loss,
            float(self.clip),
            z,
            q,
            steps,
            float(self.lr),
            normaliser,
            float(self.l2),
            float(self.intercept_scaling),
            0.5 if self.average else 1.0,
        )

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
        if self.row_norm_ is not None:
            X = normalize(sp.csr_matrix(X, dtype=np.float64), norm=self.row_norm_)
        return np.asarray(X @ self.coef_.ravel()).ravel() + self.intercept_

    def __sklearn_tags__(self):  # noqa: ANN204
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


class GradientClassifierMixin(BinaryLinearClassifierMixin):
    """Two public classes, mapped to -1/+1."""

    _loss = "logistic"

    def fit(
        self,
        X: Matrix,
        y: Any,
        accountant: Accountant | None = None,
        dataset: str | None = None,
        key: str | None = None,
        progress: Progress | None = None,
        columns: tuple[Any, int] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> Any:
        """Fit and release (charged to ``accountant`` first when given); ``columns`` = (the columns X holds
        of a wider matrix, its width): the released model is stated in the wider matrix's columns;
        ``schema``: public facts the model needs to read new records (``dpdist.released.widen``)."""
        if accountant is not None and self.classes is None:
            raise ParameterError(
                "classes are public schema: pass classes=[negative, positive] (the labels declared "
                "for the data); read from y, the released model's classes would be a function of it"
            )
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32])
        classes = self._binary_classes(y)
        self._fit(
            X,
            np.where(y == classes[1], 1.0, -1.0),
            accountant,
            dataset,
            key,
            {"classes": [_plain(c) for c in classes]},
            progress,
            columns,
            schema,
        )
        return self


class GradientRegressorMixin(RegressorMixin):
    """Real targets, clipped to [-y_bound, y_bound] (a per-record map) for training."""

    _loss = "squared"

    def fit(
        self,
        X: Matrix,
        y: Any,
        accountant: Accountant | None = None,
        dataset: str | None = None,
        key: str | None = None,
        progress: Progress | None = None,
        columns: tuple[Any, int] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> Any:
        """As the classifier's ``fit``."""
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32], y_numeric=True)
        self._fit(X, np.asarray(y, dtype=np.float64).ravel(), accountant, dataset, key, {}, progress, columns, schema)
        return self

    def predict(self, X: Matrix) -> np.ndarray:
        return self._margins(X)
