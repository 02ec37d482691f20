"""Objective perturbation on a chosen support: stage 2 of two-stage (Kifer, Smith, Thakurta 2012, Alg. 1; spec 5.2).

On the s = |S| selected columns, with the per-record bounds enforced by clipping/rescaling
(a per-record map, no privacy cost):

* rows: if ||x_i,S||_2 > sqrt(s) the row is rescaled to norm sqrt(s) (seed-002 code);
* squared loss l = (y - x.theta)^2 / 2 with |y| clipped to s and theta in the ball
  ||theta||_2 <= sqrt(s), so |x.theta| <= s and the gradient norm is at most
  zeta = 2 s^{3/2}; the Hessian of one record is at most lambda_H = s;
* logistic loss (labels in {0, 1} or {-1, +1}): zeta = sqrt(s), lambda_H = s/4; theta free.

The released minimiser of (1/n) sum_i l(theta; d_i) + (Delta/(2n))||theta||^2 + b.theta/n, with
Delta = 2 lambda_H / epsilon and b with density ∝ exp(-epsilon ||b|| / (2 zeta)) (pure: norm
~ Gamma(s, 2 zeta/epsilon), uniform direction) or b ~ N(0, zeta^2 (8 ln(2/delta) + 4 epsilon)
/ epsilon^2 I) when delta > 0, is (epsilon, delta)-DP. The feasible set is a ball for the
squared loss because the SoK code's unconstrained version has no bound on the gradient;
the Lipschitz constant above holds only on the ball.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize

from dpdist.exceptions import ParameterError
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_delta, check_epsilon

__all__ = ["LOSSES", "ObjectivePerturbation"]

LOSSES = ("squared", "logistic")


def _rows_bounded(X: np.ndarray, s: int) -> np.ndarray:
    norms = np.linalg.norm(X, axis=1)
    factor = np.maximum(1.0, norms / math.sqrt(s))
    return X / factor[:, None]


class ObjectivePerturbation:
    """Private linear or logistic regression on few features by objective perturbation."""

    def __init__(self, loss: str = "squared", epsilon: float = 1.0, delta: float = 0.0,
                 random_state: RandomState = None) -> None:
        if loss not in LOSSES:
            raise ParameterError(f"loss must be one of {LOSSES}, got {loss!r}")
        self.loss = loss
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self._rng = check_random_state(random_state)

    def constants(self, s: int) -> tuple[float, float]:
        """(lambda_H, zeta) for s features."""
        if self.loss == "squared":
            return float(s), 2.0 * s ** 1.5
        return s / 4.0, math.sqrt(s)

    def _noise(self, s: int, zeta: float) -> np.ndarray:
        if self.delta > 0:
            sd = zeta * math.sqrt(8.0 * math.log(2.0 / self.delta) + 4.0 * self.epsilon) / self.epsilon
            return self._rng.normal(scale=sd, size=s)
        direction = self._rng.normal(size=s)
        direction /= np.linalg.norm(direction)
        return self._rng.gamma(shape=s, scale=2.0 * zeta / self.epsilon) * direction

    def fit(self, X: np.ndarray, y: np.ndarray) -> ObjectivePerturbation:
        X = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        n, s = X.shape
        if n != y.shape[0]:
            raise ParameterError(f"X has {n} rows but y has {y.shape[0]} entries")
        if s == 0:
            raise ParameterError("objective perturbation needs at least one feature")
        X = _rows_bounded(X, s)
        if self.loss == "squared":
            y = np.clip(y, -s, s)
        else:
            labels = np.unique(y)
            if not (np.isin(labels, [0.0, 1.0]).all() or np.isin(labels, [-1.0, 1.0]).all()):
                raise ParameterError(f"logistic loss needs labels in {{0, 1}} or {{-1, +1}}, got {labels[:5]}")
            y = np.where(y > 0, 1.0, -1.0)
        lam_h, zeta = self.constants(s)
        reg = 2.0 * lam_h / self.epsilon
        b = self._noise(s, zeta)

        def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
            z = X @ theta
            if self.loss == "squared":
                r = z - y
                f, g = 0.5 * (r @ r), X.T @ r
            else:
                m = y * z
                f = np.logaddexp(0.0, -m).sum()
                g = X.T @ (-y * np.exp(-np.logaddexp(0.0, m)))
            f = (f + 0.5 * reg * (theta @ theta) + b @ theta) / n
            return f, (g + reg * theta + b) / n

        theta0 = np.zeros(s)
        if self.loss == "squared":
            radius = math.sqrt(s)
            cons = {"type": "ineq", "fun": lambda t: radius ** 2 - t @ t, "jac": lambda t: -2.0 * t}
            res = minimize(objective, theta0, jac=True, method="SLSQP", constraints=[cons],
                           options={"maxiter": 500, "ftol": 1e-12})
        else:
            res = minimize(objective, theta0, jac=True, method="L-BFGS-B", options={"maxiter": 1000})
        self.coef_ = res.x
        self.n_features_in_ = s
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
        return X @ self.coef_
