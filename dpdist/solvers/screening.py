"""DP screening rules on the Frank-Wolfe engine: ADP-Screen and RNM-Screen ([KLR23],[KLR25]; docs/algorithms.md §3).

Problem and notation (un-normalised sums, as dpdist's Frank-Wolfe solvers). Minimise
f(Xw) = sum_i l(x_i . w; y_i) over C = {||w||_1 <= lambda}; u = Xw, g = l'(u; y) (the n
per-record derivatives), alpha = X^T g (the solvers' sum-gradient), a_j = ||x_(j)||_2 (column
norms). l is L_f-smooth and mu-strongly convex in each margin on the box |u_i| <= lambda (which
holds for every w in C when |X_ij| <= 1):

* squared, l = (u - y)^2 / 2: L_f = mu = 1, |g_i| <= L_g = lambda + y_bound;
* logistic (BCE, y in {0, 1}): L_f = 1/4, mu = sigma(lambda)(1 - sigma(lambda)),
  |g_i| = |sigma(u_i) - y_i| <= L_g = sigma(lambda).

The papers' normalised loss (1/n) sum_i l is this f divided by n: g, L_f, mu and the Wolfe gap all
scale by 1/n, the radius below does not, so every score here is n times the papers' and every
screening decision (the sign of a score) is the same. n never enters a rule.

Wolfe gap (docs/algorithms.md §3.1): G(w) = max_{z in C} (u - Xz)^T g = u^T g + lambda ||X^T g||_inf >= 0, with
u^T g = sum_i u_i g_i computed over the records.

Rules (``RULES``):

* ``"safe"`` (default; docs/algorithms.md §3.1 "derived safe rule"). KKT on the lambda-ball: every optimum
  w* has u*^T g* = -lambda ||X^T g*||_inf (u*, g* unique: f is strongly convex in u), and
  w*_j != 0 implies |x_(j)^T g*| = ||X^T g*||_inf. So lambda |x_(j)^T g*| + u*^T g* < 0 implies
  w*_j = 0. Strong convexity and first-order optimality give mu/2 ||u - u*||^2 <= f(u) - f(u*)
  <= G(w), i.e. ||u - u*|| <= r = sqrt(2 G / mu), hence ||g - g*|| <= L_f r, ||u*|| <= ||u|| + r
  and
      lambda |x_(j)^T g*| <= lambda |alpha_j| + L_f r lambda a_j,
      u*^T g* <= u^T g + r ||g|| + L_f r (||u|| + r).
  Screen j when  s_j = lambda |alpha_j| + u^T g + r (L_f lambda a_j + L_f ||u|| + ||g||) + L_f r^2 < 0.
  At any w in C this never zeroes a coordinate of an optimum's support
  (tests/solvers/test_screening.py checks it on >= 1,000 instances solved to high precision).
* ``"seed"``: the rule as [KLR23]/[KLR25] print it (Raj et al. Thm 11 without the lambda factors),
  s_j = |alpha_j| + u^T g + L_f (a_j + ||u||) sqrt(G / mu). At the exact optimum with lambda > 1
  it is (1 - lambda) ||X^T g*||_inf < 0 on the support: it can zero true-support coordinates.

Both are one formula: s_j = c_a |alpha_j| + u^T g + r~ B~_j + c_r r~^2 with r = sqrt(k_r G+ / mu),
B_j = b_a a_j + b_u ||u|| + b_g ||g||, G+ = max(G, 0), and (c_a, k_r, b_a, b_u, b_g, c_r) =
(lambda, 2, L_f lambda, L_f, 1, L_f) for "safe", (1, 1, L_f, L_f, 0, 0) for "seed". Per pass the
pieces cost O(n) (u^T g, ||u||, ||g||) plus O(d) (|alpha_j|, ||alpha||_inf); the column norms are
computed once (O(nnz)). The fast solver takes alpha and the margins from its state (for logistic
loss the same stale derivatives its vertex selection uses, exact after a refresh; docs/algorithms.md §2.4).

Sensitivity (ADD/REMOVE): with a public upper bound N = ``n_max`` on the number of records, enforced by
clipping the score's pieces (never by refusing), each score moves by at most
Delta(N) = c_a L_g + lambda L_g + 2 rho_1 b_1 sqrt(N) + 2 c_r k_r lambda L_g / mu, and the d scores by
sqrt(d) Delta(N) in l2; no bound without N exists. The claim and its proof, with the paper calibration's
true loss: [docs/proofs/solvers-screening.md][proof-screening].

Mechanisms (``MODES``), each screening pass at the iterations of a public schedule I (l = |I|):

* ``"exact"``: no noise (non-private baselines): zero every j with s_j < 0.
* ``"adp"`` (ADP-Screen, [KLR25] Alg. 1 = [KLR23] Alg. 1): s + N(0, sigma^2 I_d) released,
  every j with a negative noisy score zeroed (post-processing). Gaussian mechanism, Delta_2 =
  sqrt(d) Delta(N): rho = Delta_2^2 / (2 sigma^2) per pass (Bun & Steinke 2016, Prop. 1.6), l
  passes l rho (``PrivacyLoss.gaussian``); sigma from ``calibrate`` at (eps2, delta2), or from
  a given rho2. Only coordinates with w_j != 0 can change, so the kernels draw the noise of those
  alone: the effective outcomes have the same distribution as with all d noisy scores.
* ``"rnm"`` (RNM-Screen, [KLR25] Alg. 2): j* = argmin_j s_j + Lap(2 Delta / eps_c) (report-noisy-
  min; the scores are non-monotone, so 2 Delta: docs/algorithms.md §1.3), eps_c-DP, i.e. eps_c^2/2-zCDP
  (``PrivacyLoss.pure_steps``); then the threshold test on a fresh value s_j* + Lap(Delta / eps_t),
  eps_t-DP (``PrivacyLoss.laplace``), and w_j* zeroed when it is negative. RNM protects only the
  index, not the noisy minimum's value (docs/algorithms.md §3.4). The per-pass budget is split equally,
  eps_c = eps_t, calibrated jointly at (eps2, delta2) (or rho2 / 2 each).
  Only screening outcomes that change w (w_j* != 0) are recorded in the path (post-processing).

``calibration="paper"`` (reproducing the papers' tables only): the printed rule's noise as the
seeds calibrate it, in sum form: Delta_seed = 4 lambda (1 + lambda) (squared; [KLR25] Thm 3.1) or
2 sigma(lambda) + 2 lambda sigma(lambda) + (1 + lambda) sqrt(lambda / (1 - sigma(lambda))) / 2
(logistic; [KLR23] Eq. 3); ADP: delta_it = delta2 / (l + 1), eps_it = eps2 / (2 sqrt(2 l
ln(1/delta_it))), sigma^2 = 2 d Delta_seed^2 ln(1.25/delta_it) / eps_it^2; RNM: eps_it = eps2 /
sqrt(8 l ln(1/delta2)), Laplace scale b = Delta_seed / eps_it and the threshold test on the
noisy minimum itself. The true loss, from the valid Delta(N), is charged:

* ADP: l Delta_2(N)^2 / (2 sigma^2)-zCDP.
* RNM with the test on the noisy minimum: each pass is pure max(2, d) Delta(N) / b-DP
  (``PrivacyLoss.pure_steps``), d times more than the index alone: the leak docs/algorithms.md §3.4
  names ([proof][proof-screening]).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numba
import numpy as np
from scipy.special import expit

from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import PrivacyLoss, calibrate
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_delta, check_epsilon, check_positive

__all__ = [
    "MODES",
    "RULES",
    "Schedule",
    "ScreeningPlan",
    "rule_constants",
    "rule_scores",
    "schedule_mask",
    "scores_at",
    "screening_budget",
    "screening_plan",
    "seed_sensitivity",
    "sensitivity",
    "uniform_l1_ball",
]

MODES = ("exact", "adp", "rnm")
RULES = ("safe", "seed")
CALIBRATIONS = ("safe", "paper")
MODE_CODES = {None: 0, "exact": 1, "adp": 2, "rnm": 3}

Schedule = int | Sequence[int]


# ------------------------------------------------------------------------ constants


def loss_constants(loss: str, lam: float, y_bound: float) -> tuple[float, float, float]:
    """(L_f, mu, L_g) of the loss on the box |u_i| <= lambda (module doc)."""
    if loss == "squared":
        return 1.0, 1.0, lam + y_bound
    if loss == "logistic":  # sigma(lam) sigma(-lam), not s (1 - s): 1 - s rounds to 0 for lam >= 37
        return 0.25, float(expit(lam) * expit(-lam)), float(expit(lam))
    raise ParameterError(f"loss must be 'logistic' or 'squared', got {loss!r}")


def rule_constants(rule: str, loss: str, lam: float) -> tuple[float, float, float, float, float, float]:
    """(c_a, k_r / mu, b_a, b_u, b_g, c_r) of ``rule`` (module doc: one formula for both rules)."""
    Lf, mu, _ = loss_constants(loss, lam, 1.0)
    if rule == "safe":
        return lam, 2.0 / mu, Lf * lam, Lf, 1.0, Lf
    if rule == "seed":
        return 1.0, 1.0 / mu, Lf, Lf, 0.0, 0.0
    raise ParameterError(f"screen_rule must be one of {RULES}, got {rule!r}")


def sensitivity(rule: str, loss: str, lam: float, y_bound: float, n_max: int) -> tuple[float, float, float]:
    """(Delta(N), R, B_max): the per-coordinate add/remove sensitivity of the clipped score and the
    clip levels of r and B_j, for at most N = ``n_max`` records (module doc, steps 1-7)."""
    _, mu, Lg = loss_constants(loss, lam, y_bound)
    ca, kr_mu, ba, bu, bg, cr = rule_constants(rule, loss, lam)
    N = float(check_count(n_max, "n_max"))
    rho1 = math.sqrt(kr_mu * 2.0 * lam * Lg)
    b1 = ba + bu * lam + bg * Lg
    delta = ca * Lg + lam * Lg + 2.0 * rho1 * b1 * math.sqrt(N) + cr * kr_mu * 2.0 * lam * Lg
    return delta, rho1 * math.sqrt(N), b1 * math.sqrt(N)


def seed_sensitivity(loss: str, lam: float) -> float:
    """The papers' per-coordinate sensitivity in sum form (n times [KLR25] Thm 3.1 / [KLR23] Eq. 3)."""
    if loss == "squared":
        return 4.0 * lam * (1.0 + lam)
    s = float(expit(lam))
    return 2.0 * s + 2.0 * lam * s + 0.25 * (1.0 + lam) * 2.0 * math.sqrt(lam / float(expit(-lam)))


# ------------------------------------------------------------------------- schedule


def schedule_mask(schedule: Schedule, T: int) -> np.ndarray:
    """uint8 mask of length T + 1: 1 at the iterations (1..T) that screen.

    ``schedule``: an int m >= 1 (every m-th iteration: m, 2m, ...; 1 = every iteration) or an
    explicit, non-empty list of distinct iterations in 1..T.
    """
    T = check_count(T, "max_iter")
    mask = np.zeros(T + 1, dtype=np.uint8)
    if isinstance(schedule, (int, np.integer)) and not isinstance(schedule, bool):
        m = int(schedule)
        if not 1 <= m <= T:
            raise ParameterError(f"screen_schedule: every m-th iteration needs 1 <= m <= max_iter ({T}), got {m}")
        mask[m::m] = 1
        return mask
    try:
        if isinstance(schedule, bool):
            raise TypeError
        its = [int(t) for t in schedule]
        if any(isinstance(t, bool) or int(t) != t for t in schedule):
            raise TypeError
    except (TypeError, ValueError):
        raise ParameterError(
            f"screen_schedule must be an int (every m-th iteration) or a list of iterations, got {schedule!r}"
        ) from None
    if not its:
        raise ParameterError("screen_schedule: the list of iterations is empty")
    if len(set(its)) != len(its):
        raise ParameterError("screen_schedule: the list of iterations has duplicates")
    if min(its) < 1 or max(its) > T:
        raise ParameterError(f"screen_schedule: iterations must lie in 1..max_iter ({T})")
    mask[its] = 1
    return mask


# ---------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class ScreeningPlan:
    """Everything a solver needs to screen, and what it costs.

    ``coef`` holds (c_a, k_r/mu, b_a, b_u, b_g, c_r, R, B_max, lambda) for the kernels; ``sigma``
    is ADP's Gaussian standard deviation, ``rnm_scale`` / ``threshold_scale`` the Laplace scales
    of RNM's choice and threshold value (threshold_scale 0: the papers' test on the noisy minimum).
    """

    mode: str
    rule: str
    mask: np.ndarray
    coef: np.ndarray
    calibration: str = "safe"
    n_max: int | None = None
    sensitivity: float = 0.0  # Delta(N), per coordinate
    sigma: float = 0.0
    rnm_scale: float = 0.0
    threshold_scale: float = 0.0
    loss: PrivacyLoss | None = None  # charged (None for "exact")
    claimed_epsilon: float | None = None  # paper mode: what the papers claim
    d: int = 0  # the features it was calibrated for (ADP's sigma grows as sqrt(d)); a solver refuses any other

    def check_features(self, n_features: int) -> None:
        """Refuse a plan calibrated for another number of features than the data's."""
        if self.d != n_features:
            raise ParameterError(f"the screening plan is calibrated for {self.d} features, not {n_features}")

    @property
    def passes(self) -> int:
        return int(self.mask.sum())

    @property
    def code(self) -> int:
        return MODE_CODES[self.mode]

    @property
    def true_epsilon(self) -> float | None:
        return None if self.loss is None else self.loss.epsilon

    def details(self) -> dict:
        """What the ledger shows beside the charge (public parameters and calibrated scales)."""
        return {
            "screening": self.mode,
            "screen_rule": self.rule,
            "screen_passes": self.passes,
            "screen_calibration": self.calibration,
            "n_max": self.n_max,
            "screen_sensitivity": self.sensitivity,
            "screen_sigma": self.sigma,
            "screen_rnm_scale": self.rnm_scale,
            "screen_threshold_scale": self.threshold_scale,
            "screen_claimed_epsilon": self.claimed_epsilon,
        }


def screening_budget(epsilon: float | None, delta: float | None, rho: float | None) -> tuple:
    """(eps2, delta2, None) or (None, None, rho): the screening's budget, checked (ParameterError naming it)."""
    if rho is not None:
        if epsilon is not None:
            raise ParameterError("give screen_epsilon/screen_delta or screen_rho, not both")
        return None, None, check_positive(rho, "screen_rho")
    if epsilon is None or delta is None:
        raise ParameterError("private screening needs screen_epsilon and screen_delta (or screen_rho)")
    return check_epsilon(epsilon, "screen_epsilon"), check_delta(delta, "screen_delta", allow_zero=False), None


def screening_plan(
    mode: str,
    loss: str,
    lam: float,
    d: int,
    T: int,
    schedule: Schedule = 1,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    rule: str = "safe",
    calibration: str = "safe",
    y_bound: float = 1.0,
    n_max: int | None = None,
    standalone_delta: float | None = None,
) -> ScreeningPlan:
    """Calibrate one screening configuration (module doc) for d features and T iterations.

    ``epsilon``/``delta`` (eps2, delta2) is the screening's whole budget, or ``rho`` its zCDP form
    (then ``standalone_delta`` is the delta its stand-alone (eps, delta) is stated at).
    """
    if mode not in MODES:
        raise ParameterError(f"screening must be one of {MODES}, got {mode!r}")
    if calibration not in CALIBRATIONS:
        raise ParameterError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    lam = check_positive(lam, "lam")
    d = check_count(d, "n_features")
    mask = schedule_mask(schedule, T)
    ca, kr_mu, ba, bu, bg, cr = rule_constants(rule, loss, lam)
    if mode == "exact":
        coef = np.array([ca, kr_mu, ba, bu, bg, cr, math.inf, math.inf, lam])
        return ScreeningPlan("exact", rule, mask, coef, calibration, d=d)
    if n_max is None:
        raise ParameterError(
            "private screening needs n_max, a public upper bound on the number of training records "
            "(the score's sensitivity grows as sqrt(n_max); see dpdist.solvers.screening)"
        )
    y_bound = check_positive(y_bound, "y_bound")
    eps, dlt, rho = screening_budget(epsilon, delta, rho)
    Delta, R, Bmax = sensitivity(rule, loss, lam, y_bound, n_max)
    coef = np.array([ca, kr_mu, ba, bu, bg, cr, R, Bmax, lam])
    at = dlt if dlt is not None else standalone_delta
    plan = ScreeningPlan(mode, rule, mask, coef, calibration, n_max, Delta, d=d)  # calibrated below
    if calibration == "paper":
        if eps is None:
            raise ParameterError(
                "calibration='paper' follows the papers' (eps2, delta2): give screen_epsilon and screen_delta"
            )
        assert dlt is not None  # given with eps (_budget)
        return _paper_plan(plan, eps, dlt, seed_sensitivity(loss, lam))
    return _safe_plan(plan, (eps, dlt, rho, at))


def _paper_plan(plan: ScreeningPlan, eps: float, dlt: float, Dseed: float) -> ScreeningPlan:
    """``plan`` (its mode, rule, schedule, constants, n_max, sensitivity Delta and d) at the papers'
    calibration ([KLR25]'s (eps2, delta2) with their sensitivity ``Dseed``), and the privacy loss it
    truly has under the corrected sensitivity Delta (docs/algorithms.md §9)."""
    n_screens, Delta, d = plan.passes, plan.sensitivity, plan.d
    if plan.mode == "adp":
        d_it = dlt / (n_screens + 1)
        e_it = eps / (2.0 * math.sqrt(2.0 * n_screens * math.log(1.0 / d_it)))
        sigma = math.sqrt(d) * Dseed * math.sqrt(2.0 * math.log(1.25 / d_it)) / e_it
        true = PrivacyLoss.zcdp(n_screens * d * Delta * Delta / (2.0 * sigma * sigma), dlt)
        return replace(plan, sigma=sigma, loss=true, claimed_epsilon=eps)
    e_it = eps / math.sqrt(8.0 * n_screens * math.log(1.0 / dlt))
    b = Dseed / e_it
    true = PrivacyLoss.pure_steps(max(2.0, float(d)) * Delta / b, n_screens, delta=dlt)
    return replace(plan, rnm_scale=b, threshold_scale=0.0, loss=true, claimed_epsilon=eps)


def _safe_plan(plan: ScreeningPlan, budget: tuple) -> ScreeningPlan:
    """``plan`` (as for ``_paper_plan``) at the safe calibration: the noise scale that spends exactly the
    budget ``(eps, delta, rho, at)`` (``at``: the delta a zCDP budget's stand-alone epsilon is stated at)
    over the passes."""
    eps, dlt, rho, at = budget
    n_screens, Delta = plan.passes, plan.sensitivity
    if plan.mode == "adp":

        def make(x: float) -> PrivacyLoss:  # x = Delta_2 / sigma
            return PrivacyLoss.zcdp(n_screens * x * x / 2.0, at)

        x = math.sqrt(2.0 * rho / n_screens) if rho is not None else calibrate(make, eps, dlt, upper=1e3)
        return replace(plan, sigma=math.sqrt(plan.d) * Delta / x, loss=make(x))

    def make_rnm(x: float) -> PrivacyLoss:  # x = per-pass epsilon of the choice and of the threshold
        return PrivacyLoss.compose(PrivacyLoss.pure_steps(x, n_screens, delta=at), PrivacyLoss.laplace(x, n_screens))

    x = math.sqrt(rho / n_screens) if rho is not None else calibrate(make_rnm, eps, dlt, upper=float(eps))
    return replace(plan, rnm_scale=2.0 * Delta / x, threshold_scale=Delta / x, loss=make_rnm(x))


def uniform_l1_ball(d: int, lam: float, random_state: RandomState = None) -> np.ndarray:
    """A point drawn uniformly from {||w||_1 <= lam} ([KLR23]/[KLR25]'s "random vector in the lambda-ball";
    the papers do not say which distribution: this one is data-independent, as privacy needs)."""
    rng = check_random_state(random_state)
    e = rng.exponential(size=d + 1)  # uniform on the simplex of dimension d, then random signs
    return lam * (e[:d] / e.sum()) * rng.choice([-1.0, 1.0], size=d)


# ------------------------------------------------------------------ scores (numpy)


def scores_at(X, y: np.ndarray, w: np.ndarray, loss: str, coef: np.ndarray) -> np.ndarray:
    """All d scores of the rule ``coef`` at w, from the exact gradient (O(nnz + d)); for tests and
    experiments (the solvers compute the same pieces from their state)."""
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    u = X @ w
    g = expit(u) - y if loss == "logistic" else u - y
    a = np.sqrt(np.asarray(X.multiply(X).sum(axis=0)).ravel())
    return rule_scores(X.T @ g, a, float(u @ g), float(np.linalg.norm(u)), float(np.linalg.norm(g)), coef)


def rule_scores(
    alpha: np.ndarray, colnorm: np.ndarray, ug: float, unorm: float, gnorm: float, coef: np.ndarray
) -> np.ndarray:
    """All d scores s_j from the pieces (reference implementation; the kernels compute the same)."""
    const, rt, Bc = _pass_constants(alpha, ug, unorm, gnorm, coef)
    ca, ba, Bmax = coef[0], coef[2], coef[7]
    return ca * np.abs(alpha) + const + rt * np.minimum(ba * colnorm + Bc, Bmax)


# ----------------------------------------------------------------- numba kernels


@numba.njit(cache=True)
def _pass_constants(alpha, ug, unorm, gnorm, coef):
    """(u^T g + c_r r~^2, r~, b_u ||u|| + b_g ||g||) of one pass; G from alpha and u^T g."""
    amax = 0.0
    for k in range(alpha.shape[0]):
        amax = max(amax, abs(alpha[k]))
    G = max(ug + coef[8] * amax, 0.0)
    rt = min(math.sqrt(coef[1] * G), coef[6])
    return ug + coef[5] * rt * rt, rt, coef[3] * unorm + coef[4] * gnorm


@numba.njit(cache=True)
def _score(alpha, colnorm, j, const, rt, Bc, coef):
    return coef[0] * abs(alpha[j]) + const + rt * min(coef[2] * colnorm[j] + Bc, coef[7])


@numba.njit(cache=True)
def _laplace(b, rng):
    """Lap(b) by the inverse CDF: -b sign(u) ln(1 - 2|u|), u uniform on (-1/2, 1/2)."""
    u = rng.random() - 0.5
    while u == -0.5:
        u = rng.random() - 0.5
    return b * math.log(1.0 + 2.0 * u) if u < 0.0 else -b * math.log(1.0 - 2.0 * u)


@numba.njit(cache=True)
def _screen_set(alpha, colnorm, wt, const, rt, Bc, coef, sigma, out, rng):
    """ADP (sigma > 0) or exact (sigma = 0): the coordinates j with w_j != 0 and s_j (+ N(0, sigma^2)) < 0.

    Decisions for coordinates already at zero change nothing, so their noise is not drawn (the
    effective outcomes have the same distribution as with all d noisy scores). Returns the count."""
    k = 0
    for j in range(alpha.shape[0]):
        if wt[j] == 0.0:
            continue
        s = _score(alpha, colnorm, j, const, rt, Bc, coef)
        if sigma > 0.0:
            s += sigma * rng.standard_normal()
        if s < 0.0:
            out[k] = j
            k += 1
    return k


@numba.njit(cache=True)
def _screen_rnm(alpha, colnorm, const, rt, Bc, coef, b_rnm, b_th, rng):
    """RNM-Screen's pass: (j*, screened). j* = argmin_j s_j + Lap(b_rnm) over all d coordinates
    (:func:`_noisy_argmin`); screened: s_j* + Lap(b_th) < 0 (fresh value), or the noisy minimum < 0
    when b_th == 0 (the papers)."""
    D = alpha.shape[0]
    jbest, best = _noisy_argmin(alpha, colnorm, rt, Bc, coef, b_rnm, max(16, D // 16), rng)
    if b_th == 0.0:
        return jbest, best + const < 0.0
    return jbest, _score(alpha, colnorm, jbest, const, rt, Bc, coef) + _laplace(b_th, rng) < 0.0


@numba.njit(cache=True)
def _noisy_argmin(alpha, colnorm, rt, Bc, coef, b, kmax, rng):
    """(argmin_j, min_j) of v_j + Z_j, v_j = c_a |alpha_j| + r~ B~_j, Z_j iid Lap(b) -- drawn exactly, lazily.

    The D noise values are drawn from the smallest up: the order statistics of D uniforms from the
    bottom (U_(1) = 1 - V^(1/D), 1 - U_(k+1) = (1 - U_(k)) V^(1/(D - k)), in log space), each mapped
    through the Laplace inverse CDF and given to a uniformly random coordinate not yet drawn (a
    uniformly random assignment of the sorted values is the iid draw). Once the next value z
    satisfies min_j v_j + z >= the best noisy value so far, no coordinate without a value can win,
    so the argmin (and its noisy value) are those of the full draw. When the noise dominates the
    spread of the v_j this stops after a few values: the pass costs O(D) arithmetic (the minimum of
    the v_j) and O(1) random numbers instead of D Laplace draws. After ``kmax`` values the rest are
    drawn directly, each from the Laplace law conditioned on being above the last order statistic
    (exact as well), so the pass never costs much more than drawing all D."""
    D = alpha.shape[0]
    ca, ba, Bmax = coef[0], coef[2], coef[7]
    vmin = math.inf
    for j in range(D):
        vmin = min(vmin, ca * abs(alpha[j]) + rt * min(ba * colnorm[j] + Bc, Bmax))
    mark = np.zeros(D, dtype=np.uint8)
    best, jbest = math.inf, 0
    logw = 0.0  # ln(1 - U_(k))
    k = 0
    while k < D:
        if k == kmax:  # the rest directly: U ~ Uniform(U_(k), 1), i.e. ln(1 - U) = logw + ln V
            for j in range(D):
                if mark[j]:
                    continue
                lw = logw + math.log(_unit(rng))
                u = -math.expm1(lw)
                z = b * math.log(2.0 * u) if u <= 0.5 else -b * (_LN2 + lw)
                val = ca * abs(alpha[j]) + rt * min(ba * colnorm[j] + Bc, Bmax) + z
                if val < best:
                    best, jbest = val, j
            break
        logw += math.log(_unit(rng)) / (D - k)
        u = -math.expm1(logw)  # U_(k+1)
        z = b * math.log(2.0 * u) if u <= 0.5 else -b * (_LN2 + logw)
        if vmin + z >= best:
            break
        j = int(rng.random() * D)
        while mark[j]:
            j = int(rng.random() * D)
        mark[j] = 1
        k += 1
        val = ca * abs(alpha[j]) + rt * min(ba * colnorm[j] + Bc, Bmax) + z
        if val < best:
            best, jbest = val, j
    return jbest, best


_LN2 = math.log(2.0)


@numba.njit(cache=True)
def _unit(rng):
    """Uniform on (0, 1)."""
    v = rng.random()
    while v == 0.0:
        v = rng.random()
    return v
