"""The screened nearest-centroid classifier: the exact law of each of its three steps (a mis-calibrated
step fails), an empirical DP audit of the whole release on neighbouring datasets, the charge, the fit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from dp_audit import chisquare_against, epsilon_lower_bound
from scipy import stats

from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.selection.baselines import PeelingTopK
from dpdist.statistic_models.noisy_centroid import (
    CentroidPlan,
    ScreenedCentroidClassifier,
    balanced_scores,
    noisy_class_counts,
    noisy_class_sums,
)

ALPHA = 1e-3
EDGES = np.linspace(-4.0, 4.0, 33)


def _p_against(draws: np.ndarray, cdf) -> float:  # noqa: ANN001
    counts = np.bincount(np.searchsorted(EDGES, draws), minlength=EDGES.size + 1)
    return chisquare_against(counts, np.diff([0.0, *cdf(EDGES), 1.0]))


def test_the_counts_are_laplace_and_a_doubled_epsilon_fails():
    y = np.array([1.0] * 7 + [-1.0] * 5)
    for eps, ok in ((0.8, True), (1.6, False)):
        rng = np.random.default_rng(1)
        draws = np.array([noisy_class_counts(y, eps, rng) for _ in range(20_000)])
        for col, exact in ((0, 5.0), (1, 7.0)):  # the floor at 1 is far below these bins
            p = _p_against(draws[:, col] - exact, lambda e: stats.laplace.cdf(e, scale=1 / 0.8))
            assert (p > ALPHA) if ok else (p < ALPHA), (eps, col, p)


def test_the_screening_is_the_exponential_mechanism_on_balanced_scores_and_a_doubled_epsilon_fails():
    X = np.array([[1.0, -0.5, 0.2], [0.9, 0.5, -0.2], [-1.0, 0.1, 0.3], [-0.8, -0.1, 0.3]])
    y = np.array([1.0, 1.0, -1.0, -1.0])
    counts = (2.0, 3.0)  # public weights: w+ = 2/3, w- = -1
    s = balanced_scores(X, y, counts)
    np.testing.assert_allclose(s, np.abs(X.T @ np.array([2 / 3, 2 / 3, -1.0, -1.0])))
    eps = 2.0
    probs = np.exp(eps * s / 2.0)  # non-monotone scores of sensitivity 1: exp(eps s / 2)
    probs /= probs.sum()
    for e, ok in ((eps, True), (2 * eps, False)):
        mech = PeelingTopK(1, e, random_state=np.random.default_rng(2))
        draws = np.array([mech.select(s)[0] for _ in range(30_000)])
        p = chisquare_against(np.bincount(draws, minlength=3), probs)
        assert (p > ALPHA) if ok else (p < ALPHA), (e, p)


def test_the_class_sums_are_gaussian_and_a_halved_sigma_fails():
    X = np.array([[0.5, -1.0], [1.0, 0.25], [-0.5, 0.5]])
    y = np.array([1.0, -1.0, 1.0])
    for sigma, ok in ((1.3, True), (0.65, False)):
        rng = np.random.default_rng(3)
        draws = [noisy_class_sums(X, y, sigma, rng) for _ in range(15_000)]
        for side, exact in ((0, X[1]), (1, X[0] + X[2])):
            for j in range(2):
                z = (np.array([d[side][j] for d in draws]) - exact[j]) / 1.3
                p = _p_against(z, stats.norm.cdf)
                assert (p > ALPHA / 4) if ok else (p < ALPHA), (sigma, side, j, p)


def _release(est: ScreenedCentroidClassifier, plan: CentroidPlan, X, y, rng) -> tuple:  # noqa: ANN001
    """The whole release under ``plan``, discretised: the chosen column, the sign of the positive class's
    noisy sum and the rounded noisy count of the positive class, capped."""
    counts = noisy_class_counts(y, plan.count_epsilon, rng)
    cols = PeelingTopK(plan.k, plan.select_epsilon, random_state=rng).select(balanced_scores(X, y, counts))
    _, pos = noisy_class_sums(X[:, cols], y, plan.sigma, rng)
    return int(cols[0]), int(np.searchsorted([-0.5 * plan.sigma, 0.5 * plan.sigma], pos[0])), min(int(counts[1]), 4)


@pytest.mark.slow
def test_the_whole_release_stays_within_its_charge_on_neighbours_and_a_twentieth_of_the_noise_does_not():
    """D: two records; D2: D plus a positive record at +1 on the first column (it moves the positive
    count by 1, the first column's score, and the positive class's sum by 1)."""
    X = np.array([[0.0, 0.0], [0.0, 0.0]])
    y = np.array([1.0, -1.0])
    X2, y2 = np.vstack([X, [1.0, 0.0]]), np.append(y, 1.0)
    est = ScreenedCentroidClassifier(epsilon=1.5, delta=1e-6, k=1, count_share=0.3, select_share=0.4)
    plan = est.plan()
    charged = est.privacy_charge().epsilon
    assert charged <= 1.5 + 1e-9
    for factor, ok in ((1.0, True), (20.0, False)):
        mis = CentroidPlan(plan.count_epsilon * factor, plan.select_epsilon * factor, 1, plan.sigma / factor)
        rng = np.random.default_rng(7)
        a = [_release(est, mis, X, y, rng) for _ in range(40_000)]
        b = [_release(est, mis, X2, y2, rng) for _ in range(40_000)]
        bound = epsilon_lower_bound(a, b, 1e-4)
        assert (bound <= charged) if ok else (bound > charged), (factor, bound, charged)


def test_it_learns_a_wide_table_with_few_rows_and_is_charged_once(tmp_path):
    rng = np.random.default_rng(4)
    n, p = 80, 2000
    y = np.where(rng.random(n) < 0.35, "tumour", "normal")
    X = rng.lognormal(size=(n, p))
    X[y == "tumour", :5] *= 30.0  # five genes up in the minority class
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 5.0, 1e-5)
    est = ScreenedCentroidClassifier(epsilon=4.0, k=2, classes=["normal", "tumour"], random_state=0)
    est.fit(X[:60], y[:60], acc, "d", key="m")
    assert set(np.flatnonzero(est.coef_)) <= set(range(5))  # with these margins, true genes are screened
    assert est.score(X[60:], y[60:]) >= 0.8 and set(est.predict(X[60:])) <= {"normal", "tumour"}
    assert est.release_["epsilon"] == pytest.approx(est.privacy_charge().epsilon)
    assert est.privacy_charge().epsilon <= 4.0 + 1e-9
    spent = acc.status("d").epsilon_spent
    again = ScreenedCentroidClassifier(epsilon=4.0, k=2, classes=["normal", "tumour"])
    again.fit(X[:60], y[:60], acc, "d", "m")
    np.testing.assert_array_equal(again.coef_, est.coef_)
    assert acc.status("d").epsilon_spent == spent


def test_bad_input_is_refused_before_the_charge(tmp_path):
    X, y = np.ones((6, 4)), np.array([1, 1, 0, 0, 1, 0])
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 5.0, 1e-5)
    for params, data in (
        ({"classes": [0, 1], "k": 4}, (X, y)),
        ({"classes": [0, 1], "count_share": 0.5, "select_share": 0.5}, (X, y)),
        ({"classes": [0, 2]}, (X, y)),
        ({}, (X, y)),  # classes are public schema
        ({"classes": [0, 1], "row_norm": "l7"}, (X, y)),
    ):
        with pytest.raises(ParameterError):
            ScreenedCentroidClassifier(**params).fit(*data, acc, "d")
    assert acc.status("d").epsilon_spent == 0.0


@pytest.mark.parametrize("row_norm", ["l2", "rank"])
def test_sparse_rows_give_the_dense_rows_model(row_norm):
    """A store's rows come as CSR (``dpdist train``); the rank map reads every entry of a row, so sparse rows
    are made dense first (never a refusal inside the release, after its charge)."""
    rng = np.random.default_rng(5)
    X = rng.random((40, 30)) * (rng.random((40, 30)) < 0.3)
    y = np.where(np.arange(40) % 2 == 0, 1.0, -1.0)
    kw = {"epsilon": 2.0, "k": 2, "row_norm": row_norm, "classes": [-1.0, 1.0]}
    dense = ScreenedCentroidClassifier(random_state=1, **kw).fit(X, y)
    sparse = ScreenedCentroidClassifier(random_state=1, **kw).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(sparse.coef_, dense.coef_)
    np.testing.assert_allclose(sparse.decision_function(sp.csr_matrix(X)), dense.decision_function(X))
