"""L1-constrained (DP) Frank-Wolfe estimators in scikit-learn style (seed 004; spec 2).

``DPFrankWolfeClassifier`` (logistic loss, two classes) and ``DPFrankWolfeRegressor``
(squared loss) minimise the mean loss over ||w||_1 <= lam with ``max_iter`` Frank-Wolfe steps.

``method``:

* "fast-dp-fw" (default): seed 004 Alg. 2 + Alg. 4, the exponential mechanism over signed
  vertices drawn by the Big-Step Little-Step sampler; (epsilon, delta)-DP.
* "dp-fw": the standard Alg. 1 with Laplace report-noisy-max (Talwar et al.), scale
  2 L/eps0.

eps0 comes from the tight accountant (T eps0^2/8-zCDP for the exponential mechanism's
steps, T eps0^2/2 for Laplace report-noisy-max; :func:`dpdist.solvers.frank_wolfe.privacy_plan`).
``calibration="paper"`` is seed 004's eps0 = eps / sqrt(8 T ln(1/delta)) (and, for "dp-fw",
the seeds' Laplace scale L/eps0); the release is charged its true loss.
* "fw", "fast-fw": non-private baselines (Alg. 1 and Alg. 2 + Alg. 3); they release an
  un-noised model, so they refuse an accountant.

``screening`` (seeds 000/001; :mod:`dpdist.solvers.screening`) zeroes coordinates whose safe-
screening score says "zero at the optimum", at the iterations of ``screen_schedule`` (an int m:
every m-th iteration; or a list of iterations):

* "rnm" (RNM-Screen) and "adp" (ADP-Screen) with a private method, budget ``screen_epsilon`` /
  ``screen_delta`` (eps2, delta2) or ``screen_rho`` (zCDP), and ``n_max``, a public upper bound on
  the number of training records (the score's sensitivity grows as sqrt(n_max); beyond it the
  score is clipped, so privacy never depends on it). ``fit`` charges the Frank-Wolfe steps
  composed with the screening (``privacy_charge``). With ``calibration="paper"`` both parts use
  the seeds' calibration (the printed rule is chosen by ``screen_rule="seed"``; the FW noise
  takes squared loss as 1-Lipschitz, as seeds 000/001 do) and the true loss is charged.
* "exact": the rule without noise, for the non-private methods.

The privacy bounds are enforced: |X_ij| <= 1 and, for regression, |y_i| <= y_bound
(``bounds="check"`` refuses, ``"clip"`` clips each record). For the logistic fast solver the
stale row derivatives are refreshed every ceil(max_iter / 10) steps (spec 2.4; see
benchmarks/fw_refresh.py). When ``accountant`` is given, ``fit`` charges it before the
coefficients are returned, and a retried ``key`` replays the recorded model.
"""

from __future__ import annotations

import math
import uuid

import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from dpdist.data.transforms import BOUND_MODES, Matrix, enforce_bounds
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.solvers.fast_frank_wolfe import fast_frank_wolfe
from dpdist.solvers.frank_wolfe import CALIBRATIONS, FWResult, frank_wolfe, privacy_plan
from dpdist.solvers.screening import RULES, ScreeningPlan, _budget, schedule_mask, screening_plan
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_delta, check_epsilon, check_positive

__all__ = ["METHODS", "SCREEN_METHODS", "DPFrankWolfeClassifier", "DPFrankWolfeRegressor"]

METHODS = ("fast-dp-fw", "dp-fw", "fw", "fast-fw")
PRIVATE = ("fast-dp-fw", "dp-fw")
SCREENINGS = (None, "rnm", "adp", "exact")
SCREEN_METHODS = {"rnm-screen": "rnm", "adp-screen": "adp"}  # CLI / run-config names -> fast-dp-fw + screening


class _FrankWolfe:
    _loss = "logistic"

    def __init__(self, epsilon: float = 1.0, delta: float = 1e-6, lam: float = 50.0, max_iter: int = 1000,
                 method: str = "fast-dp-fw", calibration: str = "safe", bounds: str = "check",
                 random_state: RandomState = None, screening: str | None = None, screen_epsilon: float | None = None,
                 screen_delta: float | None = None, screen_rho: float | None = None, screen_schedule=1,
                 screen_rule: str = "safe", n_max: int | None = None) -> None:
        self.epsilon, self.delta, self.lam, self.max_iter = epsilon, delta, lam, max_iter
        self.method, self.calibration, self.bounds, self.random_state = method, calibration, bounds, random_state
        self.screening, self.screen_epsilon, self.screen_delta = screening, screen_epsilon, screen_delta
        self.screen_rho, self.screen_schedule, self.screen_rule, self.n_max = screen_rho, screen_schedule, \
            screen_rule, n_max
        self._validate()

    def _validate(self) -> None:
        if self.method not in METHODS:
            raise ParameterError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.calibration not in CALIBRATIONS:
            raise ParameterError(f"calibration must be one of {CALIBRATIONS}, got {self.calibration!r}")
        if self.bounds not in BOUND_MODES:
            raise ParameterError(f"bounds must be one of {BOUND_MODES}, got {self.bounds!r}")
        check_positive(self.lam, "lam")
        check_count(self.max_iter, "max_iter")
        if self.private:
            check_epsilon(self.epsilon)
            check_delta(self.delta, allow_zero=False)
        if self.screening not in SCREENINGS:
            raise ParameterError(f"screening must be one of {SCREENINGS}, got {self.screening!r}")
        if self.screening is not None:
            if (self.screening == "exact") == self.private:
                raise ParameterError(f"screening={self.screening!r} does not go with method {self.method!r}: private "
                                     "methods screen with 'rnm' or 'adp', non-private ones with 'exact'")
            schedule_mask(self.screen_schedule, self.max_iter)
            if self.screen_rule not in RULES:
                raise ParameterError(f"screen_rule must be one of {RULES}, got {self.screen_rule!r}")
            if self.private:
                _budget(self.screen_epsilon, self.screen_delta, self.screen_rho)
                if self.n_max is None:
                    raise ParameterError("n_max (a public upper bound on the number of training records) is required "
                                         "for private screening")
                check_count(self.n_max, "n_max")

    @property
    def private(self) -> bool:
        return self.method in PRIVATE

    def _y_bound(self) -> float:
        return 1.0

    def _screening_plan(self, n_features: int | None) -> ScreeningPlan | None:
        if self.screening is None:
            return None
        if n_features is None:
            n_features = getattr(self, "n_features_in_", None)
        if n_features is None:
            raise ParameterError("the screening's charge depends on the number of features: pass n_features")
        return screening_plan(self.screening, self._loss, self.lam, n_features, self.max_iter, self.screen_schedule,
                              self.screen_epsilon, self.screen_delta, self.screen_rho, self.screen_rule,
                              self.calibration, self._y_bound(), self.n_max, standalone_delta=self.delta)

    def _lipschitz_noise(self) -> float | None:
        """Seeds 000/001 (paper mode with screening) scale the FW noise with L = 1."""
        return 1.0 if self.screening in ("rnm", "adp") and self.calibration == "paper" else None

    def _solve(self, X: sp.csr_matrix, y: np.ndarray) -> FWResult:
        rng = check_random_state(self.random_state)
        kw = dict(loss=self._loss, y_bound=self._y_bound(), random_state=rng,
                  screening=self._screening_plan(X.shape[1]), lipschitz_noise=self._lipschitz_noise())
        if self.method in ("fw", "dp-fw"):
            sel = "laplace" if self.method == "dp-fw" else None
            return frank_wolfe(X, y, self.lam, self.max_iter, selection=sel, epsilon=self.epsilon if sel else None,
                               delta=self.delta if sel else None, calibration=self.calibration, **kw)
        sel = "exponential" if self.method == "fast-dp-fw" else None
        refresh = math.ceil(self.max_iter / 10) if self._loss == "logistic" else 0
        return fast_frank_wolfe(X, y, self.lam, self.max_iter, selection=sel, epsilon=self.epsilon if sel else None,
                                delta=self.delta if sel else None, refresh=refresh, calibration=self.calibration, **kw)

    def privacy_charge(self, n_features: int | None = None) -> Charge:
        """The charge of one fit (its tight privacy loss and mechanism), whatever the data.

        With screening it is the Frank-Wolfe steps composed with the screening's loss
        (``PrivacyLoss.compose``); that needs the (public) number of features ``n_features``
        (default: the fitted model's). A caller that runs the fit elsewhere (a Dask worker)
        charges this in its own accountant before the model leaves.
        """
        self._validate()
        if not self.private:
            raise ParameterError(f"method {self.method!r} is not private: it has no privacy charge")
        plan = privacy_plan(self.epsilon, self.delta, self.max_iter, self._loss, self.lam, self._y_bound(),
                            "laplace" if self.method == "dp-fw" else "exponential", self.calibration,
                            self._lipschitz_noise())
        details = {"eps0": plan.eps0, "calibration": self.calibration}
        screen = self._screening_plan(n_features)
        if screen is None:
            return Charge(plan.loss, f"frank_wolfe/{self.method}", details)
        return Charge(PrivacyLoss.compose(plan.loss, screen.loss), f"frank_wolfe/{self.method}+{self.screening}-screen",
                      {**details, "fw_epsilon": plan.loss.epsilon, **screen.details()})

    def release_params(self) -> dict:
        """Every parameter of a fit, for the ledger's release identity."""
        out = {"method": self.method, "loss": self._loss, "epsilon": self.epsilon, "delta": self.delta,
               "lam": self.lam, "max_iter": self.max_iter, "calibration": self.calibration, "bounds": self.bounds,
               "y_bound": self._y_bound()}
        if self.screening is not None:
            sched = self.screen_schedule
            out.update(screening=self.screening, screen_epsilon=self.screen_epsilon, screen_delta=self.screen_delta,
                       screen_rho=self.screen_rho, screen_rule=self.screen_rule, n_max=self.n_max,
                       screen_schedule=int(sched) if isinstance(sched, (int, np.integer)) else [int(t) for t in sched])
        return out

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
            out = {"indices": nz.tolist(), "values": res.coef[nz].tolist()}
            return {**out, "screened": res.screened} if self.screening is not None else out

        if accountant is None:
            out = compute()
        else:
            if dataset is None:
                raise ParameterError("dataset is required to charge the accountant")
            key = key or f"{self.method}-{uuid.uuid4().hex}"
            out = accountant.release(dataset, self.privacy_charge(X.shape[1]), key, compute,
                                     {**self.release_params(), "n_features": X.shape[1]})
        self.coef_ = np.zeros(X.shape[1])
        self.coef_[np.asarray(out["indices"], dtype=np.int64)] = out["values"]
        fw = result.get("fw")
        self.n_iter_ = self.max_iter
        self.seconds_ = fw.seconds if fw else float("nan")
        self.privacy_ = fw.privacy if fw else None
        self.path_ = fw.path if fw else None
        self.screened_ = out.get("screened") if self.screening is not None else None

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
                 random_state: RandomState = None, screening: str | None = None, screen_epsilon: float | None = None,
                 screen_delta: float | None = None, screen_rho: float | None = None, screen_schedule=1,
                 screen_rule: str = "safe", n_max: int | None = None) -> None:
        self.y_bound = check_positive(y_bound, "y_bound")
        super().__init__(epsilon, delta, lam, max_iter, method, calibration, bounds, random_state, screening,
                         screen_epsilon, screen_delta, screen_rho, screen_schedule, screen_rule, n_max)

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
