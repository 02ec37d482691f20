"""The default learner by kind of data: a public rule, and the estimators it builds.

``plan_default`` picks the learner and its configuration from public values only -- the task, the
declared width d, whether the data are a dense table or sparse rows (the store's format), the
budget (epsilon, delta) and the released noisy class counts (their sum is the public count n~) --
so the choice is post-processing of what was released and costs nothing. The rule follows what
``benchmarks/utility.py`` measured (its dated results file under ``benchmarks/results/utility/``):

* **regression** -> AdaSSP (``dpdist.statistic_models.adassp``) on the ``"sqrt-l2"`` rows: BlogFeedback at
  epsilon = 1 reached R^2 0.33 where DP-SGD reached 0.09 and DP-GD diverged. Wider than
  ``ADASSP_MAX_WIDTH`` columns (a d x d Gram), a Gaussian screening of ``ADASSP_SCREEN`` columns first
  (not measured on wide regression data: stated as such);
* **binary, dense, p >> n** (d >= ``WIDE_RATIO`` n~ and n~ <= ``SMALL_N``) -> the screened nearest
  centroid (``dpdist.statistic_models.noisy_centroid``) on per-sample ranks, one column: golub and chowdary;
* **binary, imbalanced** (the smaller noisy class share below ``IMBALANCED``) -> DP-SGD on every
  column at the whole budget, its decision threshold moved to logit(n~+ / n~), the noisy class prior
  (post-processing of the released class counts: free): its screening-free AUC beat select-then-train's
  on the 5%-positive set, and the shift keeps it from predicting the majority class everywhere. The
  private balanced threshold (``dpdist.solvers.threshold``, ``threshold_share`` > 0) is the
  alternative for a model whose margins are not calibrated;
* **binary, otherwise** -> select-then-train when n~ >= ``SCREEN_MIN_N``, d > its k (``SELECT_K``) and its
  screening's noise sigma <= ``SCREEN_NOISE_LIMIT`` n~ (selection share 0.5 below epsilon ``SMALL_EPSILON``, else 0.3),
  else DP-SGD on every column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge
from dpdist.solvers._release import release_once
from dpdist.solvers.threshold import BalancedThreshold
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_delta, check_epsilon

__all__ = [
    "ADASSP_MAX_WIDTH",
    "LearnerPlan",
    "ThresholdedClassifier",
    "build_default",
    "plan_default",
]

ADASSP_MAX_WIDTH = 2000
ADASSP_SCREEN = 500
WIDE_RATIO, SMALL_N = 10.0, 1000
IMBALANCED = 0.2
THRESHOLD_SHARE = 0.05
SCREEN_MIN_N, SCREEN_NOISE_LIMIT = 20_000, 1e-3
SMALL_EPSILON = 0.3
SELECT_K = 100  # select-then-train's default k: it needs more columns than that to screen


@dataclass(frozen=True)
class LearnerPlan:
    """A learner's name, its parameters (beside the budget, the count and the classes), and why."""

    learner: str
    params: dict[str, Any] = field(default_factory=dict)
    reason: str = ""


def _screening_sigma(epsilon: float, delta: float, share: float, n_public: int) -> float:
    """The noise sigma of select-then-train's screening at these public values."""
    from dpdist.gradient_models.select_train import SelectTrainClassifier

    st = SelectTrainClassifier(epsilon=epsilon, delta=delta, selection_share=share)
    return 1.0 / math.sqrt(2.0 * st.privacy_charge(n_public).details["screening_rho"])


def plan_default(
    task: str,
    n_features: int,
    epsilon: float,
    delta: float,
    class_counts: tuple[float, float] | None = None,
    n_public: int | None = None,
    dense: bool = False,
    count_scale: float = 0.0,
) -> LearnerPlan:
    """The default learner for these public values (module docstring). A classification needs the
    noisy ``class_counts`` (negatives, positives); a regression the public count ``n_public`` or none.
    ``count_scale``: the Laplace scale of each released class count (1 / its epsilon; 0 for exact public
    counts): labels are taken as imbalanced only when the smaller class's share stays below
    ``IMBALANCED`` with its count raised by two scales (the noise of a small set's counts alone would
    otherwise move its threshold off a balanced prior)."""
    d = check_count(n_features, "n_features")
    eps, delta = check_epsilon(epsilon), check_delta(delta, allow_zero=False)
    if task == "regression":
        if d <= ADASSP_MAX_WIDTH:
            return LearnerPlan("adassp", {"row_norm": "sqrt-l2"}, f"regression, d = {d} <= {ADASSP_MAX_WIDTH}")
        return LearnerPlan(
            "adassp",
            {"row_norm": "sqrt-l2", "k": ADASSP_SCREEN},
            f"regression, d = {d} > {ADASSP_MAX_WIDTH}: screen {ADASSP_SCREEN} columns first (not measured)",
        )
    if class_counts is None:
        raise ParameterError("a classification's default needs the noisy class counts (negatives, positives)")
    neg, pos = (max(1.0, float(c)) for c in class_counts)
    n = int(round(neg + pos))
    share = (min(neg, pos) + 2.0 * float(count_scale)) / (neg + pos)
    if dense and d >= WIDE_RATIO * n and n <= SMALL_N:
        return LearnerPlan("screened-centroid", {"k": 1}, f"dense, d = {d} >= {WIDE_RATIO:g} n~ = {n}")
    if share < IMBALANCED:
        return LearnerPlan(
            "dp-sgd+threshold",
            {"threshold_share": 0.0},
            f"imbalanced: the smaller class is {min(neg, pos) / (neg + pos):.1%} of n~ (< {IMBALANCED:.0%} by two "
            "noise scales); threshold at the noisy prior",
        )
    sel = 0.5 if eps < SMALL_EPSILON else 0.3
    if n >= SCREEN_MIN_N and d > SELECT_K:
        sigma = _screening_sigma(eps, delta, sel, n)
        if sigma <= SCREEN_NOISE_LIMIT * n:
            return LearnerPlan(
                "select-train",
                {"selection_share": sel},
                f"n~ = {n} >= {SCREEN_MIN_N}, screening sigma {sigma:.3g} <= {SCREEN_NOISE_LIMIT:g} n~",
            )
    return LearnerPlan("dp-sgd", {}, f"n~ = {n}: the screening would not see the signal; DP-SGD on every column")


class ThresholdedClassifier:
    """A gradient classifier's release with its decision threshold moved off the margin 0.

    ``threshold_share`` > 0: ``fit`` spends ``(1 - threshold_share) epsilon`` on the inner learner's
    release and ``threshold_share epsilon`` on a private balanced threshold (``BalancedThreshold``, a
    second release under ``<key>/threshold``). ``threshold_share`` 0: the threshold is logit(n~+ / (n~- +
    n~+)) from the public noisy ``class_counts`` (released before; this is post-processing) and the inner
    learner keeps the whole budget. ``predict`` says positive where the margin exceeds the threshold.
    """

    def __init__(
        self,
        inner: Any,
        threshold_share: float = THRESHOLD_SHARE,
        random_state: RandomState = None,
        class_counts: tuple[float, float] | None = None,
    ):
        share = float(threshold_share)
        if not 0.0 <= share < 1.0 or (share == 0.0 and class_counts is None):
            raise ParameterError(
                f"threshold_share must lie in [0, 1), and 0 needs the public class_counts, got {threshold_share!r}"
            )
        self.inner, self.threshold_share, self.random_state = inner, share, random_state
        self.class_counts = class_counts
        self.epsilon = float(inner.get_params()["epsilon"])
        self.mechanism = None
        if share > 0.0:
            inner.set_params(epsilon=self.epsilon * (1.0 - share))
            self.mechanism = BalancedThreshold(self.epsilon * share)

    def threshold_charge(self) -> Charge | None:
        return None if self.mechanism is None else Charge(self.mechanism.privacy_loss, "threshold/balanced")

    def fit(
        self, X: Any, y: Any, accountant: Accountant | None = None, dataset: str | None = None, key: str | None = None
    ) -> ThresholdedClassifier:
        self.inner.fit(X, y, accountant, dataset, key)
        self.classes_ = self.inner.classes_
        self.coef_, self.intercept_ = self.inner.coef_, self.inner.intercept_
        if self.mechanism is None:
            neg, pos = (max(1.0, float(c)) for c in self.class_counts)  # type: ignore[union-attr]
            self.threshold_ = math.log(pos / neg)  # logit of the noisy prior pos / (neg + pos)
            return self
        mech = self.mechanism
        margins = self.inner.decision_function(X)
        signs = np.where(np.asarray(y) == self.inner.classes_[1], 1.0, -1.0)
        rng = check_random_state(self.random_state)
        out, _ = release_once(
            self.inner,
            Charge(mech.privacy_loss, "threshold/balanced"),
            lambda: {"threshold": mech.release(margins, signs, rng)},
            {"of": key or "model", "epsilon": mech.epsilon, "bins": mech.bins},
            accountant,
            dataset,
            None if key is None else f"{key}/threshold",
        )
        self.threshold_ = float(out["threshold"])
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        return np.asarray(self.inner.decision_function(X)) - self.threshold_

    def predict(self, X: Any) -> np.ndarray:
        return np.asarray(self.classes_[(self.decision_function(X) > 0).astype(np.int64)])


def build_default(
    plan: LearnerPlan, epsilon: float, delta: float, class_counts: tuple[float, float] | None = None, **common: Any
) -> Any:
    """The estimator of ``plan`` at the budget; ``class_counts``: the noisy class counts the plan was made
    from (a threshold at the noisy prior needs them); ``common``: n_records, classes, random_state (as the
    learner takes them)."""
    counts = class_counts
    if plan.learner == "adassp":
        from dpdist.statistic_models.adassp import AdaSSPRegressor

        return AdaSSPRegressor(
            epsilon=epsilon,
            delta=delta,
            y_bound=common.get("y_bound", 1.0),
            random_state=common.get("random_state"),
            **plan.params,
        )
    if plan.learner == "screened-centroid":
        from dpdist.statistic_models.noisy_centroid import ScreenedCentroidClassifier

        return ScreenedCentroidClassifier(
            epsilon=epsilon,
            delta=delta,
            classes=common.get("classes"),
            random_state=common.get("random_state"),
            **plan.params,
        )
    from dpdist.gradient_models.select_train import SelectTrainClassifier
    from dpdist.gradient_models.sgd import DPSGDClassifier

    if plan.learner == "select-train":
        return SelectTrainClassifier(epsilon=epsilon, delta=delta, **common, **plan.params)
    if plan.learner == "dp-sgd":
        return DPSGDClassifier(epsilon=epsilon, delta=delta, **common)
    if plan.learner == "dp-sgd+threshold":
        return ThresholdedClassifier(
            DPSGDClassifier(epsilon=epsilon, delta=delta, **common),
            plan.params["threshold_share"],
            common.get("random_state"),
            counts,
        )
    raise ParameterError(f"unknown learner {plan.learner!r}")
