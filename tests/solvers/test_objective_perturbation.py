"""Objective perturbation (Kifer et al. Alg. 1): calibration and behaviour at the extremes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpdist.exceptions import ParameterError
from dpdist.solvers.objective_perturbation import ObjectivePerturbation


def test_noise_norm_is_gamma_s_2zeta_over_epsilon():
    op = ObjectivePerturbation("logistic", epsilon=2.0, random_state=0)
    s = 4
    lam_h, zeta = op.constants(s)
    assert (lam_h, zeta) == (1.0, 2.0)
    norms = np.array([np.linalg.norm(op._noise(s, zeta)) for _ in range(20000)])
    assert norms.mean() == pytest.approx(s * 2 * zeta / 2.0, rel=0.02)  # Gamma(s, 2 zeta/eps) mean
    assert ObjectivePerturbation("squared").constants(4) == (4.0, 16.0)


def test_large_epsilon_approaches_the_constrained_fit():
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(5000, 3))
    y = X @ np.array([0.5, -0.3, 0.2])
    theta = ObjectivePerturbation("squared", epsilon=1e6, random_state=2).fit(X, y).coef_
    np.testing.assert_allclose(theta, [0.5, -0.3, 0.2], atol=1e-3)
    assert np.linalg.norm(theta) <= math.sqrt(3) + 1e-9


def test_logistic_labels_checked_and_fit():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(4000, 2))
    y = (X @ np.array([3.0, -3.0]) + rng.logistic(size=4000) > 0).astype(float)
    theta = ObjectivePerturbation("logistic", epsilon=1e6, random_state=4).fit(X, y).coef_
    assert theta[0] > 1.5 and theta[1] < -1.5
    with pytest.raises(ParameterError, match="labels"):
        ObjectivePerturbation("logistic").fit(X, 3 * y + 2)
    with pytest.raises(ParameterError, match="loss"):
        ObjectivePerturbation("hinge")
