"""Standard sparse-aware.

References: DP) Frank-Wolfe over the L1 ball ([RKL23] Alg. 1; Talwar et al. 2015; docs/algorithms.md §2.2-2.3.

Minimise the mean loss (1/n) sum_i l(x_i . w; y_i) over ||w||_1 <= lambda, from w = 0, for T
steps. Each step computes the sum-gradient alpha = X^T l'(X w; y) from scratch (two sparse
products, O(N S_c)), picks a vertex s = sigma lambda e_j of the ball and moves
w <- (1 - eta) w + eta s, eta = 2/(t + 2).

Losses (``LOSSES``), with the bounds ||x_i||_inf <= 1 and |y_i| <= b_y enforced by the caller:

* "logistic": binary cross-entropy with labels in {0, 1}; l' = sigmoid(m) - y; L = 1.
* "squared": l = (m - y)^2 / 2; l' = m - y; L = lambda + b_y (docs/algorithms.md §2.2: the papers' L = 1 is
  wrong for lambda > 1).

L bounds ||grad l||_inf, so adding or removing one record moves each coordinate of the
sum-gradient alpha = X^T l'(X w; y) by at most L (ADD/REMOVE; n never enters the mechanisms).

Vertex selection (``selection``):

* None: the exact minimiser of <s, g>: j = argmax |alpha_j|, sigma = -sign(alpha_j).
* "laplace": report-noisy-max over the 2D signed vertices with Laplace noise (Talwar et al.),
  scores -sigma alpha_j. They are non-monotone, so the correct scale is b = 2 L / eps0
  (``calibration="safe"``, default): eps0-DP per step. ``calibration="paper"`` uses the papers'
  L / eps0, which is 2 eps0-DP per step, and the true total is computed and charged (docs/algorithms.md §2.2 FLAG).
* "exponential": the exponential mechanism over signed vertices, P(j, sigma) ∝
  exp(-sigma a_j), a_j = eps0 alpha_j / (2 L) (docs/algorithms.md §2.2, exactly eps0-DP per step), drawn by
  Gumbel-max over the D log-weights ln(2 cosh a_j) and then the sign. This is the
  distribution the fast solver samples.

Per-step budget (:func:`privacy_plan`), from the tight accountant (:mod:`dpdist.privacy.loss`):

* "exponential", ``calibration="safe"``: each step is an exponential mechanism, hence
  eps0-bounded-range and eps0^2/8-zCDP (Cesar & Rogers 2021, Lemma 3.4); the T adaptive steps
  are T eps0^2/8-zCDP. eps0 is the largest value whose conversion at delta (Canonne, Kamath &
  Steinke 2020) is within epsilon: about 4.6x [RKL23]'s eps / sqrt(8 T ln(1/delta)) at
  T = 4000, delta = 1e-6.
* "laplace", ``"safe"``: each step is pure eps0-DP (not bounded-range): T eps0^2/2-zCDP.
* ``calibration="paper"``: [RKL23]'s rule eps0 = eps / sqrt(8 T ln(1/delta)) (advanced
  composition, exact bound checked) with the papers' noise; the release is charged its true
  loss (T bounded-range eps0 steps for the EM, T pure 2 eps0 steps for Laplace at the papers'
  scale), and ``true_epsilon`` reports it. [KLR23]/[KLR25] also take squared loss to be
  1-Lipschitz (docs/algorithms.md §2.2 FLAG); ``lipschitz`` (paper mode only) sets the L of the noise to theirs,
  and the charge scales each step's epsilon by the true L over it.

Screening (``screening``, a :class:`dpdist.solvers.screening.ScreeningPlan`): after the move of
every scheduled iteration the rule's scores are computed from the exact gradient and the chosen
coordinates are zeroed (ADP-Screen, RNM-Screen or the non-private rule); the zeroings that
change w are recorded in ``FWResult.screened`` as [t, j]. ``init``: a public starting point in
the ball ([KLR23]/[KLR25] start from a random one, :func:`dpdist.solvers.screening.uniform_l1_ball`).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numba
import numpy as np
import scipy.sparse as sp
from scipy.special import expit

from dpdist.data.transforms import check_row_bound, check_target_bound, value_dtype
from dpdist.exceptions import ParameterError
from dpdist.privacy.composition import advanced_step_epsilon
from dpdist.privacy.loss import PrivacyLoss, calibrate
from dpdist.solvers.screening import ScreeningPlan, _pass_constants, _screen_rnm, _screen_set
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_positive

__all__ = [
    "CALIBRATIONS",
    "LOSSES",
    "SELECTIONS",
    "FWResult",
    "FWPrivacy",
    "Progress",
    "frank_wolfe",
    "lipschitz",
    "mean_loss",
]

#: ``progress(done, total)``: completed iterations of a solve, for the operator's display only
Progress = Callable[[int, int], None]

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
    """What a private run spends: target (epsilon, delta), per-step eps0, and its privacy loss."""

    epsilon: float
    delta: float
    eps0: float
    loss: PrivacyLoss  # what the release is charged (tight form)
    lipschitz: float
    calibration: str = "safe"

    @property
    def true_epsilon(self) -> float:
        """The release's epsilon at ``delta`` (above the target only in the papers' Laplace "paper" mode)."""
        return self.loss.epsilon


def privacy_plan(
    epsilon: float,
    delta: float,
    T: int,
    loss: str,
    lam: float,
    y_bound: float,
    selection: str | None,
    calibration: str = "safe",
    lipschitz_noise: float | None = None,
) -> FWPrivacy:
    """The per-step eps0 and the privacy loss of T private Frank-Wolfe steps (module doc).

    ``lipschitz_noise`` (paper mode only): the L the noise is scaled with ([KLR23]/[KLR25]: 1);
    the charge uses the true L."""
    if calibration not in CALIBRATIONS:
        raise ParameterError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    if selection not in ("laplace", "exponential"):
        raise ParameterError(f"a private plan needs selection 'laplace' or 'exponential', got {selection!r}")
    L = lipschitz(loss, lam, y_bound)
    T = check_count(T, "max_iter")
    if lipschitz_noise is not None and calibration != "paper":
        raise ParameterError("lipschitz_noise (the papers' L) exists for calibration='paper' only")
    Ln = L if lipschitz_noise is None else check_positive(lipschitz_noise, "lipschitz_noise")
    step = PrivacyLoss.bounded_range if selection == "exponential" else PrivacyLoss.pure_steps
    if calibration == "paper":
        eps0 = advanced_step_epsilon(epsilon, delta, T)
        # the papers' Laplace scale L/eps0 on non-monotone scores is 2 eps0-DP per step; noise scaled
        # with Ln < L is L/Ln times weaker
        charged = step((eps0 if selection == "exponential" else 2.0 * eps0) * L / Ln, T, delta=delta)
    else:
        eps0 = _calibrated_eps0(float(epsilon), float(delta), T, selection)
        charged = step(eps0, T, delta=delta)
    return FWPrivacy(float(epsilon), float(delta), eps0, charged, Ln, calibration)


@functools.lru_cache(maxsize=256)
def _calibrated_eps0(epsilon: float, delta: float, T: int, selection: str) -> float:
    """The largest per-step eps0 whose T steps compose to (epsilon, delta) (a pure function: cached)."""
    step = PrivacyLoss.bounded_range if selection == "exponential" else PrivacyLoss.pure_steps
    return calibrate(lambda e: step(e, T, delta=delta), epsilon, delta, upper=epsilon)


@dataclass
class FWResult:
    coef: np.ndarray
    iterations: int
    seconds: float
    objective: list[float] = field(default_factory=list)  # mean loss every ``record_every`` steps
    path: list[int] = field(default_factory=list)  # selected signed vertices: +(j+1) or -(j+1)
    privacy: FWPrivacy | None = None
    screened: list[list[int]] = field(default_factory=list)  # [t, j]: w_j zeroed after step t's move


def check_init(init: np.ndarray | None, D: int, lam: float) -> np.ndarray:
    """The starting point: 0, or a given public point of the lambda-ball."""
    if init is None:
        return np.zeros(D)
    w0 = np.array(init, dtype=np.float64).ravel()
    if w0.shape != (D,) or not np.all(np.isfinite(w0)) or np.abs(w0).sum() > lam * (1 + 1e-12):
        raise ParameterError(f"init must be a finite vector of {D} entries with ||init||_1 <= lam")
    return w0


_NORM_COLUMNS = 1 << 16  # columns per range of column_norms' sums


def column_norms(X: sp.spmatrix) -> np.ndarray:
    """||x_(j)||_2 of every column (O(nnz); the screening rules' a_j), the squares in float64 and
    summed by numpy, a range of columns at a time (no temporary of X's size). The same bits as one
    ``np.add.reduceat`` over the whole array: its pairwise sums group a segment's terms by their
    number, so each column's segment is the same -- ending where the next column starts, and the
    matrix's last column taking the appended 0, as over the whole array."""
    Xc = sp.csc_matrix(X)
    ptr, D = Xc.indptr, Xc.shape[1]
    out = np.zeros(D)
    for c0 in range(0, D, _NORM_COLUMNS):
        c1 = min(D, c0 + _NORM_COLUMNS)
        a, b = ptr[c0], ptr[c1]
        sq = np.append(np.square(Xc.data[a:b], dtype=np.float64), 0.0)  # the 0: empty trailing columns' start
        starts = ptr[c0 : c1 + (c1 < D)] - a  # a range before the last: its last column ends at b
        out[c0:c1] = np.add.reduceat(sq, starts)[: c1 - c0] * (np.diff(ptr[c0 : c1 + 1]) > 0)
    return np.sqrt(out)


def check_problem(
    X: sp.spmatrix,
    y: np.ndarray,
    loss: str,
    lam: float,
    T: int,
    private: bool = False,
    y_bound: float = 1.0,
    record_every: int = 0,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Validate the inputs; for a private run also the bounds L assumes (|X_ij| <= 1, |y_i| <= y_bound)
    and that no exact training loss is recorded (it is a statistic of the data without noise)."""
    if loss not in LOSSES:
        raise ParameterError(f"loss must be one of {LOSSES}, got {loss!r}")
    if record_every < 0:
        raise ParameterError(f"record_every must be >= 0, got {record_every}")
    if private and record_every:
        raise ParameterError(
            "record_every records the exact training loss, which a private run must not "
            "release; it exists for non-private runs only"
        )
    check_positive(lam, "lam")
    check_count(T, "max_iter")
    X = sp.csr_matrix(X, dtype=value_dtype(X))
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


def _check_selection(selection: str | None, screening: ScreeningPlan | None) -> None:
    """The selection mode and its pairing with the screening plan."""
    if selection not in SELECTIONS:
        raise ParameterError(f"selection must be one of {SELECTIONS}, got {selection!r}")
    if selection is not None and screening is not None and screening.mode == "exact":
        raise ParameterError(
            f"screening plan mode 'exact' is not private and does not go with the private "
            f"selection={selection!r}: screen private runs with 'rnm' or 'adp'"
        )


def _standard_vertex(
    alpha: np.ndarray, selection: str | None, calibration: str, plan: FWPrivacy | None, rng: np.random.Generator
) -> tuple[int, float]:
    """Alg. 1's vertex (j, sigma) from the sum-gradient alpha: the descent argmax without privacy,
    Laplace report-noisy-max over the 2D signed vertices (scale 2 L / eps0, or L / eps0 under the
    papers' calibration), or the exponential mechanism."""
    if selection is None:
        j = int(np.argmax(np.abs(alpha)))
        return j, -1.0 if alpha[j] > 0 else 1.0
    assert plan is not None  # a private selection always has its plan
    if selection == "laplace":
        D = alpha.shape[0]
        b = (2.0 if calibration == "safe" else 1.0) * plan.lipschitz / plan.eps0
        # score of vertex (j, sigma) to maximise: -sigma alpha_j (sensitivity L)
        noisy = np.concatenate([-alpha, alpha]) + rng.laplace(scale=b, size=2 * D)
        k = int(np.argmax(noisy))
        return (k, 1.0) if k < D else (k - D, -1.0)
    return exponential_vertex(alpha, plan.eps0, plan.lipschitz, rng)


def _zero_coordinates(zero: list[int], Xc: sp.csc_matrix, w: np.ndarray, margins: np.ndarray) -> None:
    """w_k <- 0 for the screened coordinates, in order, and the margins X w with them."""
    for k in zero:
        lo, hi = Xc.indptr[k], Xc.indptr[k + 1]
        margins[Xc.indices[lo:hi]] -= w[k] * Xc.data[lo:hi]
        w[k] = 0.0


def frank_wolfe(
    X: sp.spmatrix,
    y: np.ndarray,
    lam: float,
    max_iter: int,
    loss: str = "logistic",
    selection: str | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    calibration: str = "safe",
    y_bound: float = 1.0,
    record_every: int = 0,
    random_state: RandomState = None,
    screening: ScreeningPlan | None = None,
    init: np.ndarray | None = None,
    lipschitz_noise: float | None = None,
    progress: Progress | None = None,
) -> FWResult:
    """Alg. 1 of [RKL23] (standard sparse-aware FW), private when ``selection`` is set; ``screening``
    zeroes coordinates at the scheduled iterations (module doc); ``progress(done, max_iter)`` is
    called after every iteration."""
    X, y = check_problem(
        X,
        y,
        loss,
        lam,
        max_iter,
        selection is not None or (screening is not None and screening.loss is not None),
        y_bound,
        record_every,
    )
    _check_selection(selection, screening)
    n, D = X.shape
    plan = None
    if selection is not None:
        if epsilon is None or delta is None:
            raise ParameterError("a private run needs epsilon and delta")
        plan = privacy_plan(epsilon, delta, max_iter, loss, lam, y_bound, selection, calibration, lipschitz_noise)
    rng = check_random_state(random_state)
    if not X.has_canonical_format:  # the bounds were checked on the summed entries: fit those
        X = X.copy()
        X.sum_duplicates()
    Xc = X.tocsc()
    XT = Xc.T  # X^T in CSR form, sharing Xc's arrays (one transposed copy of X, not two)
    w = check_init(init, D, lam)
    margins = _matvec(X, w)
    res = FWResult(w, max_iter, 0.0, privacy=plan)
    if screening is not None:
        if screening.mask.shape[0] != max_iter + 1:
            raise ParameterError(f"the screening plan is for {screening.mask.shape[0] - 1} iterations, not {max_iter}")
        screening.check_features(X.shape[1])
        colnorm = column_norms(Xc)
        zero_buf = np.empty(D, dtype=np.int64)
    t0 = time.perf_counter()
    cached = None  # the gradient a screening pass computed at the current w (reused when it zeroed nothing)
    for t in range(1, max_iter + 1):
        alpha = _matvec(XT, derivative(loss, margins, y)) if cached is None else cached  # sum-gradient at w_t
        cached = None
        j, sigma = _standard_vertex(alpha, selection, calibration, plan, rng)
        eta = 2.0 / (t + 2.0)
        w *= 1.0 - eta
        w[j] += eta * sigma * lam
        margins *= 1.0 - eta
        lo, hi = Xc.indptr[j], Xc.indptr[j + 1]
        margins[Xc.indices[lo:hi]] += np.float64(eta * sigma * lam) * Xc.data[lo:hi]  # float64 with float32 X
        res.path.append(int(sigma * (j + 1)))
        if screening is not None and screening.mask[t]:
            zero, cached = _screen_standard(screening, XT, y, loss, w, margins, colnorm, zero_buf, rng)
            if len(zero):
                _zero_coordinates(zero, Xc, w, margins)
                res.screened.extend([t, int(k)] for k in zero)
                cached = None
        if record_every and t % record_every == 0:
            res.objective.append(mean_loss(loss, _matvec(X, w), y))
        if progress is not None:
            progress(t, max_iter)
    res.seconds = time.perf_counter() - t0
    return res


@numba.njit(cache=True)
def _csr_matvec(ptr, idx, val, g):
    out = np.empty(ptr.shape[0] - 1)
    for i in range(ptr.shape[0] - 1):
        s = 0.0
        for p in range(ptr[i], ptr[i + 1]):
            s += val[p] * g[idx[p]]
        out[i] = s
    return out


def _matvec(A: sp.csr_matrix, g: np.ndarray) -> np.ndarray:
    """A @ g in float64 for a CSR matrix of float64 or float32 values: scipy's product for float64
    (a little faster than the kernel on URL's train half), the numba kernel
    for float32, which adds each row's products in scipy's order (the same bits as scipy on the
    float64 values) without the float64 copy of all the values scipy makes for float32 (a
    Webspam-sized train half: 8 GB an iteration)."""
    g = np.asarray(g, dtype=np.float64)
    if A.dtype == np.float64:
        return A @ g
    return _csr_matvec(A.indptr, A.indices, A.data, g)


def _screen_standard(
    plan: ScreeningPlan,
    XT: sp.csr_matrix,
    y: np.ndarray,
    loss: str,
    w: np.ndarray,
    margins: np.ndarray,
    colnorm: np.ndarray,
    buf: np.ndarray,
    rng: np.random.Generator,
) -> tuple[list[int], np.ndarray]:
    """One screening pass at w from the exact gradient: (the coordinates to zero (w_j != 0 only), that gradient)."""
    g = derivative(loss, margins, y)
    alpha = _matvec(XT, g)
    const, rt, Bc = _pass_constants(
        alpha, float(margins @ g), float(np.linalg.norm(margins)), float(np.linalg.norm(g)), plan.coef
    )
    if plan.mode == "rnm":
        j, screened = _screen_rnm(alpha, colnorm, const, rt, Bc, plan.coef, plan.rnm_scale, plan.threshold_scale, rng)
        return ([int(j)] if screened and w[j] != 0.0 else []), alpha
    k = _screen_set(alpha, colnorm, w, const, rt, Bc, plan.coef, plan.sigma if plan.mode == "adp" else 0.0, buf, rng)
    return buf[:k].tolist(), alpha
