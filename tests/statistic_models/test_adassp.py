"""AdaSSP: the exact law of its three releases, an empirical DP audit on neighbouring datasets, the
enforced bounds, the charge, and the fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from dp_audit import chisquare_against, epsilon_lower_bound
from scipy import stats

from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import PrivacyLoss
from dpdist.statistic_models.adassp import AdaSSPRegressor, SSPPlan, adassp_solve, bounded_records, noisy_statistics

ALPHA = 1e-3
EDGES = np.linspace(-3.0, 3.0, 25)  # bins of a standardised draw


def _binned_p(draws: np.ndarray) -> float:
    """p-value of standardised draws against N(0, 1) on EDGES."""
    counts = np.bincount(np.searchsorted(EDGES, draws), minlength=EDGES.size + 1)
    probs = np.diff([0.0, *stats.norm.cdf(EDGES), 1.0])
    return chisquare_against(counts, probs)


def test_the_three_releases_have_their_exact_law_and_a_halved_noise_fails():
    """Records of one feature and the intercept column (p = 2): lambda~ ~ N(lambda_min, s1^2), every
    entry of A~ on and above the diagonal ~ N(A_ij, s2^2) (A~ symmetric), b~ ~ N(b, s3^2 I)."""
    X = np.array([[0.3], [-1.0], [0.8], [0.5]])
    y = np.array([1.0, -2.0, 0.5, 3.0])
    Z, yc = bounded_records(X, y, None, 1.0, 2.0)
    A, b = Z.T @ Z, Z.T @ yc
    lam = np.linalg.eigvalsh(A)[0]
    plan = SSPPlan(0.7, 0.4, 1.1, 2.0)
    for factor, ok in ((1.0, True), (0.5, False)):
        mis = SSPPlan(plan.s1 * factor, plan.s2 * factor, plan.s3 * factor, 2.0)
        rng = np.random.default_rng(1)
        draws = [noisy_statistics(Z, yc, mis, rng) for _ in range(6000)]
        assert all(np.array_equal(d[1], d[1].T) for d in draws[:50])
        cells = {
            "lambda": (np.array([d[0] for d in draws]) - lam) / plan.s1,
            "A00": (np.array([d[1][0, 0] for d in draws]) - A[0, 0]) / plan.s2,
            "A01": (np.array([d[1][0, 1] for d in draws]) - A[0, 1]) / plan.s2,
            "A11": (np.array([d[1][1, 1] for d in draws]) - A[1, 1]) / plan.s2,
            "b0": (np.array([d[2][0] for d in draws]) - b[0]) / plan.s3,
            "b1": (np.array([d[2][1] for d in draws]) - b[1]) / plan.s3,
        }
        for name, z in cells.items():
            p = _binned_p(z)
            assert (p > ALPHA / len(cells)) if ok else (p < ALPHA), (factor, name, p)


def _privacy_loss_statistic(D, D2, plan: SSPPlan, rng, draws: int) -> tuple[list[int], list[int]]:
    """The three releases on D and on D2 = D plus one record, projected on the direction of the mean
    shift scaled by the noise (the likelihood-ratio statistic of the Gaussian shift: the most
    telling one-dimensional summary), standardised and binned."""
    out = []
    means = []
    for X, y in (D, D2):
        Z, yc = bounded_records(X, y, None, 0.0, plan.y_bound)
        A = Z.T @ Z
        means.append((np.linalg.eigvalsh(A)[0], A[0, 0], float((Z.T @ yc)[0])))
    shift = np.array(means[1]) - np.array(means[0])
    scales = np.array([plan.s1, plan.s2, plan.s3])
    direction = shift / scales**2
    norm = math.sqrt(float(np.sum((shift / scales) ** 2)))
    for X, y in (D, D2):
        Z, yc = bounded_records(X, y, None, 0.0, plan.y_bound)
        vals = []
        for _ in range(draws):
            lam, A, b = noisy_statistics(Z, yc, plan, rng)
            t = (np.array([lam, A[0, 0], b[0]]) - np.array(means[0])) @ direction / norm
            vals.append(int(np.searchsorted(EDGES, t)))
        out.append(vals)
    return out[0], out[1]


@pytest.mark.slow
def test_neighbouring_datasets_stay_within_the_charge_and_a_twentieth_of_the_noise_does_not():
    """D: one record at 0; D2: D plus the record of largest reach (x = 1, y = B): every release moves
    by its whole sensitivity. The audit's lower bound stays under the charged epsilon; at a twentieth of
    the noise it exceeds it."""
    B = 2.0
    D = (np.array([[0.0]]), np.array([0.0]))
    D2 = (np.array([[0.0], [1.0]]), np.array([0.0, B]))
    est = AdaSSPRegressor(
        epsilon=1.0, delta=1e-6, y_bound=B, row_norm=None, intercept_scaling=0.0, shares=(0.2, 0.5, 0.3)
    )
    charged = est.privacy_charge().epsilon
    assert charged <= 1.0 + 1e-9
    plan = est.plan()
    assert plan.rho == pytest.approx(est.privacy_charge().details["rho"], rel=1e-9)
    for factor, ok in ((1.0, True), (0.05, False)):
        mis = SSPPlan(plan.s1 * factor, plan.s2 * factor, plan.s3 * factor, B)
        a, b = _privacy_loss_statistic(D, D2, mis, np.random.default_rng(5), 30_000)
        bound = epsilon_lower_bound(a, b, 1e-4, range(EDGES.size + 1))
        assert (bound <= charged) if ok else (bound > charged), (factor, bound, charged)


def test_every_record_is_held_to_the_bounds_whatever_the_data():
    rng = np.random.default_rng(0)
    X = rng.normal(scale=1e6, size=(50, 4))
    X[3] = 0.0
    y = rng.normal(scale=100.0, size=50)
    for row_norm in (None, "l2", "sqrt-l2", "max"):
        for c in (0.0, 1.0, 3.0):
            Z, yc = bounded_records(X, y, row_norm, c, 1.5)
            assert np.all(np.linalg.norm(Z, axis=1) <= 1.0 + 1e-12) and np.all(np.abs(yc) <= 1.5)
    Zs, _ = bounded_records(sp.csr_matrix(X), y, "l2", 1.0, 1.5)
    np.testing.assert_allclose(Zs.toarray(), bounded_records(X, y, "l2", 1.0, 1.5)[0])


def test_the_ridge_follows_the_noise_and_a_large_budget_gives_least_squares():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(4000, 5))
    y = X @ np.array([1.0, -0.5, 0.0, 0.3, 0.2]) * 0.2 + 0.1 + rng.normal(scale=0.05, size=4000)
    est = AdaSSPRegressor(epsilon=1e4, y_bound=3.0, row_norm=None, random_state=0).fit(X, y)
    ref = AdaSSPRegressor(epsilon=1e4, y_bound=3.0, row_norm=None)
    Z, yc = bounded_records(X, y, None, 1.0, 3.0)
    theta = np.linalg.lstsq(Z, yc, rcond=None)[0]
    a = 1.0 / math.sqrt(2.0)
    np.testing.assert_allclose(est.intercept_, a * theta[-1], atol=5e-3)
    pred = Z @ theta
    assert np.corrcoef(est.predict(X), pred)[0, 1] > 0.999
    assert est.ridge_ == 0.0  # well conditioned: lambda_min's lower bound is above the noise bound
    # a small budget: the ridge is the noise bound less lambda_min's lower bound, and theta finite
    lam_min, A, b = noisy_statistics(Z, yc, SSPPlan(1.0, 50.0, 5.0, 3.0), np.random.default_rng(0))
    theta, lam = adassp_solve(lam_min, A, b, SSPPlan(1.0, 50.0, 5.0, 3.0), 0.05)
    assert lam > 0 and np.all(np.isfinite(theta))
    assert ref.privacy_charge().epsilon <= 1e4 * (1 + 1e-9)


def test_a_negative_definite_noisy_matrix_is_floored_not_inverted():
    plan = SSPPlan(0.0, 1.0, 1.0, 1.0)
    theta, _ = adassp_solve(0.0, -100.0 * np.eye(3), np.ones(3), plan, 0.05)
    assert np.all(np.isfinite(theta)) and np.max(np.abs(theta)) <= 1.0 + 1e-12


def test_the_fit_is_charged_once_replayed_and_screens_wide_data(tmp_path):
    rng = np.random.default_rng(3)
    X = sp.random(3000, 300, density=0.05, random_state=4, format="csr")
    w = np.zeros(300)
    w[:4] = [2.0, -2.0, 1.5, 1.0]
    y = np.asarray(X @ w).ravel() + rng.normal(scale=0.1, size=3000)
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 2.0, 1e-5)
    est = AdaSSPRegressor(epsilon=1.5, delta=1e-6, y_bound=3.0, row_norm="l2", k=20)
    est.fit(X, y, acc, "d", key="m")
    assert est.release_["epsilon"] == pytest.approx(est.privacy_charge().epsilon)
    assert est.privacy_charge().loss == PrivacyLoss.zcdp(est.privacy_charge().details["rho"], 1e-6)
    assert np.count_nonzero(est.coef_) <= 20 and est.release_record_["method"] == "adassp"
    again = AdaSSPRegressor(epsilon=1.5, delta=1e-6, y_bound=3.0, row_norm="l2", k=20).fit(X, y, acc, "d", key="m")
    np.testing.assert_array_equal(again.coef_, est.coef_)  # replayed, not drawn again
    assert 0.0 < acc.status("d").epsilon_spent <= est.release_["epsilon"] * (1 + 1e-9)  # one charge


def test_bad_parameters_are_refused_before_anything_is_charged(tmp_path):
    X, y = np.ones((5, 3)), np.ones(5)
    for params in (
        {"shares": (0.5, 0.5)},
        {"shares": (0.2, 0.0, 0.8)},
        {"row_norm": "l3"},
        {"y_bound": -1.0},
        {"k": 3},
        {"k": 2, "screen_share": 1.0},
        {"beta": 0.0},
        {"intercept_scaling": -1.0},
    ):
        acc = Accountant(tmp_path / f"{len(str(params))}-{hash(str(params)) % 1000}.sqlite")
        acc.init_budget("d", 5.0, 1e-5)
        with pytest.raises(ParameterError):
            AdaSSPRegressor(**params).fit(X, y, acc, "d")
        assert acc.status("d").epsilon_spent == 0.0
