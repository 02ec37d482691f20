"""The default learner's public rule, the estimators it builds, and the thresholded classifier's two charges."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpdist.exceptions import ParameterError
from dpdist.gradient_models import DPSGDClassifier, SelectTrainClassifier
from dpdist.gradient_models.default_learner import ThresholdedClassifier, build_default, plan_default
from dpdist.privacy.accountant import Accountant
from dpdist.statistic_models.adassp import AdaSSPRegressor
from dpdist.statistic_models.noisy_centroid import ScreenedCentroidClassifier


@pytest.mark.parametrize(
    "args, learner",
    [
        (("regression", 280, 1.0, 1e-6, None, 40_000, True), "adassp"),
        (("binary", 7129, 3.0, 1e-6, (33.0, 17.0), None, True), "screened-centroid"),
        (("binary", 7129, 3.0, 1e-6, (33.0, 17.0), None, False), "dp-sgd"),  # sparse rows: not a table
        (("binary", 47236, 1.0, 1e-6, (82_000.0, 4_300.0), None, False), "dp-sgd+threshold"),
        (("binary", 47236, 1.0, 1e-6, (80_000.0, 80_000.0), None, False), "select-train"),
        (("binary", 47236, 0.1, 1e-6, (80_000.0, 80_000.0), None, False), "select-train"),
        (("binary", 62060, 1.0, 1e-6, (1600.0, 1600.0), None, False), "dp-sgd"),
        (("binary", 47236, 1.0, 1e-6, (80.0, 80.0), None, False), "dp-sgd"),
        # 200 balanced rows' counts at count epsilon 0.01 (scale 100) can read 30 / 170: not a sign of imbalance
        (("binary", 47236, 1.0, 1e-6, (30.0, 170.0), None, False, 0.0), "dp-sgd+threshold"),
        (("binary", 47236, 1.0, 1e-6, (30.0, 170.0), None, False, 100.0), "dp-sgd"),
        (("binary", 47236, 1.0, 1e-6, (114_000.0, 6_000.0), None, False, 100.0), "dp-sgd+threshold"),
    ],
)
def test_the_rule_reads_public_values_only(args, learner):
    plan = plan_default(*args)
    assert plan.learner == learner and plan.reason
    if learner == "select-train":
        assert plan.params["selection_share"] == (0.5 if args[2] < 0.3 else 0.3)


def test_the_plans_build_their_estimators_and_wide_regressions_screen():
    assert isinstance(build_default(plan_default("regression", 280, 1.0, 1e-6), 1.0, 1e-6), AdaSSPRegressor)
    wide = plan_default("regression", 50_000, 1.0, 1e-6)
    assert wide.params["k"] == 500
    st = build_default(plan_default("binary", 47236, 1.0, 1e-6, (9e4, 9e4)), 1.0, 1e-6, n_records=180_000)
    assert isinstance(st, SelectTrainClassifier) and st.selection_share == 0.3
    c = build_default(plan_default("binary", 7129, 3.0, 1e-6, (33.0, 17.0), dense=True), 3.0, 1e-6, classes=[0, 1])
    assert isinstance(c, ScreenedCentroidClassifier) and c.k == 1
    with pytest.raises(ParameterError, match="class counts"):
        plan_default("binary", 100, 1.0, 1e-6)


def test_the_thresholded_classifier_charges_its_two_releases_and_stops_predicting_one_class(tmp_path):
    rng = np.random.default_rng(0)
    n, d = 6000, 40
    X = sp.random(n, d, density=0.2, random_state=1, format="csr")
    X.data = rng.uniform(0.2, 1.0, X.nnz)
    score = np.asarray(X[:, :3].sum(axis=1)).ravel()
    y = np.where(score > np.quantile(score, 0.93), 1.0, -1.0)  # 7% positives
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 3.0, 1e-5)
    inner = DPSGDClassifier(epsilon=2.0, epochs=10, batch_size=500, lr=5.0, n_records=n, classes=[-1.0, 1.0])
    model = ThresholdedClassifier(inner, 0.1, random_state=0).fit(X, y, acc, "d", "m")
    assert inner.epsilon == pytest.approx(1.8) and model.mechanism.epsilon == pytest.approx(0.2)
    keys = [r.key for r in acc.history("d")]
    assert "m" in keys and "m/threshold" in keys
    pred = model.predict(X)
    assert 0 < np.mean(pred > 0) < 1  # not one class
    balanced = 0.5 * (np.mean(pred[y > 0] > 0) + np.mean(pred[y < 0] < 0))
    assert balanced > 0.75
    with pytest.raises(ParameterError):
        ThresholdedClassifier(DPSGDClassifier(), 1.0)
    with pytest.raises(ParameterError, match="class_counts"):
        ThresholdedClassifier(DPSGDClassifier(), 0.0)


def test_the_default_threshold_of_imbalanced_labels_is_the_noisy_prior_and_charges_nothing_more(tmp_path):
    rng = np.random.default_rng(1)
    X = sp.random(4000, 30, density=0.3, random_state=2, format="csr")
    y = np.where(rng.random(4000) < 0.08, 1.0, -1.0)
    counts = (3700.0, 300.0)  # released before (public)
    plan = plan_default("binary", 30, 2.0, 1e-6, counts)
    model = build_default(plan, 2.0, 1e-6, counts, n_records=4000, classes=[-1.0, 1.0])
    assert isinstance(model, ThresholdedClassifier) and model.mechanism is None and model.inner.epsilon == 2.0
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 3.0, 1e-5)
    model.fit(X, y, acc, "d", "m")
    assert model.threshold_ == pytest.approx(np.log(300.0 / 3700.0))
    assert [r.key for r in acc.history("d")] == ["m"]
