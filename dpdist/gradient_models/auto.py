"""The default learner: the public rule of :mod:`dpdist.gradient_models.default_learner`, one learner per kind of data.

Which private learner is best depends on the kind of data (``benchmarks/results/utility/``): AdaSSP on
a regression, the screened nearest centroid on a small wide table, DP-SGD with its decision threshold
at the noisy class prior on imbalanced labels, select-then-train when its screening can see the signal
among many records, DP-SGD on every column otherwise. What tells them apart is public: the task, the
declared width d, whether the rows come as a dense table, the budget (epsilon, delta) and the noisy
class counts (their sum is the public count n~). This estimator releases those counts first (a
histogram of the two classes, each cell + Laplace(1/``count_epsilon``): one record changes one cell by
1, so the pair is ``count_epsilon``-DP, the charge of a plain noisy count), asks
:func:`dpdist.gradient_models.default_learner.plan_default` for the learner, and runs it at the whole budget. A
regression releases a plain noisy count (the pre-flight's and the report's n~; the rule needs none).

With a public count ``n_records`` and no ``class_counts`` the classes are taken as balanced (nothing
about them is released); pass the public ``class_counts`` (released before, as ``dpdist train`` does)
to let the rule see an imbalance.

Privacy: the choice is a function of public values only (the released counts, the width, epsilon,
delta, the parameters): post-processing of what was already released, so the fit is exactly the chosen
learner's mechanism, charged as that learner charges it (the record names which one ran). The
threshold at the noisy prior, logit(n~+ / n~), is post-processing of the released counts as well.
The claim and its proof: [docs/proofs/gradient_models-default_learner.md][proof-default-learner].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from dpdist.base import PARAMETERS, Ledger, ModelPlan, PrivateEstimator, ReleaseRun
from dpdist.exceptions import ParameterError
from dpdist.gradient_models.base import (
    GradientClassifierMixin,
    GradientModel,
    GradientRegressorMixin,
)
from dpdist.gradient_models.default_learner import LearnerPlan, ThresholdedClassifier, build_default, plan_default
from dpdist.privacy.loss import Charge
from dpdist.statistic_models.noisy_centroid import noisy_class_counts
from dpdist.utils.random import check_random_state
from dpdist.utils.validation import Boolean

__all__ = ["UNKNOWN_WIDTH", "AutoClassifier", "AutoRegressor"]

UNKNOWN_WIDTH = 1_000_000  # the width a charge planned before the data is read assumes


@dataclass(**PARAMETERS)
class _Auto(GradientModel):
    """The learner :func:`~dpdist.gradient_models.default_learner.plan_default` picks from public values
    (module docstring)."""

    mechanism = "auto"
    dense: bool | None = None
    row_norm = None  # the chosen learner maps its records itself
    _task: ClassVar[str]
    _parameter_constraints: ClassVar[dict[str, Any]] = {"dense": [None, Boolean()], "class_counts": "no_validation"}

    def _check_params(self) -> None:
        counts = getattr(self, "class_counts", None)
        if counts is not None:
            try:
                ok = len(counts) == 2 and all(math.isfinite(float(c)) and float(c) > 0 for c in counts)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ParameterError(
                    f"class_counts must be two positive numbers [negatives, positives], got {counts!r}"
                )

    # ------------------------------------------------------------------ the rule

    def _counts(self, n_public: int) -> tuple[float, float] | None:
        if self._task == "regression":
            return None
        counts = getattr(self, "class_counts", None) or self.__dict__.get("_released_counts")
        if counts is None:
            return (n_public / 2.0, n_public / 2.0)
        return (float(counts[0]), float(counts[1]))

    def plan(self, n_public: int, n_features: int | None = None, dense: bool | None = None) -> LearnerPlan:
        """The rule's learner for a public count, width (unknown before the data is read: planned as
        wide, :data:`UNKNOWN_WIDTH`; every learner's charge meets the same (epsilon, delta)) and table flag
        (default ``dense``, else False)."""
        table = bool(self.dense if dense is None else dense)
        d = n_features or UNKNOWN_WIDTH
        counts = self._counts(n_public)
        noisy = getattr(self, "class_counts", None) is not None or self.__dict__.get("_released_counts") is not None
        scale = 1.0 / float(self.count_epsilon) if noisy else 0.0  # the released counts' Laplace scale
        return plan_default(
            self._task, d, float(self.epsilon), float(self.delta), counts, n_public, table, count_scale=scale
        )

    def chosen(self, n_public: int, n_features: int | None = None, dense: bool | None = None) -> PrivateEstimator:
        """The estimator the rule runs (cached while the public values stay: its calibration is kept)."""
        plan = self.plan(n_public, n_features, dense)
        key = (plan.learner, repr(sorted(plan.params.items())), n_public, repr(sorted(self.get_params().items())))
        cache = self.__dict__.setdefault("_learner_cache", {})
        if key not in cache:
            cache.clear()
            common: dict[str, Any] = {"random_state": self.random_state}
            if self._task == "regression":
                common["y_bound"] = self.y_bound
            else:
                common["classes"] = self.classes
            if plan.learner not in ("adassp", "screened-centroid"):
                common.update(n_records=n_public, count_epsilon=self.count_epsilon)
            est = build_default(plan, float(self.epsilon), float(self.delta), self._counts(n_public), **common)
            cache[key] = (plan, est.inner if isinstance(est, ThresholdedClassifier) else est)
        return cache[key][1]

    # ------------------------------------------------------------------ charges

    def _steps(self, n_public: int) -> tuple[float, int, float]:
        inner = self.chosen(n_public)
        if not isinstance(inner, GradientModel):
            raise ParameterError(f"auto runs {inner.mechanism} here: it has no DP-SGD steps")
        return inner._steps(n_public)

    def _charge(self, n_public: int | None, n_features: int | None, noise_scale: float = 1.0) -> Charge:
        """The chosen learner's charge (the count's own release aside); auto is no candidate of the
        private search (``noise_scale`` other than 1 is refused: its learner is chosen by a rule)."""
        if noise_scale != 1.0:
            raise ParameterError("auto is not a candidate of the private search: its learner is chosen by a rule")
        assert n_public is not None  # counted
        inner = self.chosen(n_public, n_features, self.__dict__.get("_dense_input"))
        charge = inner.privacy_charge(n_public, n_features)
        learner = self.plan(n_public, n_features, self.__dict__.get("_dense_input")).learner
        return Charge(charge.loss, f"{self.mechanism}/{self._loss}", {**charge.details, "learner": learner})

    # ------------------------------------------------------------------ the fit

    def map_records(self, X: Any, y: np.ndarray) -> tuple[Any, np.ndarray]:
        return X, np.asarray(y, dtype=np.float64)  # the chosen learner maps them (release_on)

    def _fit_release(self, X: Any, y: np.ndarray, ledger: Ledger | None, key: str | None, *args: Any) -> None:
        self._dense_input = bool(self.dense) if self.dense is not None else not sp.issparse(X)
        self._labels = y
        self._released_counts: tuple[float, float] | None = None
        try:
            super()._fit_release(X, y, ledger, key, *args)
        finally:
            del self._labels

    def _public_count(
        self, n_rows: int, ledger: Ledger | None, key: str, rng: np.random.Generator, model: ModelPlan | None = None
    ) -> int | None:
        """A classifier with no public count releases its noisy class counts (module docstring)."""
        if self._task == "regression" or self.n_records is not None or self.class_counts is not None:
            if self.n_records is None and self.class_counts is not None:
                return max(1, int(round(sum(self.class_counts))))
            return super()._public_count(n_rows, ledger, key, rng, model)
        epsilon, labels = float(self.count_epsilon), self._labels

        def compute() -> list[float]:
            return list(noisy_class_counts(labels, epsilon, rng))  # the screened centroid's histogram (its law tested)

        def public(counts: Any) -> int:
            if not isinstance(counts, list):  # a plain count recorded under this key before: balanced
                return max(1, int(counts))
            self._released_counts = (float(counts[0]), float(counts[1]))  # the plan of the model reads them
            return max(1, int(round(sum(counts))))

        counted = None if model is None else model.after(public)
        try:
            return public(self._release_count(ledger, key, compute, of="training records by class", model=counted))
        except BaseException:
            self._released_counts = None  # a draw the ledger did not record never stays
            raise

    def release_counts(self, y: Any, accountant: Any, dataset: str, key: str) -> tuple[int, tuple[float, float] | None]:
        """Release now the counts a fit would release first (same key, same charge, same record), and keep
        them as public parameters (``n_records``, ``class_counts``) so the fit releases nothing more: a
        front end can show the pre-flight estimate (``dpdist.preflight``) from them before the model is
        charged. Returns (n~, the noisy class counts or None). ``y``: the labels as the fit would take them.
        The plan (counts and model) is checked, not held: a release charged between this and the fit can
        leave the model refused (a fit releasing its own counts charges both as one plan)."""
        self.check_params()
        coded, _ = self._targets(np.asarray(y), accountant)
        rng = check_random_state(self.random_state)
        self._labels = coded
        self._released_counts = None
        try:
            n = self._public_count(coded.size, (accountant, dataset), key, rng)
        finally:
            del self._labels
        assert n is not None
        counts = self.__dict__.get("_released_counts")
        self.set_params(n_records=n)
        if counts is not None:
            self.set_params(class_counts=list(counts))
        return n, counts

    def release_on(self, X: Any, y: np.ndarray, run: ReleaseRun) -> dict[str, Any]:
        n_public, charge = run.count(), run.charge
        dense = self.__dict__.get("_dense_input")
        plan = self.plan(n_public, int(X.shape[1]), dense)
        if plan.learner != charge.details["learner"]:  # the charge and the fit name the same learner (public values)
            raise RuntimeError(f"auto: charged {charge.details['learner']}, about to run {plan.learner}")
        inner = self.chosen(n_public, int(X.shape[1]), dense)
        Xi, yi = inner.map_records(X, y)
        out = inner.release_on(Xi, yi, run)
        if plan.learner == "dp-sgd+threshold":  # the threshold at the noisy prior (post-processing)
            neg, pos = self._counts(n_public)  # type: ignore[misc]
            out["threshold"] = math.log(pos / neg)
            out["intercept"] = float(out["intercept"]) - out["threshold"]
        counts = self._counts(n_public) if self.__dict__.get("_released_counts") else None
        return {
            **out,
            "method": self.mechanism,
            "learner": plan.learner,
            **({"class_counts": list(counts)} if counts else {}),
        }


_AUTO_DOC = """
    Parameters
    ----------
    epsilon, delta : the model's budget ((epsilon, delta)-DP; the count's release aside).
    n_records : a public count of the records (else the counts are released first at ``count_epsilon``).
    count_epsilon : the epsilon of that release.
    dense : whether the rows are a dense table (the small-wide-table rule); None: a dense array is one.
    random_state : None (OS entropy) or a seed (experiments only).
"""


@dataclass(**PARAMETERS)
class AutoClassifier(GradientClassifierMixin, _Auto):
    __doc__ = (
        "Private binary classification by the default learner (dpdist.gradient_models.default_learner's rule).\n"
        + _AUTO_DOC
        + "    class_counts : public noisy class counts [negatives, positives], released before (or None).\n"
        "    classes : the two labels, public (default: those in y).\n"
    )
    _task = "binary"
    class_counts: Any = None


@dataclass(**PARAMETERS)
class AutoRegressor(GradientRegressorMixin, _Auto):
    __doc__ = (
        "Private least squares by the default learner (dpdist.gradient_models.default_learner's rule: AdaSSP).\n"
        + _AUTO_DOC
        + "    y_bound : the public bound on |y|.\n"
    )
    _task = "regression"
    class_counts = None
