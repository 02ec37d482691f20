"""Pre-flight: what a plan can reach, estimated before anything is charged, from public values only.

``estimate`` simulates the default plan (``dpdist.gradient_models.default_learner``) on a *public* synthetic set of
the declared shape -- the noisy count n~ of rows (its class shares from the noisy class counts), the
declared width d, dense or sparse -- whose labels follow a sparse linear model with a clear signal:
it trains the learner there on n~ rows at the same budget (no ledger: the set is public) and scores
it on further public rows of the same law, beside a non-private fit on the same rows. What it predicts is the plan's
accuracy (R^2) on data whose signal is as clean as the synthetic one's: real data are usually
harder, so the estimate is an upper guide, and a plan whose estimate is near chance there is near
chance on the user's data too. That is the warning (``Estimate.near_chance``).

The synthetic sets: sparse rows follow the main job's RCV1 profile at the declared shape
(``dpdist.data.synthetic``; the positives subsampled to the declared class share); dense tables have
N(0, 1) entries; binary: 1% of the columns (at least 5) informative, the two classes' means two
standard deviations apart on each (the strongly differentially expressed genes of a two-class
microarray); regression: 10
informative columns, y = X w + noise at a signal-to-noise ratio 1, scaled so |y| mostly stays
inside the y bound. Nothing in it reads the user's data.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dpdist.exceptions import UnaccountedReleaseWarning
from dpdist.gradient_models.default_learner import LearnerPlan, build_default, plan_default
from dpdist.privacy.guard import unaccounted

__all__ = ["Estimate", "estimate", "synthetic_like"]

MAX_SIMULATED_ROWS = 200_000
NEAR_CHANCE = 0.05  # accuracy within 0.05 of chance (balanced accuracy on imbalanced labels), or R^2 below 0.05


@dataclass(frozen=True)
class Estimate:
    """The simulated private score, the non-private ceiling on the same synthetic split, the chance
    level, the metric's name, the plan, and whether the private score is near chance."""

    private: float
    ceiling: float
    chance: float
    metric: str
    plan: LearnerPlan
    near_chance: bool

    def message(self) -> str:
        head = (
            f"pre-flight: {self.plan.learner} should reach about {self.metric} {self.private:.2f} on data with a "
            f"clean linear signal of this shape (non-private {self.ceiling:.2f}, chance {self.chance:.2f})"
        )
        if self.near_chance:
            return head + "; WARNING: that is near chance -- this budget and count cannot give a useful model"
        return head


def synthetic_like(
    task: str, n: int, d: int, dense: bool, positive_share: float, rng: np.random.Generator, y_bound: float = 1.0
) -> tuple[Any, np.ndarray]:
    """A public synthetic (X, y) of the declared shape (module docstring)."""
    n = max(10, int(n))
    if not dense and task != "regression":
        from dpdist.data.synthetic import make_synthetic

        X, y = make_synthetic("rcv1", random_state=rng, n=int(2.1 * n) + 100, d=d).materialize()
        X, y = sp.csr_matrix(X), np.asarray(y, dtype=np.float64)
        neg, pos = np.flatnonzero(y < 0), np.flatnonzero(y > 0)
        n_pos = min(pos.size, max(2, int(round(n * min(positive_share, 0.5)))))
        rows = np.concatenate([rng.choice(neg, min(neg.size, n - n_pos), replace=False), rng.choice(pos, n_pos, False)])
        return X[np.sort(rows)], y[np.sort(rows)]
    X = rng.standard_normal((n, d))
    if task == "regression":
        w = np.zeros(d)
        informative = rng.choice(d, min(10, d), replace=False)
        w[informative] = rng.choice([-1.5, 1.5], informative.size)
        margin = X @ w
        y = margin + rng.standard_normal(n) * margin.std()
        return X, y * (y_bound / (3.0 * y.std()))
    y = np.where(rng.random(n) < positive_share, 1.0, -1.0)
    y[:2] = (1.0, -1.0)  # both classes in every draw
    informative = rng.choice(d, max(5, d // 100), replace=False)
    X[:, informative] += y[:, None] * rng.choice([-1.0, 1.0], informative.size)  # classes 2 sd apart
    return X, y


def estimate(
    task: str,
    n_public: int,
    n_features: int,
    epsilon: float,
    delta: float,
    class_counts: tuple[float, float] | None = None,
    dense: bool = False,
    y_bound: float = 1.0,
    random_state: int | None = 0,
    count_scale: float = 0.0,
) -> Estimate:
    """The pre-flight estimate of the default plan at these public values (module docstring)."""
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.metrics import balanced_accuracy_score, r2_score

    rng = np.random.default_rng(random_state)
    plan = plan_default(task, n_features, epsilon, delta, class_counts, n_public, dense, count_scale)
    share = 0.5 if class_counts is None else min(max(min(class_counts) / max(sum(class_counts), 1.0), 0.02), 0.5)
    n_train = min(int(n_public), MAX_SIMULATED_ROWS)
    n_test = min(max(2000, n_train // 4), 50_000)
    X, y = synthetic_like(task, n_train + n_test, n_features, dense, share, rng, y_bound)
    Xtr, ytr, Xte, yte = X[:n_train], y[:n_train], X[n_train:], y[n_train:]
    if task == "regression":
        model = build_default(plan, epsilon, delta, y_bound=y_bound, random_state=rng)
        ceiling_model: Any = Ridge(alpha=1.0)
    else:
        sim_counts = (float(np.sum(ytr < 0)), float(np.sum(ytr > 0)))  # public: the synthetic set's own
        model = build_default(
            plan, epsilon, delta, sim_counts, n_records=ytr.size, classes=[-1.0, 1.0], random_state=rng
        )
        ceiling_model = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced")
    with unaccounted(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UnaccountedReleaseWarning)  # the set is public: nothing to charge
        model.fit(Xtr, ytr)
    ceiling_model.fit(Xtr, ytr)
    if task == "regression":
        private, ceiling, chance, metric = (
            float(r2_score(yte, model.predict(Xte))),
            float(r2_score(yte, ceiling_model.predict(Xte))),
            0.0,
            "R^2",
        )
    else:
        metric = "balanced accuracy" if share < 0.4 else "accuracy"

        def score(m: Any) -> float:
            pred = m.predict(Xte)
            if metric == "accuracy":
                return float(np.mean(pred == yte))
            return float(balanced_accuracy_score(yte > 0, np.asarray(pred) > 0))

        private, ceiling = score(model), score(ceiling_model)
        chance = 0.5 if metric == "balanced accuracy" else max(share, 1.0 - share)
    near = (private - chance) < NEAR_CHANCE or not math.isfinite(private)
    return Estimate(private, ceiling, chance, metric, plan, bool(near))
