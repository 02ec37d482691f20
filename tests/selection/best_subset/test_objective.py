"""F(S): the inner solves against an independent solver, the sensitivity, the bounds, the cuts."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from bss_helpers import bss_data, small_problem
from scipy.optimize import minimize

from dpdist.exceptions import ParameterError
from dpdist.selection.best_subset.brute_force import enumerate_values
from dpdist.selection.best_subset.hinge import hinge_cut, hinge_evaluate
from dpdist.selection.best_subset.least_squares import ls_cut, ls_evaluate
from dpdist.selection.best_subset.objective import make_problem, sensitivity


def slsqp_value(problem, S):
    """F(S) by SciPy's SLSQP on the smooth reformulation (independent of our solvers)."""
    X, y, r, ridge = problem.X[:, S], problem.y, problem.r, problem.ridge
    k, n = len(S), X.shape[0]
    if problem.loss == "squared":
        res = minimize(
            lambda b: 0.5 * np.sum((y - X @ b) ** 2) + 0.5 * ridge * b @ b,
            np.zeros(k),
            constraints=[{"type": "ineq", "fun": lambda b: r * r - b @ b}],
            method="SLSQP",
            options={"ftol": 1e-14, "maxiter": 1000},
        )
        return res.fun
    Z = X * y[:, None]
    x0 = np.r_[np.zeros(k), np.ones(n)]
    cons = [
        {"type": "ineq", "fun": lambda v: v[k:] - (1 - Z @ v[:k]), "jac": lambda v: np.hstack([Z, np.eye(n)])},
        {"type": "ineq", "fun": lambda v: r * r - v[:k] @ v[:k]},
    ]
    res = minimize(
        lambda v: v[k:].sum() + ridge * v[:k] @ v[:k],
        x0,
        jac=lambda v: np.r_[2 * ridge * v[:k], np.ones(n)],
        bounds=[(None, None)] * k + [(0, None)] * n,
        constraints=cons,
        method="SLSQP",
        options={"ftol": 1e-12, "maxiter": 1000},
    )
    return res.fun


@pytest.mark.parametrize("loss", ["squared", "hinge"])
@pytest.mark.parametrize("r", [0.2, 1.1, 10.0])
def test_inner_solve_matches_slsqp_and_is_certified(loss, r):
    P = small_problem(loss, 3, p=8, s=3, n=120 if loss == "squared" else 50, r=r)
    for S in ([1, 3, 5], [0, 2, 7]):
        if loss == "squared":
            value, bound, beta, _ = ls_evaluate(P, np.array(S), 1e-8)
        else:
            value, bound, beta, _, _ = hinge_evaluate(P, np.array(S), 1e-8)
        assert bound <= value + 1e-9 and value - bound <= 1e-7
        assert np.linalg.norm(beta) <= r * (1 + 1e-12)
        assert value == pytest.approx(slsqp_value(P, S), rel=1e-7, abs=1e-7)


@pytest.mark.parametrize("perturb", [0.0, 0.05])
def test_cuts_are_valid_lower_bounds_at_every_support(small, perturb):
    """eta >= L + g^T (z - 1_S) never exceeds F(T) at any binary point T -- also for an inexact beta."""
    P = small
    supports, values = enumerate_values(P)
    rng = np.random.default_rng(0)
    Z = np.zeros((len(supports), P.p))
    np.put_along_axis(Z, supports, 1.0, axis=1)
    for S in supports[rng.choice(len(supports), 6, replace=False)]:
        if P.loss == "squared":
            value, _, beta, mu = ls_evaluate(P, S, 1e-9)
            beta = beta + perturb * rng.standard_normal(beta.size)
            beta *= min(1.0, P.r / np.linalg.norm(beta))
            L, g = ls_cut(P, S, beta, mu)
        else:
            value, _, beta, _, h = hinge_evaluate(P, S, 1e-8)
            beta = beta + perturb * rng.standard_normal(beta.size)
            L, g = hinge_cut(P, S, beta, h * (1 + 1e4 * perturb))  # another alpha when perturbed
        z0 = np.zeros(P.p)
        z0[S] = 1.0
        cut_values = L + (Z - z0) @ g
        assert np.all(cut_values <= values + 1e-9 * (1 + np.abs(values)))
        if not perturb:
            assert L == pytest.approx(value, abs=1e-7)  # tight at its own support


def test_least_squares_shift_is_psd_and_strengthens():
    P = small_problem("squared", 0)
    gram = P.X.T @ P.X
    assert P.shift > 0 and np.linalg.eigvalsh(gram - P.shift * np.eye(P.p))[0] >= -1e-9


def _worst_record(loss, s, r, bx, by, beta_dir):
    x = np.full(s, bx) * np.sign(beta_dir)
    y = -by if loss == "squared" else -1.0
    return x, y


@pytest.mark.parametrize("loss", ["squared", "hinge"])
def test_adding_a_record_moves_every_F_by_at_most_delta_and_never_down(loss):
    X, y = bss_data(2, 60, 7, 2, hinge=loss == "hinge")
    kw = dict(s=2, loss=loss, r=1.1, ridge=3.0, x_bound=0.5, y_bound=0.5, bounds="clip")
    P = make_problem(X, y, **kw)
    _, F = enumerate_values(P)
    delta = sensitivity(loss, 2, 1.1, 0.5, 0.5)
    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(20):
        x = rng.choice([-0.5, 0.5], size=7)
        yy = rng.choice([-0.5, 0.5]) if loss == "squared" else rng.choice([-1.0, 1.0])
        P2 = make_problem(np.vstack([X, x]), np.r_[y, yy], **kw)
        _, F2 = enumerate_values(P2)
        diff = F2 - F
        assert diff.min() >= -1e-9 and diff.max() <= delta + 1e-9
        worst = max(worst, diff.max())
    assert worst > 0.3 * delta  # the bound is not vacuous


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(s=12), "s must be smaller"),
        (dict(s=0), "s must be"),
        (dict(r=0.0), "r must"),
        (dict(r=-1.0), "r must"),
        (dict(x_bound=0.0), "x_bound"),
        (dict(y_bound=-1.0), "y_bound"),
        (dict(ridge=0.0), "ridge"),
        (dict(loss="l1"), "loss"),
        (dict(bounds="trim"), "bounds"),
    ],
)
def test_bad_parameters(bad, message):
    X, y = bss_data(0, 50, 12, 3)
    kw = dict(s=3, loss="squared", r=1.1, ridge=5.0, x_bound=5.0, y_bound=5.0, bounds="check") | bad
    with pytest.raises(ParameterError, match=message):
        make_problem(X, y, **kw)


def test_bounds_are_checked_without_revealing_data_and_clipped_per_record():
    X, y = bss_data(0, 50, 12, 3)
    X[7, 4] = 4.52
    with pytest.raises(ParameterError) as e:
        make_problem(X, y, 3, x_bound=0.5, y_bound=100.0)
    msg = str(e.value)
    assert "x_bound" in msg and "0.5" in msg and "4.52" not in msg and "7" not in msg
    with pytest.raises(ParameterError, match="y_bound") as e:
        make_problem(np.clip(X, -0.5, 0.5), y * 100, 3, x_bound=0.5, y_bound=0.5)
    P = make_problem(X, y * 100, 3, x_bound=0.5, y_bound=0.5, bounds="clip")
    assert np.abs(P.X).max() <= 0.5 and np.abs(P.y).max() <= 0.5
    assert X[7, 4] == 4.52  # the caller's array is untouched
    with pytest.raises(ParameterError, match="-1, \\+1"):
        make_problem(np.clip(X, -0.5, 0.5), y, 3, loss="hinge", x_bound=0.5)
    with pytest.raises(ParameterError, match="finite"):
        make_problem(np.where(X > 1, np.nan, X), y, 3, bounds="clip")


def test_sensitivity_formulas():
    assert sensitivity("squared", 5, 1.1, 0.5, 0.5) == pytest.approx(0.5 * (0.5 + 0.5 * 1.1 * math.sqrt(5)) ** 2)
    assert sensitivity("hinge", 5, 1.1, 0.5, 0.5) == pytest.approx(1 + 0.5 * 1.1 * math.sqrt(5))


def test_sparse_and_dense_agree():
    import scipy.sparse as sp

    X, y = bss_data(0, 200, 10, 3)
    X[np.abs(X) < 0.8] = 0.0
    dense = make_problem(X, y, 3, bounds="clip", ridge=5.0)
    sparse = make_problem(sp.csr_matrix(X), y, 3, bounds="clip", ridge=5.0)
    _, a = enumerate_values(dense)
    _, b = enumerate_values(sparse)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    assert list(itertools.islice(np.argsort(a), 5)) == list(itertools.islice(np.argsort(b), 5))


@pytest.mark.parametrize("r", [0.2, 10.0])  # the ball active, inactive
def test_an_inexact_least_squares_solve_is_refined_until_certified(r, monkeypatch):
    """A closed-form solve that misses its certificate (here: an eigendecomposition 0.1% off, far worse
    than rounding) is never an outcome: the refinement rounds go on until value - bound <= tol, and the
    value is F's (SLSQP's) as with an exact eigendecomposition."""
    from dpdist.selection.best_subset import least_squares as ls_module

    P = small_problem("squared", 3, p=8, s=3, n=400, r=r)
    S = np.array([1, 3, 5])
    exact = ls_evaluate(P, S, 1e-9)
    real = np.linalg.eigh
    calls = []

    def off(H):
        lam, Q = real(H)
        calls.append(H.shape[0])
        return lam * 1.001, Q

    monkeypatch.setattr(ls_module.np.linalg, "eigh", off)
    rounds = []
    refine = ls_module._refine
    monkeypatch.setattr(ls_module, "_refine", lambda *a: rounds.append(1) or refine(*a))
    value, bound, beta, _ = ls_evaluate(P, S, 1e-9)
    assert calls and rounds  # the first solve missed its certificate (the old code refused here)
    assert value - bound <= 1e-9 and bound <= value
    assert np.linalg.norm(beta) <= r
    assert value == pytest.approx(exact[0], abs=2e-9) and value == pytest.approx(slsqp_value(P, S), abs=1e-7)
