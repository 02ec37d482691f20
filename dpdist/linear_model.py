"""L1-constrained (DP) Frank-Wolfe estimators, scikit-learn style ([RKL23]; docs/algorithms.md §2).

``DPFrankWolfeClassifier`` (logistic loss, two classes) and ``DPFrankWolfeRegressor``
(squared loss) minimise the mean loss over ||w||_1 <= lam with ``max_iter`` Frank-Wolfe steps
(by default lam = 500 and 1000 steps, the main job's and the benchmarks' values for unit-norm rows:
:data:`dpdist.defaults.FW_LAM`, :data:`dpdist.defaults.FW_ITERS`).
They are scikit-learn estimators: parameters are set in ``__init__`` and validated in ``fit``,
so ``clone``, ``Pipeline`` and ``GridSearchCV`` work (non-private methods for model selection:
a grid search over private fits would spend one budget per fit and per fold).

``method``:

* "fast-dp-fw" (default): [RKL23] Alg. 2 + Alg. 4, the exponential mechanism over signed
  vertices drawn by the Big-Step Little-Step sampler; (epsilon, delta)-DP.
* "dp-fw": the standard Alg. 1 with Laplace report-noisy-max (Talwar et al.), scale
  2 L/eps0.
* "fw", "fast-fw": non-private baselines (Alg. 1 and Alg. 2 + Alg. 3); they release an
  un-noised model, so they refuse an accountant.

eps0 comes from the tight accountant (T eps0^2/8-zCDP for the exponential mechanism's
steps, T eps0^2/2 for Laplace report-noisy-max; :func:`dpdist.solvers.frank_wolfe.privacy_plan`).
``calibration="paper"`` is [RKL23]'s eps0 = eps / sqrt(8 T ln(1/delta)) (and, for "dp-fw",
the papers' Laplace scale L/eps0); the release is charged its true loss.

``screening`` ([KLR23]/[KLR25]; :mod:`dpdist.solvers.screening`) zeroes coordinates whose safe-
screening score says "zero at the optimum", at the iterations of ``screen_schedule`` (an int m:
every m-th iteration; or a list of iterations):

* "rnm" (RNM-Screen) and "adp" (ADP-Screen) with a private method, budget ``screen_epsilon`` /
  ``screen_delta`` (eps2, delta2) or ``screen_rho`` (zCDP), and ``n_max``, a public upper bound on
  the number of training records (the score's sensitivity grows as sqrt(n_max); beyond it the
  score is clipped, so privacy never depends on it). ``fit`` charges the Frank-Wolfe steps
  composed with the screening (``privacy_charge``). With ``calibration="paper"`` both parts use
  the papers' calibration (the printed rule is chosen by ``screen_rule="seed"``; the FW noise
  takes squared loss as 1-Lipschitz, as [KLR23]/[KLR25] do) and the true loss is charged.
* "exact": the rule without noise, for the non-private methods.

The privacy bounds are enforced: |X_ij| <= 1 and, for regression, |y_i| <= y_bound
(``bounds="check"`` refuses, ``"clip"`` clips each record). The classifier's two labels are
public (``classes``, or the labels seen in y). For the logistic fast solver the stale row
derivatives are refreshed every ceil(max_iter / 10) steps (docs/algorithms.md §2.4; see
benchmarks/fw_refresh.py). When ``accountant`` is given, ``fit`` charges it before the
coefficients are returned, and a retried ``key`` replays the recorded model. ``fit``'s
``progress(done, max_iter)`` reports the solver's completed iterations while it runs (the CLI's
progress bar; the count is public, the pace is the operator's own and never released).
``fit(X, y, X_csc=...)`` gives the fast solvers the same matrix in CSC form (a store's CSC copy)
instead of converting X, and a float64 CSR X already within the bound is not copied to clip it:
on KDDA's train half each copy is 3 GB (``dpdist.pipelines.train.fit_store``). float32 X (and X_csc) is
kept as float32, as scikit-learn's estimators do, in half the memory of float64 values; the steps
are those of the float64 matrix of the same values (products and sums in float64).
``from_release`` rebuilds a fitted estimator from a recorded release (``dpdist models export``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import RegressorMixin, is_classifier
from sklearn.utils.validation import check_is_fitted, validate_data

from dpdist.base import PARAMETERS, ClassesParam, PrivacyParams, PrivateEstimator, YBoundParam, charged_to, is_release
from dpdist.data.transforms import BOUND_MODES, Matrix, clip_rows, enforce_bounds, value_dtype
from dpdist.defaults import FW_ITERS, FW_LAM
from dpdist.evaluation import sparse_coef
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.released import model_result, widen
from dpdist.solvers.fast_fw import fast_frank_wolfe
from dpdist.solvers.frank_wolfe import CALIBRATIONS, FWResult, Progress, frank_wolfe, privacy_plan
from dpdist.solvers.screening import RULES, ScreeningPlan, schedule_mask, screening_budget, screening_plan
from dpdist.utils.classifier import BinaryLinearClassifierMixin
from dpdist.utils.model_selection import warn_if_exact_model_selection
from dpdist.utils.operator_log import timing
from dpdist.utils.random import check_random_state
from dpdist.utils.validation import Count, Delta, Epsilon, Options, Positive, check_count, check_delta, check_epsilon

__all__ = ["METHODS", "PRIVATE", "SCREENINGS", "DPFrankWolfeClassifier", "DPFrankWolfeRegressor"]

SELECTIONS = {
    "fast-dp-fw": "exponential",
    "dp-fw": "laplace",
    "fw": None,
    "fast-fw": None,
}  # the solvers (module docstring) and each one's private step (None: a non-private baseline)
METHODS = tuple(SELECTIONS)
PRIVATE = tuple(m for m, step in SELECTIONS.items() if step)
SCREENINGS = (None, "rnm", "adp", "exact")


@dataclass(**PARAMETERS)
class _FrankWolfe(PrivateEstimator, PrivacyParams):
    _loss = "logistic"
    mechanism = "frank_wolfe"
    lam: float = FW_LAM
    max_iter: int = FW_ITERS
    method: str = "fast-dp-fw"
    calibration: str = "safe"
    bounds: str = "check"
    screening: str | None = None
    screen_epsilon: float | None = None
    screen_delta: float | None = None
    screen_rho: float | None = None
    screen_schedule: Any = 1
    screen_rule: str = "safe"
    n_max: int | None = None
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "epsilon": [None, Epsilon()],  # required of a private method (_check_params)
        "delta": [None, Delta(zero=False)],
        "lam": [Positive()],
        "max_iter": [Count()],
        "method": [Options(*METHODS)],
        "calibration": [Options(*CALIBRATIONS)],
        "bounds": [Options(*BOUND_MODES)],
        "random_state": "no_validation",  # check_random_state, when the fit draws
        "screening": [Options(*SCREENINGS)],
        "screen_epsilon": "no_validation",  # the screening's budget, with its delta or rho (_check_params)
        "screen_delta": "no_validation",
        "screen_rho": "no_validation",
        "screen_schedule": "no_validation",  # schedule_mask, against max_iter (_check_params)
        "screen_rule": [Options(*RULES)],
        "n_max": [None, Count()],
    }

    @property
    def private(self) -> bool:
        return self.method in PRIVATE

    def _key_prefix(self) -> str:
        return str(self.method)

    def _check_params(self) -> None:
        if self.private:
            check_epsilon(self.epsilon)
            check_delta(self.delta, allow_zero=False)
        if self.screening is None:
            return
        if (self.screening == "exact") == self.private:
            raise ParameterError(
                f"screening={self.screening!r} does not go with method {self.method!r}: private "
                "methods screen with 'rnm' or 'adp', non-private ones with 'exact'"
            )
        schedule_mask(self.screen_schedule, self.max_iter)
        if self.private:
            screening_budget(self.screen_epsilon, self.screen_delta, self.screen_rho)
            if self.n_max is None:
                raise ParameterError(
                    "n_max (a public upper bound on the number of training records) is required for private screening"
                )
            check_count(self.n_max, "n_max")

    def _y_bound(self) -> float:
        return 1.0

    def _screening_plan(self, n_features: int | None) -> ScreeningPlan | None:
        if self.screening is None:
            return None
        if n_features is None:
            n_features = getattr(self, "n_features_in_", None)
        if n_features is None:
            if self.calibration == "paper" and self.screening != "exact":
                raise ParameterError(
                    "the screening's charge with calibration='paper' depends on the number of features: pass n_features"
                )
            n_features = 1  # the safe calibration's loss does not depend on d (only its sigma does)
        return screening_plan(
            self.screening,
            self._loss,
            self.lam,
            n_features,
            self.max_iter,
            self.screen_schedule,
            self.screen_epsilon,
            self.screen_delta,
            self.screen_rho,
            self.screen_rule,
            self.calibration,
            self._y_bound(),
            self.n_max,
            standalone_delta=self.delta,
        )

    def _lipschitz_noise(self) -> float | None:
        """[KLR23]/[KLR25] (paper mode with screening) scale the FW noise with L = 1."""
        return 1.0 if self.screening in ("rnm", "adp") and self.calibration == "paper" else None

    def _solve(
        self, X: sp.csr_matrix, y: np.ndarray, progress: Progress | None = None, X_csc: sp.csc_matrix | None = None
    ) -> FWResult:
        rng = check_random_state(self.random_state)
        screening, lipschitz_noise = self._screening_plan(X.shape[1]), self._lipschitz_noise()
        sel = SELECTIONS[self.method]
        common: dict[str, Any] = {
            "selection": sel,
            "epsilon": self.epsilon if sel else None,
            "delta": self.delta if sel else None,
            "calibration": self.calibration,
            "loss": self._loss,
            "y_bound": self._y_bound(),
            "random_state": rng,
            "progress": progress,
            "screening": screening,
            "lipschitz_noise": lipschitz_noise,
        }
        if self.method in ("fw", "dp-fw"):
            return frank_wolfe(X, y, self.lam, self.max_iter, **common)
        refresh = math.ceil(self.max_iter / 10) if self._loss == "logistic" else 0
        return fast_frank_wolfe(X, y, self.lam, self.max_iter, refresh=refresh, X_csc=X_csc, **common)

    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        """The charge of one fit (its tight privacy loss and mechanism), whatever the data.

        With screening it is the Frank-Wolfe steps composed with the screening's loss
        (``PrivacyLoss.compose``). Its loss depends on the (public) number of features
        ``n_features`` (default: the fitted model's) only with ``calibration="paper"``; without it
        the details' noise scales are those of one feature. A caller that runs the fit elsewhere (a Dask worker)
        charges this in its own accountant before the model leaves.
        """
        if not self.private:
            raise ParameterError(f"method {self.method!r} is not private: it has no privacy charge")
        plan = privacy_plan(
            self.epsilon,
            self.delta,
            self.max_iter,
            self._loss,
            self.lam,
            self._y_bound(),
            "laplace" if self.method == "dp-fw" else "exponential",
            self.calibration,
            self._lipschitz_noise(),
        )
        details = {"eps0": plan.eps0, "calibration": self.calibration}
        screen = self._screening_plan(n_features)
        if screen is None:
            return Charge(plan.loss, f"frank_wolfe/{self.method}", details)
        if screen.loss is None:  # only the non-private "exact" rule has none, and a private method refuses it
            raise ParameterError(f"screening={self.screening!r} has no privacy charge")
        return Charge(
            PrivacyLoss.compose(plan.loss, screen.loss),
            f"frank_wolfe/{self.method}+{self.screening}-screen",
            {**details, "fw_epsilon": plan.loss.epsilon, **screen.details()},
        )

    def release_params(self, n_features: int | None = None, n_public: int | None = None) -> dict[str, Any]:
        """Every parameter of a fit, for the ledger's release identity (the width aside: ``fit`` adds it)."""
        out = {
            "method": self.method,
            "loss": self._loss,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "lam": self.lam,
            "max_iter": self.max_iter,
            "calibration": self.calibration,
            "bounds": self.bounds,
            "y_bound": self._y_bound(),
        }
        if self.screening is not None:
            sched = self.screen_schedule
            out.update(
                screening=self.screening,
                screen_epsilon=self.screen_epsilon,
                screen_delta=self.screen_delta,
                screen_rho=self.screen_rho,
                screen_rule=self.screen_rule,
                n_max=self.n_max,
                screen_schedule=int(sched) if isinstance(sched, (int, np.integer)) else [int(t) for t in sched],
            )
        return out

    def fit(
        self,
        X: Matrix,
        y: Any,
        accountant: Accountant | None = None,
        dataset: str | None = None,
        key: str | None = None,
        progress: Progress | None = None,
        X_csc: Matrix | None = None,
        columns: tuple[Any, int] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> Any:
        """Fit and release (charged to ``accountant`` first when given; module docstring): ``progress``,
        ``X_csc``, ``columns`` (the columns X holds of a wider matrix, its width) and ``schema`` as there."""
        self.check_params()
        if accountant is not None and not self.private:
            raise ParameterError(f"method {self.method!r} is not private: it cannot be released through an accountant")
        ledger = charged_to(accountant, dataset)
        X, y = self._check_data(
            X, y, accountant, accept_sparse="csr", dtype=[np.float64, np.float32], y_numeric=not is_classifier(self)
        )
        y, extra = self._targets(y, accountant)
        self._fit(X, y, ledger, key, extra, progress, X_csc, columns, schema)
        return self

    def _targets(self, y: np.ndarray, accountant: Accountant | None) -> tuple[np.ndarray, dict[str, Any]]:
        return np.asarray(y, dtype=np.float64).ravel(), {}

    def _bounded(
        self, X: Matrix, y: np.ndarray, X_csc: Matrix | None
    ) -> tuple[sp.csr_matrix, np.ndarray, sp.csc_matrix | None]:
        """(X, y, X_csc) within the privacy bounds: refused outside them, or each record clipped."""
        X = sp.csr_matrix(X, dtype=value_dtype(X))
        if self.private or self.bounds == "clip":  # a non-private fit assumes no bound, unless asked to clip
            X, bounded_y = enforce_bounds(
                X, y, 1.0, None if self._loss == "logistic" else self._y_bound(), mode=self.bounds
            )
            if bounded_y is not None:  # always: y was given (clipped with bounds="clip")
                y = bounded_y
        if X_csc is not None:  # the same bounds on the CSC copy, through its transpose (a CSR view: no copy)
            X_csc = sp.csc_matrix(X_csc, dtype=X.dtype)
            if self.private or self.bounds == "clip":
                X_csc = enforce_bounds(X_csc.T, None, 1.0, None, mode=self.bounds, name="X_csc")[0].T
        return X, y, X_csc

    def _fit(
        self,
        X: Matrix,
        y: np.ndarray,
        ledger: Any,
        key: str | None,
        extra: dict[str, Any],
        progress: Progress | None = None,
        X_csc: Matrix | None = None,
        columns: tuple[Any, int] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> None:
        if self.private:
            warn_if_exact_model_selection(self)
        X, y, X_csc = self._bounded(X, y, X_csc)
        result: dict[str, FWResult] = {}

        def compute() -> dict[str, Any]:
            res = self._solve(X, y, progress, X_csc)
            result["fw"] = res
            nz = np.flatnonzero(res.coef)
            out = {
                "indices": nz.tolist(),
                "values": res.coef[nz].tolist(),
                "path": list(res.path),
                "n_features": int(X.shape[1]),
                **extra,
            }
            if self.bounds == "clip":  # the per-record map the model was fitted under, applied again by predict
                out["clip"] = 1.0
            out = {**out, "screened": res.screened} if self.screening is not None else out
            cols, n_cols = columns if columns is not None else (None, None)
            return widen(out, cols, n_cols, schema)

        params = {**self.release_params(), "n_features": X.shape[1], **extra}
        if columns is not None:
            params["columns"] = [int(j) for j in columns[0]]
        charge = self.privacy_charge(n_features=X.shape[1]) if ledger is not None else None
        out = self._release(charge, self._release_key(key), compute, params, ledger, private=self.private)
        self._set_released(out)
        fw = result.get("fw")
        if fw is not None:  # for the operator's terminal only: a private fit's time is never released
            timing(
                "%s: %d iterations in %.3f s (%.4f ms/iteration, kernels loaded before the timer)",
                self.method,
                self.max_iter,
                fw.seconds,
                1e3 * fw.seconds / self.max_iter,
            )
        self.n_iter_ = self.max_iter
        self.seconds_ = fw.seconds if fw else float("nan")  # the operator's own: never released
        self.privacy_ = fw.privacy if fw else None

    def _set_released(self, out: dict[str, Any]) -> None:
        self.n_features_in_ = int(out["n_features"])
        w = sparse_coef(out["indices"], out["values"], self.n_features_in_)
        self.coef_ = w[np.newaxis, :] if is_classifier(self) else w  # scikit-learn's shapes: (1, d) for two classes
        self.clip_ = out.get("clip")
        self.path_ = list(out.get("path", []))
        self.screened_ = [list(e) for e in out.get("screened", [])] if self.screening is not None else None

    @classmethod
    def from_release(cls, record: dict[str, Any], **params: Any) -> _FrankWolfe:
        """A fitted estimator from a recorded release: the ``result`` of a ledger record (or an export
        of ``dpdist models export``, or the bare result). ``params`` are the estimator's parameters."""
        result = model_result(record)  # a ledger row's weights: from their artefact
        if not {"indices", "values", "n_features"} <= set(result):
            raise ParameterError("not a released Frank-Wolfe model (needs indices, values and n_features)")
        est = cls(**params)
        est._set_released(result)
        est._from_result(result)
        return est

    def _from_result(self, result: dict[str, Any]) -> None:
        pass

    def _margins(self, X: Matrix) -> np.ndarray:
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, accept_sparse="csr", reset=False)
        clip = getattr(self, "clip_", None)
        if clip:
            X = clip_rows(X, float(clip), "clip")
        return np.asarray(X @ self.coef_.ravel()).ravel()

    def __sklearn_tags__(self):  # noqa: ANN204
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


@dataclass(**PARAMETERS)
class DPFrankWolfeClassifier(BinaryLinearClassifierMixin, _FrankWolfe, ClassesParam):
    """Private L1-constrained logistic regression for two classes.

    ``classes``: the two labels, public: required in a release (read from y they would be a function of
    the data); an experiment's fit defaults to the labels seen in y, as scikit-learn's do.
    """

    _loss = "logistic"
    _parameter_constraints: ClassVar[dict[str, Any]] = {"classes": "no_validation"}  # _binary_classes

    def __sklearn_tags__(self):  # noqa: ANN204
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _targets(self, y: np.ndarray, accountant: Accountant | None) -> tuple[np.ndarray, dict[str, Any]]:
        return self._coded_labels(y, self.private and is_release(self, accountant), negative=0.0)  # fw: no release


@dataclass(**PARAMETERS)
class DPFrankWolfeRegressor(RegressorMixin, _FrankWolfe, YBoundParam):
    """Private L1-constrained least squares; ``y_bound`` is the public bound on |y|."""

    _loss = "squared"
    _parameter_constraints: ClassVar[dict[str, Any]] = {"y_bound": [Positive()]}

    def _y_bound(self) -> float:
        return self.y_bound

    def predict(self, X: Matrix) -> np.ndarray:
        return self._margins(X)
