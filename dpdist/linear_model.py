"""L1-constrained (DP) Frank-Wolfe estimators in scikit-learn style (seed 004; spec 2).

``DPFrankWolfeClassifier`` (logistic loss, two classes) and ``DPFrankWolfeRegressor``
(squared loss) minimise the mean loss over ||w||_1 <= lam with ``max_iter`` Frank-Wolfe steps.

``method``:

* "fast-dp-fw" (default): seed 004 Alg. 2 + Alg. 4, the exponential mechanism over signed
  vertices drawn by the Big-Step Little-Step sampler; (epsilon, delta)-DP.
* "dp-fw": the standard Alg. 1 with Laplace report-noisy-max (Talwar et al.), scale
  2 Delta/eps0; ``calibration="paper"`` reproduces the seeds' Delta/eps0 and charges the
  true epsilon it costs.
* "fw", "fast-fw": non-private baselines (Alg. 1 and Alg. 2 + Alg. 3); they release an
  un-noised model, so they refuse an accountant.

The privacy bounds are enforced: |X_ij| <= 1 and, for regression, |y_i| <= y_bound
(``bounds="check"`` refuses, ``"clip"`` clips each record). For the logistic fast solver the
stale row derivatives are refreshed every ceil(max_iter / 10) steps (spec 2.4; see
benchmarks/fw_refresh.py). When ``accountant`` is given, ``fit`` charges it before the
coefficients are returned, and a retried ``key`` replays the recorded model.
"""

from __future__ import annotations

import logging
import math
import uuid

import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from dpdist.data.transforms import BOUND_MODES, Matrix, enforce_bounds
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.solvers.fast_frank_wolfe import fast_frank_wolfe
from dpdist.solvers.frank_wolfe import CALIBRATIONS, FWResult, frank_wolfe, privacy_plan
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_delta, check_epsilon, check_positive

__all__ = ["METHODS", "DPFrankWolfeClassifier", "DPFrankWolfeRegressor"]

METHODS = ("fast-dp-fw", "dp-fw", "fw", "fast-fw")
PRIVATE = ("fast-dp-fw", "dp-fw")
logger = logging.getLogger(__name__)


class _FrankWolfe:
    _loss = "logistic"

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-6, lam: float = 50.0, max_iter: int = 1000,
                 method: str = "fast-dp-fw", calibration: str = "safe", bounds: str = "check",
                 random_state: RandomState = None) -> None:
        self.epsilon, self.delta, self.lam, self.max_iter = epsilon, delta, lam, max_iter
        self.method, self.calibration, self.bounds, self.random_state = method, calibration, bounds, random_state
        self._validate()

    def _validate(self) -> None:
        if self.method not in METHODS:
            raise ParameterError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.calibration not in CALIBRATIONS:
            raise ParameterError(f"calibration must be one of {CALIBRATIONS}, got {self.calibration!r}")
        if self.calibration == "paper" and self.method != "dp-fw":
            raise ParameterError("calibration='paper' is the seeds' Laplace scale: only for method='dp-fw'")
        if self.bounds not in BOUND_MODES:
            raise ParameterError(f"bounds must be one of {BOUND_MODES}, got {self.bounds!r}")
        check_positive(self.lam, "lam")
        check_count(self.max_iter, "max_iter")
        if self.private:
            check_epsilon(self.epsilon)
            check_delta(self.delta, allow_zero=False)

    @property
    def private(self) -> bool:
        return self.method in PRIVATE

    def _y_bound(self) -> float:
        return 1.0

    def _solve(self, X: sp.csr_matrix, y: np.ndarray) -> FWResult:
        rng = check_random_state(self.random_state)
        kw = dict(loss=self._loss, y_bound=self._y_bound(), random_state=rng)
        if self.method in ("fw", "dp-fw"):
            sel = "laplace" if self.method == "dp-fw" else None
            return frank_wolfe(X, y, self.lam, self.max_iter, selection=sel, epsilon=self.epsilon if sel else None,
                               delta=self.delta if sel else None, calibration=self.calibration, **kw)
        sel = "exponential" if self.method == "fast-dp-fw" else None
        refresh = math.ceil(self.max_iter / 10) if self._loss == "logistic" else 0
        return fast_frank_wolfe(X, y, self.lam, self.max_iter, selection=sel, epsilon=self.epsilon if sel else None,
                                delta=self.delta if sel else None, refresh=refresh, **kw)

    def privacy_charge(self, n_samples: int) -> tuple[float, float, str]:
        """(epsilon, delta, mechanism) that fitting on ``n_samples`` rows must be charged.

        The epsilon is the plan's true epsilon (above the target only for
        ``calibration="paper"``). A caller that runs the fit elsewhere (a Dask worker) charges
        this in its own accountant before the model leaves.
        """
        self._validate()
        if not self.private:
            raise ParameterError(f"method {self.method!r} is not private: it has no privacy charge")
        plan = privacy_plan(self.epsilon, self.delta, self.max_iter, self._loss, self.lam, check_count(n_samples, "n_samples"),
                            self._y_bound(), "laplace" if self.method == "dp-fw" else "exponential", self.calibration)
        return plan.true_epsilon, self.delta, f"frank_wolfe/{self.method}"

    def _fit(self, X: Matrix, y: np.ndarray, accountant: Accountant | None, dataset: str | None,
             key: str | None) -> None:
        self._validate()
        if accountant is not None and not self.private:
            raise ParameterError(f"method {self.method!r} is not private: it cannot be released through an accountant")
        X = sp.csr_matrix(X, dtype=np.float64)
        X, y = enforce_bounds(X, y, 1.0, None if self._loss == "logistic" else self._y_bound(), mode=self.bounds)
        self.n_features_in_ = X.shape[1]
        result: dict = {}

        def compute() -> dict:
            res = self._solve(X, y)
            result["fw"] = res
            nz = np.flatnonzero(res.coef)
            return {"indices": nz.tolist(), "values": res.coef[nz].tolist()}

        if accountant is None:
            out = compute()
        else:
            if dataset is None:
                raise ParameterError("dataset is required to charge the accountant")
            epsilon, delta, mechanism = self.privacy_charge(X.shape[0])
            key = key or f"{self.method}-{uuid.uuid4().hex}"
            out = accountant.release(dataset, epsilon, delta, mechanism, key, compute)
        self.coef_ = np.zeros(X.shape[1])
        self.coef_[np.asarray(out["indices"], dtype=np.int64)] = out["values"]
        fw = result.get("fw")
        if fw is not None:  # for the operator's log only: a private fit's time is never released
            logger.info("%s: %d iterations in %.3f s (%.4f ms/iteration, kernels loaded before the timer)",
                        self.method, self.max_iter, fw.seconds, 1e3 * fw.seconds / self.max_iter)
        self.n_iter_ = self.max_iter
        self.seconds_ = fw.seconds if fw else float("nan")
        self.privacy_ = fw.privacy if fw else None
        self.path_ = fw.path if fw else None

    def decision_function(self, X: Matrix) -> np.ndarray:
        if X.shape[1] != self.n_features_in_:
            raise ParameterError(f"X has {X.shape[1]} features, the model was fitted on {self.n_features_in_}")
        return np.asarray(X @ self.coef_).ravel()


class DPFrankWolfeClassifier(_FrankWolfe):
    """Private L1-constrained logistic regression for two classes."""

    _loss = "logistic"

    def fit(self, X: Matrix, y: np.ndarray, accountant: Accountant | None = None, dataset: str | None = None,
            key: str | None = None) -> DPFrankWolfeClassifier:
        y = np.asarray(y).ravel()
        self.classes_ = np.unique(y)  # the label set is treated as public (as in scikit-learn)
        if self.classes_.size != 2:
            raise ParameterError(f"DPFrankWolfeClassifier needs exactly 2 classes, got {self.classes_.size}")
        self._fit(X, (y == self.classes_[1]).astype(np.float64), accountant, dataset, key)
        return self

    def predict_proba(self, X: Matrix) -> np.ndarray:
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Matrix) -> np.ndarray:
        return self.classes_[(self.decision_function(X) > 0).astype(np.int64)]

    def score(self, X: Matrix, y: np.ndarray) -> float:
        return float(np.mean(self.predict(X) == np.asarray(y).ravel()))


class DPFrankWolfeRegressor(_FrankWolfe):
    """Private L1-constrained least squares; ``y_bound`` is the public bound on |y|."""

    _loss = "squared"

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-6, lam: float = 50.0, max_iter: int = 1000,
                 method: str = "fast-dp-fw", calibration: str = "safe", bounds: str = "check", y_bound: float = 1.0,
                 random_state: RandomState = None) -> None:
        self.y_bound = check_positive(y_bound, "y_bound")
        super().__init__(epsilon, delta, lam, max_iter, method, calibration, bounds, random_state)

    def _y_bound(self) -> float:
        return self.y_bound

    def fit(self, X: Matrix, y: np.ndarray, accountant: Accountant | None = None, dataset: str | None = None,
            key: str | None = None) -> DPFrankWolfeRegressor:
        self._fit(X, np.asarray(y, dtype=np.float64).ravel(), accountant, dataset, key)
        return self

    def predict(self, X: Matrix) -> np.ndarray:
        return self.decision_function(X)

    def score(self, X: Matrix, y: np.ndarray) -> float:
        y = np.asarray(y, dtype=np.float64).ravel()
        resid = y - self.predict(X)
        return float(1.0 - resid @ resid / max(((y - y.mean()) ** 2).sum(), 1e-300))
