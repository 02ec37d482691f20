"""Objective perturbation (Kifer et al. Alg. 1): calibration, the exact/certified minimiser, the charge."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import PrivacyLoss
from dpdist.solvers.objective_perturbation import ObjectivePerturbation, _trust_region


def test_noise_norm_is_gamma_s_2zeta_over_epsilon():
    op = ObjectivePerturbation(loss="squared", epsilon=2.0, random_state=0)
    s = 4
    lam_h, zeta = op.constants(s)
    assert (lam_h, zeta) == (4.0, 16.0)
    rng = np.random.default_rng(0)
    norms = np.array([np.linalg.norm(op._noise(s, zeta, rng)) for _ in range(20000)])
    assert norms.mean() == pytest.approx(s * 2 * zeta / 2.0, rel=0.02)  # Gamma(s, 2 zeta/eps) mean
    assert ObjectivePerturbation(loss="logistic").constants(4) == (1.0, 2.0)


def test_large_epsilon_approaches_the_constrained_fit():
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(5000, 3))
    y = X @ np.array([0.5, -0.3, 0.2])
    theta = ObjectivePerturbation(loss="squared", epsilon=1e6, random_state=2).fit(X, y).coef_
    np.testing.assert_allclose(theta, [0.5, -0.3, 0.2], atol=1e-3)
    assert np.linalg.norm(theta) <= math.sqrt(3) + 1e-9


def test_trust_region_solve_is_exact_inside_and_on_the_ball():
    rng = np.random.default_rng(3)
    M = rng.normal(size=(6, 4))
    A = M.T @ M + 0.1 * np.eye(4)
    c = rng.normal(size=4) * 10
    free = np.linalg.solve(A, c)
    assert np.allclose(_trust_region(A, c, 2 * np.linalg.norm(free)), free)
    t = _trust_region(A, c, 0.5)  # on the boundary: A t - c = -nu t with nu >= 0
    assert np.linalg.norm(t) == pytest.approx(0.5, rel=1e-12)
    g = A @ t - c
    nu = -(g @ t) / 0.25
    assert nu > 0 and np.linalg.norm(g + nu * t) < 1e-9 * np.linalg.norm(c)


def test_logistic_minimiser_is_certified_within_the_tolerance_and_charged_for_it():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(4000, 2))
    y = (X @ np.array([3.0, -3.0]) + rng.logistic(size=4000) > 0).astype(float)
    op = ObjectivePerturbation(loss="logistic", epsilon=50.0, tolerance=1e-6, random_state=4)
    coef = op.fit(X, y).coef_
    assert coef.shape == (1, X.shape[1])  # scikit-learn's shape for a binary classifier
    theta = coef[0]
    assert theta[0] > 1.5 and theta[1] < -1.5
    # output noise pays for the tolerance: 1% of epsilon, both parts pure
    assert op.privacy_loss.epsilon == pytest.approx(50.0) and op.privacy_loss.delta == 0.0
    assert op.privacy_loss.parts == (("zcdp", 49.5**2 / 2), ("zcdp", 0.5**2 / 2))
    with pytest.raises(ParameterError, match="Only binary"):
        ObjectivePerturbation(loss="logistic").fit(X, y + (X[:, 0] > 0.5))  # three classes
    with pytest.raises(ParameterError, match="outside the given classes"):
        ObjectivePerturbation(loss="logistic", classes=[0.0, 1.0]).fit(X, 3 * y + 2)
    # any two labels: the first is the negative class, as scikit-learn's classifiers
    other = ObjectivePerturbation(loss="logistic", epsilon=50.0, random_state=4).fit(X, np.where(y > 0, "yes", "no"))
    assert list(other.classes_) == ["no", "yes"] and other.score(X, np.where(y > 0, "yes", "no")) > 0.8
    with pytest.raises(ParameterError, match="loss"):
        ObjectivePerturbation(loss="hinge").fit(X, y)  # validated in fit (a scikit-learn estimator)
    with pytest.raises(ParameterError, match="loss"):
        ObjectivePerturbation(loss="hinge").privacy_charge()
    # squared loss: exact solve, the whole epsilon on b
    assert ObjectivePerturbation(loss="squared", epsilon=1.0).privacy_loss == PrivacyLoss.pure(1.0)
    assert ObjectivePerturbation(loss="squared", epsilon=1.0, delta=1e-6).privacy_loss == PrivacyLoss.approx(1.0, 1e-6)


def test_the_logistic_solve_has_no_step_cap_and_an_unreachable_tolerance_is_refused_before_the_charge(
    tmp_path, monkeypatch
):
    """No data-dependent stop: Newton goes on until its certificate (a solver slowed to 5% steps needs
    several hundred, where the old cap of 200 raised ``SolverFailure`` after the charge); a tolerance
    below ``MIN_TOLERANCE`` is a usage error before any charge."""
    from dpdist.selection.two_stage import fit_on_support
    from dpdist.solvers import objective_perturbation as op_module

    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(200, 3))
    y = np.where(rng.random(200) < 0.5, -1.0, 1.0)
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 5.0, 0.0)
    with pytest.raises(ParameterError, match="tolerance"):
        fit_on_support(
            ObjectivePerturbation(loss="logistic", epsilon=1.0, tolerance=1e-300), X, y, np.arange(3), acc, "ds", "m"
        )
    assert acc.history("ds") == []
    solve, steps = np.linalg.solve, []
    monkeypatch.setattr(op_module.np.linalg, "solve", lambda H, g: steps.append(1) or 0.05 * solve(H, g))
    op = ObjectivePerturbation(loss="logistic", epsilon=1.0, tolerance=op_module.MIN_TOLERANCE)
    reg = 2.0 * op.constants(3)[0] / op._eps_objective
    b = rng.normal(size=3)
    theta = op._solve_logistic(X, y, reg, b)
    assert len(steps) > 200
    m = y * (X @ theta)
    grad = X.T @ (-y * np.exp(-np.logaddexp(0.0, m))) + reg * theta + b
    assert np.linalg.norm(grad) / reg <= 0.5 * op_module.MIN_TOLERANCE  # certified at the floor


def test_a_squared_solve_that_misses_its_kkt_conditions_is_refined_not_refused(tmp_path, monkeypatch):
    """The closed-form trust-region solve's KKT guard (a numerical breakdown, never observed) is not an
    outcome: a solve far off its optimum (here replaced by a constant vector) is refined until the KKT
    conditions hold, and the release is the exact minimiser, as with the closed form -- recorded as a
    release, not a failure. The old code recorded ``SolverFailure`` here."""
    from dpdist.selection.two_stage import fit_on_support
    from dpdist.solvers import objective_perturbation as op_module

    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(200, 3))
    y = rng.uniform(-1, 1, size=200)
    exact = ObjectivePerturbation(loss="squared", epsilon=1.0, random_state=6).fit(X, y).coef_
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 5.0, 0.0)
    rounds = []
    refine = op_module._refine_trust_region
    monkeypatch.setattr(op_module, "_trust_region", lambda A, c, radius: np.zeros(A.shape[0]) + 0.1)
    monkeypatch.setattr(op_module, "_refine_trust_region", lambda *a: rounds.append(1) or refine(*a))
    op = ObjectivePerturbation(loss="squared", epsilon=1.0, random_state=6)
    fit_on_support(op, X, y, np.array([0, 1, 2]), acc, "ds", "m")
    assert rounds and np.allclose(op.coef_, exact, rtol=1e-13, atol=1e-15)
    (rec,) = acc.history("ds")
    assert "__dpdist_failure__" not in rec.result and acc.status("ds").epsilon_spent == pytest.approx(1.0)


def test_the_trust_region_refinement_reaches_the_boundary_solution():
    """From a poor start, the refinement rounds converge to the ball-constrained KKT point."""
    from dpdist.solvers import objective_perturbation as op_module

    rng = np.random.default_rng(2)
    M = rng.standard_normal((30, 4))
    A, c = M.T @ M + 0.5 * np.eye(4), 10.0 * rng.standard_normal(4)
    radius = 0.3
    target = op_module._trust_region(A, c, radius)
    theta, nu, rounds = np.full(4, 0.05), 0.0, 0
    while not op_module._kkt_met(A, c, theta, radius):
        theta, nu = op_module._refine_trust_region(A, c, radius, theta, nu)
        rounds += 1
        assert rounds < 200
    assert np.linalg.norm(theta) <= radius * (1 + 1e-12) and np.allclose(theta, target, atol=1e-8)


def test_bad_labels_are_refused_before_the_charge(tmp_path):
    from dpdist.selection.two_stage import fit_on_support

    rng = np.random.default_rng(8)
    X = rng.uniform(-1, 1, size=(60, 3))
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 5.0, 0.0)
    with pytest.raises(ParameterError, match="Only binary"):
        fit_on_support(ObjectivePerturbation(loss="logistic"), X, np.arange(60) % 3, np.array([0, 1]), acc, "ds", "m")
    assert acc.history("ds") == [] and acc.status("ds").epsilon_spent == 0.0
