"""Objective perturbation on a chosen support: stage 2 of two-stage.

References: Kifer, Smith, Thakurta 2012, Alg. 1; docs/algorithms.md §5.2.

On the s = |S| selected columns, with the per-record bounds enforced by clipping/rescaling
(a per-record map, no privacy cost):

* rows: if ||x_i,S||_2 > sqrt(s) the row is rescaled to norm sqrt(s) ([DPBSS25] code);
* squared loss l = (y - x.theta)^2 / 2 with |y| clipped to s and theta in the ball
  ||theta||_2 <= R = sqrt(s), so |x.theta| <= s and the gradient norm is at most
  zeta = 2 s^{3/2}; the Hessian of one record is at most lambda_H = s;
* logistic loss (labels in {0, 1} or {-1, +1}): zeta = sqrt(s), lambda_H = s/4; theta free.

The mechanism (ADD/REMOVE; n never enters it) releases the minimiser of the objective perturbed by a
linear term b.theta with b of density ∝ exp(-eps1 ||b|| / (2 zeta)) (or Gaussian when delta > 0) and a
ridge Delta = 2 lambda_H / eps1 (Kifer et al. 2012, Thm. 1). The squared loss is solved exactly (a
trust-region problem, its KKT conditions checked and refined with no cap on the rounds); the logistic loss by
Newton, certified within the public ``tolerance`` r of the exact minimiser, then released plus noise of density
∝ exp(-eps2 ||z|| / (2 r)) (approximate minima perturbation, Iyengar et al. 2019), eps2 = ``output_fraction``
epsilon. The claims and their proofs: [docs/proofs/solvers-objective_perturbation.md][proof-objective-perturbation].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.metrics import accuracy_score, r2_score
from sklearn.utils import ClassifierTags, RegressorTags
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from dpdist.base import PARAMETERS, ClassesParam, PrivacyParams, PrivateEstimator
from dpdist.exceptions import ParameterError, SolverFailure
from dpdist.privacy.guard import require_accountant
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.utils.random import check_random_state
from dpdist.utils.validation import Between, Delta, Epsilon, Options, Positive

__all__ = ["LOSSES", "MIN_TOLERANCE", "ObjectivePerturbation"]

LOSSES = ("squared", "logistic")
# the smallest public distance bound r the logistic solve certifies (module doc: rounding)
MIN_TOLERANCE = 1e-9


def _rows_bounded(X: np.ndarray, s: int) -> np.ndarray:
    norms = np.linalg.norm(X, axis=1)
    factor = np.maximum(1.0, norms / math.sqrt(s))
    return X / factor[:, None]


def _l2_laplace(rng: np.random.Generator, s: int, scale: float) -> np.ndarray:
    """A draw of density ∝ exp(-||z||_2 / scale) in R^s: norm ~ Gamma(s, scale), uniform direction."""
    direction = rng.normal(size=s)
    direction /= np.linalg.norm(direction)
    return rng.gamma(shape=s, scale=scale) * direction


def _trust_region(A: np.ndarray, c: np.ndarray, radius: float) -> np.ndarray:
    """argmin 1/2 t'At - c't over ||t|| <= radius for A positive definite, to machine precision."""
    lam, Q = np.linalg.eigh(A)
    qc = Q.T @ c

    def norm(nu: float) -> float:
        return float(np.linalg.norm(qc / (lam + nu)))

    if norm(0.0) <= radius:
        return Q @ (qc / lam)
    lo, hi = 0.0, max(1.0, float(np.linalg.norm(c)) / radius)
    while norm(hi) > radius:
        hi *= 2.0
    for _ in range(200):  # ||t(nu)|| decreases in nu; stop when the bracket no longer shrinks
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if norm(mid) > radius else (lo, mid)
    theta = Q @ (qc / (lam + hi))
    nrm = np.linalg.norm(theta)
    return theta * (radius / nrm) if nrm > radius else theta


def _kkt_met(A: np.ndarray, c: np.ndarray, theta: np.ndarray, radius: float) -> bool:
    """Whether ``theta`` meets the KKT conditions of ``_trust_region``'s problem: A theta - c = -nu theta
    with nu >= 0 on the boundary, = 0 inside, to 1e-8 of the problem's scale (far above the rounding
    of a backward-stable solve, about 1e-16 of it)."""
    g = A @ theta - c
    scale = max(1.0, float(np.linalg.norm(c)), float(np.linalg.norm(A, 2)) * radius)
    on_boundary = np.linalg.norm(theta) >= radius * (1.0 - 1e-12)
    nu = max(0.0, -float(g @ theta) / radius**2) if on_boundary else 0.0
    return bool(np.linalg.norm(g + nu * theta) <= 1e-8 * scale)


def _refine_trust_region(
    A: np.ndarray, c: np.ndarray, radius: float, theta: np.ndarray, nu: float
) -> tuple[np.ndarray, float]:
    """One round towards the KKT point of ``_trust_region``'s problem from (``theta``, ``nu``): a step
    of iterative refinement of (A + nu I) theta = c, then, where the ball is active, a Newton step on
    phi(nu) = 1/||theta|| - 1/radius (slope theta^T (A + nu I)^-1 theta / ||theta||^3), the point
    scaled into the ball. From any start with A positive definite this converges to the unique KKT
    point (More and Sorensen 1983), so the loop of ``_solve_squared`` ends."""
    shifted = A + nu * np.eye(A.shape[0])
    theta = theta + np.linalg.solve(shifted, c - shifted @ theta)
    norm = float(np.linalg.norm(theta))
    if norm > radius or nu > 0.0:
        slope = float(theta @ np.linalg.solve(shifted, theta)) / max(norm, 1e-300) ** 3
        nu = max(0.0, nu - (1.0 / max(norm, 1e-300) - 1.0 / radius) / max(slope, 1e-300))
    if norm > radius:
        theta = theta * (radius / norm)
    return theta, nu


@dataclass(**PARAMETERS)
class ObjectivePerturbation(PrivateEstimator, PrivacyParams, ClassesParam):
    """Private linear or logistic regression on few features by objective perturbation.

    ``tolerance`` (logistic only) is the public bound r on the distance between the released
    minimiser and the exact one; ``output_fraction`` of epsilon pays for it (module doc).
    A scikit-learn estimator: parameters are validated in ``fit`` (and by ``privacy_charge``),
    each ``fit`` draws from ``check_random_state(random_state)`` (OS entropy when None).
    With the squared loss it is a regressor (``predict``: X theta); with the logistic loss a
    binary classifier: ``classes`` = [negative, positive] (public; default: labels in {0, 1} or
    {-1, +1}, else the two labels seen), ``predict`` the class on X theta's side.
    """

    mechanism = "objective_perturbation"
    loss: str = "squared"
    delta: float = 0.0  # pure epsilon-DP by default (PrivacyParams: 1e-6)
    tolerance: float = 1e-6
    output_fraction: float = 0.01
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "loss": [Options(*LOSSES)],
        "epsilon": [Epsilon()],
        "delta": [Delta()],
        "tolerance": [Positive()],  # and at least MIN_TOLERANCE (_check_params)
        "output_fraction": [Between(0.0, 1.0)],
        "random_state": "no_validation",
        "classes": "no_validation",  # _binary_target
    }

    def _check_params(self) -> None:
        if float(self.tolerance) < MIN_TOLERANCE:
            raise ParameterError(
                f"tolerance must be >= {MIN_TOLERANCE:g}: below it rounding can keep the certificate out of "
                f"reach (got {self.tolerance!r})"
            )

    @property
    def _eps_output(self) -> float:
        return float(self.epsilon) * float(self.output_fraction) if self.loss == "logistic" else 0.0

    @property
    def _eps_objective(self) -> float:
        return float(self.epsilon) - self._eps_output

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """eps1 (objective) + eps2 (output noise, logistic): pure epsilon-DP, or (epsilon, delta)."""
        self.check_params()
        first = (
            PrivacyLoss.approx(self._eps_objective, self.delta)
            if self.delta > 0
            else PrivacyLoss.pure(self._eps_objective)
        )
        if self._eps_output == 0.0:
            return first
        return PrivacyLoss.compose(first, PrivacyLoss.pure(self._eps_output))

    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        return Charge(self.privacy_loss, f"{self.mechanism}/{self.loss}")

    def release_params(self, n_features: int | None = None, n_public: int | None = None) -> dict[str, Any]:
        self.check_params()
        return {
            "loss": self.loss,
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "tolerance": float(self.tolerance),
            "output_fraction": float(self.output_fraction),
        }

    def constants(self, s: int) -> tuple[float, float]:
        """(lambda_H, zeta) for s features."""
        if self.loss == "squared":
            return float(s), 2.0 * s**1.5
        return s / 4.0, math.sqrt(s)

    def _noise(self, s: int, zeta: float, rng: np.random.Generator) -> np.ndarray:
        eps1 = self._eps_objective
        if self.delta > 0:
            sd = zeta * math.sqrt(8.0 * math.log(2.0 / self.delta) + 4.0 * eps1) / eps1
            return rng.normal(scale=sd, size=s)
        return _l2_laplace(rng, s, 2.0 * zeta / eps1)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        if self.loss == "logistic":
            tags.estimator_type, tags.classifier_tags = "classifier", ClassifierTags(multi_class=False)
        else:
            tags.estimator_type, tags.regressor_tags = "regressor", RegressorTags()
        return tags

    def _binary_target(self, y: np.ndarray) -> np.ndarray:
        """y as +-1 by the public ``classes`` (or the default label conventions); sets classes_."""
        check_classification_targets(y)
        if self.classes is not None:
            classes = np.asarray(self.classes)
            if classes.size != 2:
                raise ParameterError(f"classes must name exactly 2 labels, got {classes.size}")
        elif np.isin(y, [0.0, 1.0]).all():
            classes = np.array([0.0, 1.0])
        elif np.isin(y, [-1.0, 1.0]).all():
            classes = np.array([-1.0, 1.0])
        else:
            y_type = type_of_target(y, input_name="y", raise_unknown=True)
            classes = np.unique(y)
            if y_type != "binary" or classes.size != 2:
                raise ParameterError(
                    f"Only binary classification is supported. The type of the target is {y_type}: "
                    "logistic loss needs labels in {0, 1} or {-1, +1}, exactly two classes, or "
                    "classes=[negative, positive]"
                )
        if not np.isin(y, classes).all():
            raise ParameterError("y has labels outside the given classes")
        self.classes_ = classes
        return np.where(y == classes[1], 1.0, -1.0)

    def fit(self, X: np.ndarray, y: np.ndarray) -> ObjectivePerturbation:
        """The private minimiser. It charges nothing itself: call it inside a charged release
        (:func:`dpdist.selection.two_stage.fit_on_support` charges an accountant first), or inside
        ``dpdist.unaccounted()`` for an experiment; anywhere else it refuses."""
        self.check_params()
        require_accountant(self)
        logistic = self.loss == "logistic"
        X, y = self._check_data(X, y, None, accept_sparse="csr", dtype=np.float64, y_numeric=not logistic)
        X = sp.csr_matrix(X).toarray() if sp.issparse(X) else X
        s = X.shape[1]
        rng = check_random_state(self.random_state)
        X = _rows_bounded(X, s)
        if self.loss == "squared":
            y = np.clip(y, -s, s)
        else:
            y = self._binary_target(y)
        lam_h, zeta = self.constants(s)
        reg = 2.0 * lam_h / self._eps_objective
        b = self._noise(s, zeta, rng)
        if self.loss == "squared":
            theta = self._solve_squared(X, y, reg, b, math.sqrt(s))
        else:
            theta = self._solve_logistic(X, y, reg, b)
            theta = theta + _l2_laplace(rng, s, 2.0 * self.tolerance / self._eps_output)
        self.coef_ = theta[np.newaxis, :] if logistic else theta  # scikit-learn's shapes: (1, d) for two classes
        return self

    @staticmethod
    def _solve_squared(X: np.ndarray, y: np.ndarray, reg: float, b: np.ndarray, radius: float) -> np.ndarray:
        """Exact minimiser of 1/2||X t - y||^2 + reg/2 ||t||^2 + b.t on the ball, refined until its KKT
        conditions hold, with no cap on the rounds (module doc: it returns exact or not at all)."""
        A = X.T @ X + reg * np.eye(X.shape[1])
        c = X.T @ y - b
        theta, nu = _trust_region(A, c, radius), 0.0
        if _kkt_met(A, c, theta, radius):
            return theta
        while not _kkt_met(A, c, theta, radius):  # a NaN goes on, never out inexact
            theta, nu = _refine_trust_region(A, c, radius, theta, nu)
        step = np.inf  # then on to the fixed point: the refinement converges quadratically, so its steps
        while True:  # shrink until they stop halving (rounding), which takes a few rounds
            new, nu = _refine_trust_region(A, c, radius, theta, nu)
            moved = float(np.linalg.norm(new - theta))
            theta = new
            if not moved < 0.5 * step:
                return theta
            step = moved

    def _solve_logistic(self, X: np.ndarray, y: np.ndarray, reg: float, b: np.ndarray) -> np.ndarray:
        """Newton with backtracking until ||grad F|| / reg <= tolerance / 2 (certified distance), with no cap
        on its steps (module doc: it returns certified or not at all).

        The line search is Armijo on the merit 1/2 ||grad F||^2 (Newton's method for the equation
        grad F = 0): along the Newton step d = H^-1 g its slope is -||g||^2 < 0, so a step is always
        found; the Hessian is positive definite with ||H^-1|| <= 1/Delta and Lipschitz, and the merit's
        level sets are bounded (||grad F(theta)|| >= Delta ||theta - theta*||), so the iteration
        converges globally and then quadratically ([NW06] ch. 11, docs/bibliography.md: line searches
        on the merit of a nonlinear equation). Unlike F, the merit keeps a measurable decrease near
        the minimiser, where F's is below its rounding."""
        theta = np.zeros(X.shape[1])

        def grad(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            p = np.exp(-np.logaddexp(0.0, y * (X @ t)))  # sigmoid(-m)
            return X.T @ (-y * p) + reg * t + b, p

        g, p = grad(theta)
        while not np.linalg.norm(g) / reg <= 0.5 * self.tolerance:  # a NaN goes on, never out uncertified
            H = (X * (p * (1.0 - p))[:, None]).T @ X + reg * np.eye(X.shape[1])
            step = np.linalg.solve(H, g)
            t, merit = 1.0, float(g @ g)
            while True:  # Armijo on 1/2 ||grad F||^2, whose slope along the Newton step is -||grad F||^2
                g_new, p_new = grad(theta - t * step)
                if float(g_new @ g_new) <= (1.0 - 2e-4 * t) * merit or t < 1e-12:
                    break
                t *= 0.5
            theta, g, p = theta - t * step, g_new, p_new
        if not np.all(np.isfinite(theta)):  # unreachable for finite inputs (validated): a numerical breakdown
            raise SolverFailure(
                "objective perturbation (logistic loss): the solve broke down numerically; the charge stands "
                "and nothing is released"
            )
        return theta

    def _margins(self, X: np.ndarray) -> np.ndarray:
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return np.asarray(X @ self.coef_.ravel()).ravel()

    @available_if(lambda self: self.loss == "logistic")
    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """X theta (logistic loss only: a regressor has no decision function)."""
        return self._margins(X)

    def predict(self, X: np.ndarray) -> np.ndarray:
        margins = self._margins(X)
        return margins if self.loss == "squared" else self.classes_[(margins > 0).astype(np.int64)]

    def score(self, X: np.ndarray, y: np.ndarray) -> float:
        """Accuracy (logistic loss) or R^2 (squared loss), as scikit-learn's mixins."""
        if self.loss == "squared":
            return float(r2_score(y, self.predict(X)))
        return float(accuracy_score(y, self.predict(X)))
