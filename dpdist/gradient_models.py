"""Private linear models trained by gradient methods, scikit-learn style: DP-SGD, DP-GD, DP-IHT and
select-then-train.

All of them share one shape (``_GradientModel``):

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

The learners:

* ``DPSGDClassifier`` / ``DPSGDRegressor``: DP-SGD, Poisson batches of expected size ``batch_size``
  for ``epochs`` passes (Abadi et al. 2016); ``DPGDClassifier`` / ``DPGDRegressor``: full-batch
  DP-GD, ``max_iter`` steps (Dask: ``dpdist.pipelines.dp_gd``). ``dpdist.solvers.dp_sgd`` has the algorithm
  and its proof. Dense models.
* ``DPIHTClassifier`` / ``DPIHTRegressor``: noisy iterative hard thresholding (Cai, Wang & Zhang
  2021): full-batch DP-GD whose iterate is cut to its ``s`` largest weights after every step
  (``dpdist.solvers.dp_iht``). s-sparse models.
* ``SelectTrainClassifier`` / ``SelectTrainRegressor``: a private screening of the ``k`` features
  most correlated with y (Gaussian noise on |X^T y| of the normalised rows, then the top k:
  ``dpdist.selection.gaussian``), then DP-SGD on those k columns. k-sparse models.

Without an accountant the same noisy fit runs and nothing is recorded (experiments); with one,
``fit`` charges it first and a retried ``key`` replays the recorded model. ``from_release``
rebuilds a fitted estimator from a recorded model.
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
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.preprocessing import normalize
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from dpdist.data.transforms import Matrix
from dpdist.exceptions import ParameterError
from dpdist.methods import GRADIENT_METHODS, SEARCH
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.guard import require_accountant
from dpdist.privacy.loss import Charge, PrivacyLoss, calibrate
from dpdist.released import widen
from dpdist.selection.gaussian import GaussianTopK
from dpdist.solvers.dp_iht import dp_iht
from dpdist.solvers.dp_sgd import SGDPlan, dp_sgd
from dpdist.utils.model_selection import warn_if_exact_model_selection
from dpdist.utils.operator_log import timing
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_delta, check_epsilon, check_positive

__all__ = [
    "DPGDClassifier",
    "DPGDRegressor",
    "DPIHTClassifier",
    "DPIHTRegressor",
    "DPSGDClassifier",
    "DPSGDRegressor",
    "GRADIENT_METHODS",
    "LEARNERS",
    "SEARCH",
    "make_learner",
    "SelectTrainClassifier",
    "SelectTrainRegressor",
    "noisy_count",
]


ROW_NORMS = ("l2", "max", None)
Progress = Callable[[int, int], None]


def noisy_count(n: int, epsilon: float, rng: np.random.Generator) -> int:
    """A public count of ``n`` records: n + Laplace(1/epsilon) (sensitivity 1 under ADD/REMOVE),
    rounded, at least 1 (post-processing)."""
    return max(1, int(round(n + rng.laplace(scale=1.0 / epsilon))))


def _calibrated_noise(make: Callable[[float], PrivacyLoss], epsilon: float, delta: float) -> float:
    """The smallest noise multiplier z (to a relative 1e-6) whose loss ``make(z)`` meets (epsilon,
    delta) (``calibrate`` on 1/z, which the loss grows with)."""
    return 1.0 / calibrate(lambda inv: make(1.0 / inv), epsilon, delta, 1e3, tol=1e-6)


class _GradientModel(BaseEstimator, metaclass=ABCMeta):
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

    def _public_count(
        self, X: sp.csr_matrix, accountant: Accountant | None, dataset: str | None, key: str, rng: np.random.Generator
    ) -> int:
        if self.n_records is not None:
            return int(self.n_records)
        charge = self.count_charge()
        compute = lambda: noisy_count(X.shape[0], float(self.count_epsilon), rng)  # noqa: E731
        if accountant is None:
            return int(compute())
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
        if accountant is not None and dataset is None:
            raise ParameterError("dataset is required to charge the accountant")
        warn_if_exact_model_selection(self)
        if accountant is None:
            require_accountant(self)
        rng = check_random_state(self.random_state)
        key = key or f"{self.mechanism}-{uuid.uuid4().hex}"
        Xp, yp = self._prepare(X), self._target(y)
        self._check_width(int(Xp.shape[1]))  # the public width: before anything is charged
        n_public = self._public_count(Xp, accountant, dataset, key, rng)
        charge = self.privacy_charge(n_public)

        def compute() -> dict[str, Any]:
            return widen(
                self._released(Xp, yp, n_public, charge, rng, progress, extra), *(columns or (None, None)), schema
            )

        t0 = time.perf_counter()
        if accountant is None:
            out = compute()
            self.release_ = None
        else:
            params = self.release_params(Xp.shape[1], n_public)
            if columns is not None:
                params["columns"] = [int(j) for j in columns[0]]
            out = accountant.release(dataset, charge, key, compute, params)
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
        self.coef_ = np.zeros(self.n_features_in_)
        self.coef_[np.asarray(out["indices"], dtype=np.int64)] = out["values"]
        self.intercept_ = float(out.get("intercept", 0.0))
        self.row_norm_ = out.get("row_norm", self.row_norm)
        self._from_result(out)

    def _from_result(self, result: dict[str, Any]) -> None:
        pass

    @classmethod
    def from_release(cls, record: dict[str, Any], **params: Any) -> _GradientModel:
        """A fitted estimator from a recorded release (a ledger record's ``result``, an export, or
        the bare result); ``params`` are the estimator's parameters."""
        result = record.get("result", record)
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
        return np.asarray(X @ self.coef_).ravel() + self.intercept_

    def __sklearn_tags__(self):  # noqa: ANN204
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


class _Classifier(ClassifierMixin):
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
        check_classification_targets(y)
        if self.classes is None:
            y_type = type_of_target(y, input_name="y", raise_unknown=True)
            if y_type != "binary":
                raise ParameterError(
                    f"Only binary classification is supported: {type(self).__name__} needs exactly "
                    "2 classes (pass classes=[negative, positive])"
                )
        classes = np.unique(y) if self.classes is None else np.asarray(self.classes)
        if classes.size != 2:
            raise ParameterError(f"{type(self).__name__} needs exactly 2 classes, got {classes.size} class(es)")
        if not np.isin(y, classes).all():
            raise ParameterError("y has labels outside the given classes")
        self.classes_ = classes
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

    def _from_result(self, result: dict[str, Any]) -> None:
        classes = result.get("classes") or self.classes
        if classes is None:
            raise ParameterError("the released model does not name its classes: pass classes=[negative, positive]")
        self.classes_ = np.asarray(classes)

    def decision_function(self, X: Matrix) -> np.ndarray:
        return self._margins(X)

    def predict_proba(self, X: Matrix) -> np.ndarray:
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Matrix) -> np.ndarray:
        return self.classes_[(self.decision_function(X) > 0).astype(np.int64)]


class _Regressor(RegressorMixin):
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


# ------------------------------------------------------------------------------- DP-SGD / DP-GD


class _SGD(_GradientModel):
    """DP-SGD: Poisson batches of expected size ``batch_size`` for ``epochs`` passes, on all columns."""

    mechanism = "dp-sgd"

    def _validate_extra(self) -> None:
        check_positive(self.epochs, "epochs")
        check_count(self.batch_size, "batch_size")

    def _steps(self, n_public: int) -> tuple[float, int, float]:
        q = min(1.0, self.batch_size / n_public)
        return q, max(1, int(round(self.epochs / q))), q * n_public

    def _train(
        self,
        X: sp.csr_matrix,
        y: np.ndarray,
        n_public: int,
        noise: dict[str, float],
        rng: np.random.Generator,
        progress: Progress | None,
    ) -> tuple[np.ndarray, float]:
        return dp_sgd(X, y, self._sgd_plan(n_public, noise["noise_multiplier"]), rng, progress)


class _GD(_SGD):
    """Full-batch DP-GD: ``max_iter`` steps over every record (``dpdist.pipelines.dp_gd`` runs the same steps
    as a Dask reduction over a store's row blocks)."""

    mechanism = "dp-gd"

    def _validate_extra(self) -> None:
        check_count(self.max_iter, "max_iter")

    def _steps(self, n_public: int) -> tuple[float, int, float]:
        return 1.0, int(self.max_iter), float(n_public)


_SGD_DOC = """
    Parameters
    ----------
    epsilon, delta : the model's budget ((epsilon, delta)-DP; the count's release aside).
    epochs, batch_size : the schedule: q = batch_size / n~ (1 when the batch is the whole set),
        T = epochs / q steps.
    lr, clip, l2 : step size, per-record gradient clipping norm C, public L2 penalty.
    intercept_scaling : the intercept's feature value c (unpenalised intercept; 0: none).
    average : release the mean of the second half's iterates (post-processing) instead of the last.
    row_norm : "l2" (default), "max" or None: each row divided by its norm (a per-record map).
    n_records : a public count of the training records (e.g. a released noisy count), or None:
        the fit releases its own Laplace count at ``count_epsilon`` first.
    random_state : None (OS entropy, every release) or a seed (experiments only).
"""
_GD_DOC = _SGD_DOC.replace(
    """    epochs, batch_size : the schedule: q = batch_size / n~ (1 when the batch is the whole set),
        T = epochs / q steps.""",
    """    max_iter : the number of full-batch steps.""",
)
_CLASSES_DOC = "    classes : the two labels, public (default: the labels seen in y).\n"
_Y_BOUND_DOC = "    y_bound : the public bound on |y| (targets clipped to it, a per-record map).\n"


class DPSGDClassifier(_Classifier, _SGD):
    __doc__ = "Private logistic regression (two classes) by DP-SGD.\n" + _SGD_DOC + _CLASSES_DOC

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        epochs: float = 40.0,
        batch_size: int = 4000,
        lr: float = 10.0,
        clip: float = 1.0,
        l2: float = 0.0,
        intercept_scaling: float = 1.0,
        average: bool = True,
        row_norm: str | None = "l2",
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        classes: Any = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon, self.delta, self.epochs, self.batch_size = epsilon, delta, epochs, batch_size
        self.lr, self.clip, self.l2 = lr, clip, l2
        self.intercept_scaling, self.average, self.row_norm = intercept_scaling, average, row_norm
        self.n_records, self.count_epsilon, self.classes, self.random_state = (
            n_records,
            count_epsilon,
            classes,
            random_state,
        )


class DPSGDRegressor(_Regressor, _SGD):
    __doc__ = "Private least squares by DP-SGD.\n" + _SGD_DOC + _Y_BOUND_DOC

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        epochs: float = 40.0,
        batch_size: int = 4000,
        lr: float = 1.0,
        clip: float = 1.0,
        l2: float = 0.0,
        intercept_scaling: float = 1.0,
        average: bool = True,
        row_norm: str | None = "l2",
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        y_bound: float = 1.0,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon, self.delta, self.epochs, self.batch_size = epsilon, delta, epochs, batch_size
        self.lr, self.clip, self.l2 = lr, clip, l2
        self.intercept_scaling, self.average, self.row_norm = intercept_scaling, average, row_norm
        self.n_records, self.count_epsilon, self.y_bound, self.random_state = (
            n_records,
            count_epsilon,
            y_bound,
            random_state,
        )


class DPGDClassifier(_Classifier, _GD):
    __doc__ = "Private logistic regression (two classes) by full-batch DP-GD.\n" + _GD_DOC + _CLASSES_DOC

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        max_iter: int = 100,
        lr: float = 3000.0,
        clip: float = 1.0,
        l2: float = 0.0,
        intercept_scaling: float = 0.02,
        average: bool = True,
        row_norm: str | None = "l2",
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        classes: Any = None,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon, self.delta, self.max_iter, self.lr, self.clip, self.l2 = epsilon, delta, max_iter, lr, clip, l2
        self.intercept_scaling, self.average, self.row_norm = intercept_scaling, average, row_norm
        self.n_records, self.count_epsilon, self.classes, self.random_state = (
            n_records,
            count_epsilon,
            classes,
            random_state,
        )


class DPGDRegressor(_Regressor, _GD):
    __doc__ = "Private least squares by full-batch DP-GD.\n" + _GD_DOC + _Y_BOUND_DOC

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        max_iter: int = 100,
        lr: float = 30.0,
        clip: float = 1.0,
        l2: float = 0.0,
        intercept_scaling: float = 0.1,
        average: bool = True,
        row_norm: str | None = "l2",
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        y_bound: float = 1.0,
        random_state: RandomState = None,
    ) -> None:
        self.epsilon, self.delta, self.max_iter, self.lr, self.clip, self.l2 = epsilon, delta, max_iter, lr, clip, l2
        self.intercept_scaling, self.average, self.row_norm = intercept_scaling, average, row_norm
        self.n_records, self.count_epsilon, self.y_bound, self.random_state = (
            n_records,
            count_epsilon,
            y_bound,
            random_state,
        )


# ------------------------------------------------------------------------------------- DP-IHT


class _IHT(_GradientModel):
    """Full-batch DP-GD projected on s-sparse vectors after every step."""

    mechanism = "dp-iht"

    def _validate_extra(self) -> None:
        check_count(self.s, "s")
        check_count(self.max_iter, "max_iter")

    def _steps(self, n_public: int) -> tuple[float, int, float]:
        return 1.0, int(self.max_iter), float(n_public)

    def _check_width(self, n_features: int) -> None:
        if self.s >= n_features:
            raise ParameterError(f"s={self.s} must be smaller than the number of features ({n_features})")

    def _train(
        self,
        X: sp.csr_matrix,
        y: np.ndarray,
        n_public: int,
        noise: dict[str, float],
        rng: np.random.Generator,
        progress: Progress | None,
    ) -> tuple[np.ndarray, float]:
        return dp_iht(X, y, self._sgd_plan(n_public, noise["noise_multiplier"]), int(self.s), rng, progress)


_IHT_DOC = """
    Parameters
    ----------
    s : the number of non-zero weights (the released model is s-sparse).
    epsilon, delta, max_iter, lr, clip, l2, intercept_scaling, average, row_norm, n_records,
    count_epsilon, random_state : as ``DPGDClassifier``.
"""


class DPIHTClassifier(_Classifier, _IHT):
    __doc__ = "Private s-sparse logistic regression by noisy iterative hard thresholding.\n" + _IHT_DOC

    def __init__(
        self,
        s: int = 100,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        max_iter: int = 100,
        lr: float = 10000.0,
        clip: float = 1.0,
        l2: float = 0.0,
        intercept_scaling: float = 0.01,
        average: bool = False,
        row_norm: str | None = "l2",
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        classes: Any = None,
        random_state: RandomState = None,
    ) -> None:
        self.s, self.epsilon, self.delta, self.max_iter, self.lr, self.clip, self.l2 = (
            s,
            epsilon,
            delta,
            max_iter,
            lr,
            clip,
            l2,
        )
        self.intercept_scaling, self.average, self.row_norm = intercept_scaling, average, row_norm
        self.n_records, self.count_epsilon, self.classes, self.random_state = (
            n_records,
            count_epsilon,
            classes,
            random_state,
        )


class DPIHTRegressor(_Regressor, _IHT):
    __doc__ = (
        "Private s-sparse least squares by noisy iterative hard thresholding.\n"
        + _IHT_DOC
        + "    y_bound : the public bound on |y|.\n"
    )

    def __init__(
        self,
        s: int = 100,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        max_iter: int = 100,
        lr: float = 100.0,
        clip: float = 1.0,
        l2: float = 0.0,
        intercept_scaling: float = 0.1,
        average: bool = False,
        row_norm: str | None = "l2",
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        y_bound: float = 1.0,
        random_state: RandomState = None,
    ) -> None:
        self.s, self.epsilon, self.delta, self.max_iter, self.lr, self.clip, self.l2 = (
            s,
            epsilon,
            delta,
            max_iter,
            lr,
            clip,
            l2,
        )
        self.intercept_scaling, self.average, self.row_norm = intercept_scaling, average, row_norm
        self.n_records, self.count_epsilon, self.y_bound, self.random_state = (
            n_records,
            count_epsilon,
            y_bound,
            random_state,
        )


# ---------------------------------------------------------------------------- select-then-train


class _SelectTrain(_GradientModel):
    """Private screening of k columns (Gaussian noise on |X^T y|), then DP-SGD on them.

    The two phases are one release: the screening's loss (zCDP, ``GaussianTopK``) composed with
    DP-SGD's on the k columns (``PrivacyLoss.compose``). Each is calibrated to its share of
    (epsilon, delta) -- ``selection_share`` of both for the screening, the rest for DP-SGD -- and
    then both noises are scaled down by one common factor until the composed loss is (epsilon,
    delta) (their Renyi curves compose tighter than their epsilons add). The screening's output
    fixes which columns DP-SGD reads, not its loss.
    """

    mechanism = "select-train"

    def _validate_extra(self) -> None:
        check_count(self.k, "k")
        if not 0.0 < float(self.selection_share) < 1.0:
            raise ParameterError(f"selection_share must lie in (0, 1), got {self.selection_share!r}")
        check_positive(self.epochs, "epochs")
        check_count(self.batch_size, "batch_size")

    def _steps(self, n_public: int) -> tuple[float, int, float]:
        q = min(1.0, self.batch_size / n_public)
        return q, max(1, int(round(self.epochs / q))), q * n_public

    def _check_width(self, n_features: int) -> None:
        if self.k >= n_features:
            raise ParameterError(f"k={self.k} must be smaller than the number of features ({n_features})")

    def _training_budget(self) -> tuple[float, float]:
        rest = 1.0 - float(self.selection_share)
        return rest * float(self.epsilon), rest * float(self.delta)

    def _loss_at(self, n_public: int, scale: float) -> tuple[PrivacyLoss, float, float]:
        """(composed loss, screening rho, DP-SGD's z) with both phases' share calibrations' noise times
        ``scale``."""
        share = float(self.selection_share)
        rho = GaussianTopK.for_budget(int(self.k), share * self.epsilon, share * self.delta).rho / (scale * scale)
        z = self._base_noise(n_public) * scale
        loss = PrivacyLoss.compose(PrivacyLoss.zcdp(rho, share * self.delta), self._training_loss(z, n_public))
        return loss, rho, z

    def _joint_scale(self, n_public: int) -> float:
        """The common factor (<= 1) on both phases' noise whose composed loss is (epsilon, delta):
        each phase calibrated to its share alone leaves budget unused, as their Renyi curves compose
        tighter than their epsilons add. Bisection on public quantities (cached)."""
        cache = self.__dict__.setdefault("_noise_cache", {})
        key = ("joint", n_public, repr(sorted(self.get_params().items())))
        if key not in cache:
            ok = lambda x: self._loss_at(n_public, x)[0].epsilon <= self.epsilon  # noqa: E731
            lo, hi = 0.05, 1.0  # hi meets the target (basic composition of the shares)
            if ok(lo):
                hi = lo
            while hi - lo > 1e-3 * hi:
                mid = 0.5 * (lo + hi)
                lo, hi = (lo, mid) if ok(mid) else (mid, hi)
            cache[key] = hi
        return cache[key]

    def privacy_charge(self, n_public: int, noise_scale: float = 1.0) -> Charge:
        self._validate()
        n_public = check_count(n_public, "n_public")
        scale = check_positive(noise_scale, "noise_scale") * self._joint_scale(n_public)
        loss, rho, z = self._loss_at(n_public, scale)
        return Charge(loss, f"{self.mechanism}/{self._loss}", {"noise_multiplier": z, "screening_rho": rho})

    def _train(
        self,
        X: sp.csr_matrix,
        y: np.ndarray,
        n_public: int,
        noise: dict[str, float],
        rng: np.random.Generator,
        progress: Progress | None,
    ) -> tuple[np.ndarray, float]:
        if self.k >= X.shape[1]:
            raise ParameterError(f"k={self.k} must be smaller than the number of features ({X.shape[1]})")
        yb = np.clip(y, -1.0, 1.0)  # the screening's bound (|y_i| <= 1; rows have ||x_i||_2 <= 1 below)
        Xs = normalize(X, norm="l2") if self.row_norm != "l2" else X
        screen = GaussianTopK(int(self.k), noise["screening_rho"], float(self.selection_share) * self.delta)
        cols = screen.select(np.abs(Xs.T @ yb), rng)
        w_k, b = dp_sgd(X[:, cols], y, self._sgd_plan(n_public, noise["noise_multiplier"]), rng, progress)
        w = np.zeros(X.shape[1])
        w[cols] = w_k
        return w, b


_ST_DOC = """
    Parameters
    ----------
    k : the number of columns screened (the released model has at most k non-zero weights).
    selection_share : the share of epsilon and delta the screening spends.
    epsilon, delta, epochs, batch_size, lr, clip, l2, intercept_scaling, average, row_norm,
    n_records, count_epsilon, random_state : as ``DPSGDClassifier`` (DP-SGD on the k columns).

    The screening reads the rows normalised to unit l2 norm and y clipped to [-1, 1] (its bounds:
    the score vector's l2 sensitivity is then 1); DP-SGD reads the rows as ``row_norm`` makes them.
"""


class SelectTrainClassifier(_Classifier, _SelectTrain):
    __doc__ = "Private k-sparse logistic regression: a private screening of k columns, then DP-SGD on them.\n" + _ST_DOC

    def __init__(
        self,
        k: int = 100,
        selection_share: float = 0.3,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        epochs: float = 100.0,
        batch_size: int = 4000,
        lr: float = 100.0,
        clip: float = 1.0,
        l2: float = 0.0,
        intercept_scaling: float = 1.0,
        average: bool = True,
        row_norm: str | None = "l2",
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        classes: Any = None,
        random_state: RandomState = None,
    ) -> None:
        self.k, self.selection_share, self.epsilon, self.delta = k, selection_share, epsilon, delta
        self.epochs, self.batch_size, self.lr, self.clip, self.l2 = epochs, batch_size, lr, clip, l2
        self.intercept_scaling, self.average, self.row_norm = intercept_scaling, average, row_norm
        self.n_records, self.count_epsilon, self.classes, self.random_state = (
            n_records,
            count_epsilon,
            classes,
            random_state,
        )


class SelectTrainRegressor(_Regressor, _SelectTrain):
    __doc__ = (
        "Private k-sparse least squares: a private screening of k columns, then DP-SGD on them.\n"
        + _ST_DOC
        + "    y_bound : the public bound on |y|.\n"
    )

    def __init__(
        self,
        k: int = 100,
        selection_share: float = 0.3,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        epochs: float = 100.0,
        batch_size: int = 4000,
        lr: float = 1.0,
        clip: float = 1.0,
        l2: float = 0.0,
        intercept_scaling: float = 1.0,
        average: bool = True,
        row_norm: str | None = "l2",
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        y_bound: float = 1.0,
        random_state: RandomState = None,
    ) -> None:
        self.k, self.selection_share, self.epsilon, self.delta = k, selection_share, epsilon, delta
        self.epochs, self.batch_size, self.lr, self.clip, self.l2 = epochs, batch_size, lr, clip, l2
        self.intercept_scaling, self.average, self.row_norm = intercept_scaling, average, row_norm
        self.n_records, self.count_epsilon, self.y_bound, self.random_state = (
            n_records,
            count_epsilon,
            y_bound,
            random_state,
        )


# the learners by method name: (classifier, regressor)
LEARNERS: dict[str, tuple[type, type]] = {
    "select-train": (SelectTrainClassifier, SelectTrainRegressor),
    "dp-sgd": (DPSGDClassifier, DPSGDRegressor),
    "dp-gd": (DPGDClassifier, DPGDRegressor),
    "dp-iht": (DPIHTClassifier, DPIHTRegressor),
}


def make_learner(task: str, method: str, **params: Any) -> Any:
    """The learner ``method`` (a ``GRADIENT_METHODS`` name, or ``SEARCH``: the private search over the
    default grid) for a task ("binary" or "regression") at its defaults and ``params``."""
    regression = task == "regression"
    if method == SEARCH:
        from dpdist.tuning import PrivateSearch, default_candidates

        return PrivateSearch(default_candidates(task), **params)
    if method not in LEARNERS:
        raise ParameterError(f"method must be one of {(*GRADIENT_METHODS, SEARCH)}, got {method!r}")
    if regression:
        params.pop("classes", None)
    return LEARNERS[method][1 if regression else 0](**params)
