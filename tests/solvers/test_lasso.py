"""The screened LASSO: scikit-learn's solution of the whole problem, from fits on a few columns."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso

from dpdist.solvers import lasso as lasso_module
from dpdist.solvers.lasso import screened_lasso


def _problem(sparse: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    frequent = sp.csc_matrix((rng.random((400, 4)) < 0.3).astype(float))  # a few frequent columns carry the signal
    X = sp.hstack([frequent, sp.random(400, 296, density=0.05, random_state=seed)], format="csc")
    y = X[:, :4] @ np.array([1.0, -0.8, 0.5, 0.3]) + 0.3 * rng.standard_normal(400)
    return (X if sparse else X.toarray()), y


def _reference(X, y, alpha):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return Lasso(alpha=alpha, max_iter=5000, tol=1e-10).fit(X, y).coef_


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("alpha", [1.0, 0.1, 0.02, 0.005, 1e-4])
def test_the_screened_fit_is_scikit_learns_solution_of_the_whole_problem(sparse, alpha):
    X, y = _problem(sparse)
    got = screened_lasso(X, y, alpha, tol=1e-10)
    want = _reference(X, y, alpha)
    np.testing.assert_allclose(got, want, atol=1e-7)
    assert set(np.flatnonzero(got)) == set(np.flatnonzero(want))


def test_an_alpha_past_alpha_max_fits_nothing_and_returns_zero(monkeypatch):
    X, y = _problem(True)
    alpha_max = np.abs(X.T @ (y - y.mean())).max() / X.shape[0]
    fits: list[int] = []
    monkeypatch.setattr(lasso_module.Lasso, "fit", lambda self, *a: fits.append(1))
    assert not screened_lasso(X, y, 1.01 * alpha_max).any() and fits == []


def test_a_support_column_the_strong_rule_discards_is_found_by_the_kkt_check():
    """b strongly correlated with a, and y orthogonal to b in the sample: the strong rule discards b (its
    score is 0), but once a is fitted the residual needs b. The KKT check adds it; the result is the whole
    problem's, with b in the support."""
    rng = np.random.default_rng(3)
    n = 500
    a = rng.standard_normal(n)
    b = 3.0 * a + rng.standard_normal(n)
    y = 10.0 * a - 10.0 * ((b - b.mean()) @ (a - a.mean())) / ((b - b.mean()) @ (b - b.mean())) * b
    X = np.column_stack([a, b, rng.standard_normal((n, 20))])
    alpha = 0.6
    score = np.abs(X.T @ (y - y.mean())) / n
    assert score[1] < 2 * alpha - score.max()  # the strong rule discards column 1
    got = screened_lasso(X, y, alpha, tol=1e-10)
    want = _reference(X, y, alpha)
    assert want[1] != 0.0
    np.testing.assert_allclose(got, want, atol=1e-7)


def test_empty_and_constant_inputs():
    assert screened_lasso(np.zeros((0, 3)), np.zeros(0), 0.1).tolist() == [0.0, 0.0, 0.0]
    X, _ = _problem(True)
    assert not screened_lasso(X, np.full(400, 2.0), 0.01).any()


def test_at_two_stages_tolerance_the_votes_are_the_full_fits():
    """Two-stage fits at tol=1e-4: on blocks of many shapes, the screened fit casts the vote scikit-learn's fit on
    every column casts (its s largest |coefficients|)."""
    from dpdist.selection.two_stage import truncated_vote

    for seed in range(12):
        X, y = _problem(seed % 2 == 0, seed)
        for alpha in (0.2, 0.05, 0.01):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                full = Lasso(alpha=alpha, max_iter=5000, tol=1e-4).fit(X, y).coef_
            assert truncated_vote(screened_lasso(X, y, alpha), 5).tolist() == truncated_vote(full, 5).tolist()
