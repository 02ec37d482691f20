"""Standard sparse-aware (DP) Frank-Wolfe over the L1 ball (seed 004 Alg. 1; Talwar et al. 2015; spec 2.2-2.3).

Minimise the mean loss (1/n) sum_i l(x_i . w; y_i) over ||w||_1 <= lambda, from w = 0, for T
steps. Each step computes the sum-gradient alpha = X^T l'(X w; y) from scratch (two sparse
products, O(N S_c)), picks a vertex s = sigma lambda e_j of the ball and moves
w <- (1 - eta) w + eta s, eta = 2/(t + 2).

Losses (``LOSSES``), with the bounds ||x_i||_inf <= 1 and |y_i| <= b_y enforced by the caller:

* "logistic": binary cross-entropy with labels in {0, 1}; l' = sigmoid(m) - y; L = 1.
* "squared": l = (m - y)^2 / 2; l' = m - y; L = lambda + b_y (spec 2.2: the seeds' L = 1 is
  wrong for lambda > 1).

L bounds ||grad l||_inf, so one record moves each vertex score <s, g> by at most
Delta = lambda L / n (ADD/REMOVE, n public).

Vertex selection (``selection``):

* None: the exact minimiser of <s, g>: j = argmax |alpha_j|, sigma = -sign(alpha_j).
* "laplace": report-noisy-max over the 2D signed vertices with Laplace noise (Talwar et al.).
  The scores are non-monotone, so the correct scale is b = 2 Delta / eps0 (``calibration=
  "safe"``, default); ``calibration="paper"`` uses the seeds' Delta / eps0, which is 2 eps0-DP
  per step, and the true total is reported (spec 2.2 FLAG).
* "exponential": the exponential mechanism over signed vertices, P(j, sigma) ∝
  exp(-sigma a_j), a_j = eps0 alpha_j / (2 L) (spec 2.2, exactly eps0-DP per step), drawn by
  Gumbel-max over the D log-weights ln(2 cosh a_j) and then the sign. This is the
  distribution the fast solver samples.

eps0 = epsilon / sqrt(8 T ln(1/delta)) (advanced composition over the T steps, exact bound
checked, :func:`dpdist.privacy.composition.advanced_step_epsilon`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from dpdist.data.transforms import check_row_bound, check_target_bound
from dpdist.exceptions import ParameterError
from dpdist.privacy.composition import advanced_step_epsilon, rnm_paper_true_epsilon
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_positive

__all__ = ["CALIBRATIONS", "LOSSES", "SELECTIONS", "FWResult", "FWPrivacy", "frank_wolfe", "lipschitz",
           "mean_loss"]

LOSSES = ("logistic", "squared")
SELECTIONS = (None, "laplace", "exponential")
CALIBRATIONS = ("safe", "paper")


def lipschitz(loss: str, lam: float, y_bound: float = 1.0) -> float:
    """L with ||grad l||_inf <= L on the lambda-ball when ||x||_inf <= 1, |y| <= y_bound."""
    if loss == "logistic":
        return 1.0
    if loss == "squared":
        return lam + y_bound
    raise ParameterError(f"loss must be one of {LOSSES}, got {loss!r}")


def derivative(loss: str, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
    return expit(margins) - y if loss == "logistic" else margins - y


def mean_loss(loss: str, margins: np.ndarray, y: np.ndarray) -> float:
    if loss == "logistic":  # BCE with y in {0, 1}: log(1 + e^m) - y m
        return float(np.mean(np.logaddexp(0.0, margins) - y * margins))
    return float(0.5 * np.mean((margins - y) ** 2))


@dataclass
class FWPrivacy:
    """What a private run spends: nominal (epsilon, delta), per-step eps0, and the true total."""

    epsilon: float
    delta: float
    eps0: float
    true_epsilon: float
    sensitivity: float  # Delta of a vertex score (mean gradient)
    lipschitz: float


def privacy_plan(epsilon: float, delta: float, T: int, loss: str, lam: float, n: int, y_bound: float,
                 selection: str | None, calibration: str = "safe") -> FWPrivacy:
    if calibration not in CALIBRATIONS:
        raise ParameterError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    if calibration == "paper" and selection != "laplace":
        raise ParameterError("calibration='paper' exists only for selection='laplace' (the seeds' RNM scale)")
    L = lipschitz(loss, lam, y_bound)
    eps0 = advanced_step_epsilon(epsilon, delta, T)
    true_eps = rnm_paper_true_epsilon(epsilon, delta, T).epsilon if calibration == "paper" else float(epsilon)
    return FWPrivacy(float(epsilon), float(delta), eps0, true_eps, lam * L / n, L)


@dataclass
class FWResult:
    coef: np.ndarray
    iterations: int
    seconds: float
    objective: list[float] = field(default_factory=list)  # mean loss every ``record_every`` steps
    path: list[int] = field(default_factory=list)  # selected signed vertices: +(j+1) or -(j+1)
    privacy: FWPrivacy | None = None


def check_problem(X: sp.spmatrix, y: np.ndarray, loss: str, lam: float, T: int, private: bool = False,
                  y_bound: float = 1.0, record_every: int = 0) -> tuple[sp.csr_matrix, np.ndarray]:
    """Validate the inputs; for a private run also the bounds L assumes (|X_ij| <= 1, |y_i| <= y_bound)
    and that no exact training loss is recorded (it is a statistic of the data without noise)."""
    if loss not in LOSSES:
        raise ParameterError(f"loss must be one of {LOSSES}, got {loss!r}")
    if record_every < 0:
        raise ParameterError(f"record_every must be >= 0, got {record_every}")
    if private and record_every:
        raise ParameterError("record_every records the exact training loss, which a private run must not "
                             "release; it exists for non-private runs only")
    check_positive(lam, "lam")
    check_count(T, "max_iter")
    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).ravel()
    if X.shape[0] != y.shape[0]:
        raise ParameterError(f"X has {X.shape[0]} rows but y has {y.shape[0]} entries")
    if loss == "logistic" and not np.isin(y, (0.0, 1.0)).all():
        raise ParameterError("logistic loss needs labels in {0, 1}")
    if private:  # entries are the stored values when no row repeats a column (no copy of X to sum duplicates)
        check_row_bound(X.data if X.has_canonical_format else X)
        if loss == "squared":
            check_target_bound(y, check_positive(y_bound, "y_bound"))
    return X, y


def exponential_vertex(alpha: np.ndarray, eps0: float, L: float, rng: np.random.Generator) -> tuple[int, float]:
    """(j, sigma) with P ∝ exp(-sigma eps0 alpha_j / (2 L)) over the 2D signed vertices."""
    a = eps0 * alpha / (2.0 * L)
    logw = np.abs(a) + np.log1p(np.exp(-2.0 * np.abs(a)))  # ln(2 cosh a)
    j = int(np.argmax(logw + rng.gumbel(size=a.shape[0])))
    p_descent = 1.0 / (1.0 + math.exp(-2.0 * abs(a[j])))  # sigma = -sign(alpha_j) w.p. e^|a|/(2 cosh a)
    sign = -np.sign(a[j]) if a[j] != 0 else 1.0
    return j, float(sign if rng.random() < p_descent else -sign)


def frank_wolfe(X: sp.spmatrix, y: np.ndarray, lam: float, max_iter: int, loss: str = "logistic",
                selection: str | None = None, epsilon: float | None = None, delta: float | None = None,
                calibration: str = "safe", y_bound: float = 1.0, record_every: int = 0,
                random_state: RandomState = None) -> FWResult:
    """Seed 004 Alg. 1 (standard sparse-aware FW), private when ``selection`` is set."""
    X, y = check_problem(X, y, loss, lam, max_iter, selection is not None, y_bound, record_every)
    if selection not in SELECTIONS:
        raise ParameterError(f"selection must be one of {SELECTIONS}, got {selection!r}")
    n, D = X.shape
    plan = None
    if selection is not None:
        if epsilon is None or delta is None:
            raise ParameterError("a private run needs epsilon and delta")
        plan = privacy_plan(epsilon, delta, max_iter, loss, lam, n, y_bound, selection, calibration)
    rng = check_random_state(random_state)
    Xc = X.tocsc()
    XT = Xc.T  # X^T in CSR form, sharing Xc's arrays (one transposed copy of X, not two)
    w = np.zeros(D)
    margins = np.zeros(n)
    res = FWResult(w, max_iter, 0.0, privacy=plan)
    t0 = time.perf_counter()
    for t in range(1, max_iter + 1):
        alpha = XT @ derivative(loss, margins, y)  # sum-gradient at w_t
        if selection is None:
            j = int(np.argmax(np.abs(alpha)))
            sigma = -1.0 if alpha[j] > 0 else 1.0
        elif selection == "laplace":
            b = (2.0 if calibration == "safe" else 1.0) * plan.sensitivity / plan.eps0
            # score of vertex (j, sigma) to maximise: -<s, g> = -sigma lam alpha_j / n
            base = lam * alpha / n
            noisy = np.concatenate([-base, base]) + rng.laplace(scale=b, size=2 * D)
            k = int(np.argmax(noisy))
            j, sigma = (k, 1.0) if k < D else (k - D, -1.0)
        else:
            j, sigma = exponential_vertex(alpha, plan.eps0, plan.lipschitz, rng)
        eta = 2.0 / (t + 2.0)
        w *= 1.0 - eta
        w[j] += eta * sigma * lam
        margins *= 1.0 - eta
        lo, hi = Xc.indptr[j], Xc.indptr[j + 1]
        margins[Xc.indices[lo:hi]] += eta * sigma * lam * Xc.data[lo:hi]
        res.path.append(int(sigma * (j + 1)))
        if record_every and t % record_every == 0:
            res.objective.append(mean_loss(loss, X @ w, y))
    res.seconds = time.perf_counter() - t0
    return res
