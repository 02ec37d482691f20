"""Hinge objective on a support with a certified tolerance, and its cut (seed App. C; docs/algorithms.md §6.5, C.2).

    F_h(S) = min_{||beta|| <= r} sum_i max(0, 1 - y_i x_{i,S}^T beta) + ridge ||beta||^2

The paper's code runs projected subgradient steps (step 1/sqrt(k+1)) and takes the last value,
which is neither exact nor certified. Here:

Solve. Newton's method on the smoothed hinge H_h(m) = 0 (m >= 1), (1 - m)^2/(2h)
(1 - h < m < 1), 1 - m - h/2 (m <= 1 - h), whose every step minimises the quadratic model
over the ball exactly (eigendecomposition + Newton on the ball multiplier, as for least
squares), with an Armijo backtracking line search; h shrinks tenfold (down to ``_H_MIN``) and
Newton goes on until the gap below is at most ``tol``, with no cap on its rounds: a private
release must not stop on a condition of the data (``base`` module), so the solve only ever returns
certified. It ends: the smoothed optimum is within n h / 2 of the hinge's, the problem is strongly
convex (ridge > 0), Newton with backtracking converges on it, and the dual point of the
certificate converges with the iterates, so the gap falls below any tol > n _H_MIN / 2 plus the
rounding of the sums over the records (compensated, ``_certify``: about 2^-53 of the objective's
scale). ``tol`` is at least 1e-7 of the sensitivity (``base``), so that holds for every n below
about 2 10^6 at the floor and 2 10^9 at the default tolerance (1e-3). Were rounding ever to keep a gap above
``tol``, the solve would go on and the release would never be published: its time (the
operator's terminal) is the only trace, the channel docs/privacy.md lists.

Certificate. max(0, 1 - m) = max_{a in [0,1]} a (1 - m), so for every alpha in [0, 1]^n and
mu >= 0 (minimax over compact convex sets, then the ball multiplier), with v = X^T (alpha * y),

    F_h(T) >= L(1_T) = sum_i alpha_i - sum_{j in T} v_j^2 / (4 (ridge + mu)) - mu r^2

for every support T (the inner minimum over beta_T of (ridge + mu)||beta_T||^2 - v_T^T beta_T).
alpha is the smoothed hinge's derivative at the computed beta and mu the best multiplier for
v_S; ``value`` (the hinge objective at the feasible beta) minus ``bound`` = L(1_S) is the
certified error. L is affine in z = 1_T and below F_h at every binary z, so it is itself a
valid outer-approximation cut, tight at S when the solve is: slopes -v_j^2/(4 (ridge + mu))
for every j. (The perspective of the ball, sum_j beta_j^2/z_j <= r^2, makes them
(ridge + mu)/ridge times steeper off S than the tangent of the ridge's perspective alone,
the paper's cut -v_j^2/(4 ridge); the hinge ball is usually active, mu >> 0.)
"""

from __future__ import annotations

import math

import numba
import numpy as np

from dpdist.selection.best_subset.objective import Problem

__all__ = ["hinge_cut", "hinge_evaluate", "hinge_swap_values"]

# the smallest smoothing width: below it 1/h in the Newton model loses the precision the
# certificate needs; the smoothing error n h / 2 is far below any tolerance there
_H_MIN = 1e-13


@numba.njit(cache=True)
def _ball_qp(H: np.ndarray, c: np.ndarray, r: float) -> np.ndarray:
    """argmin_{||b|| <= r} 1/2 b^T H b - c^T b for one PD matrix (Newton on the multiplier)."""
    lam, Q = np.linalg.eigh(H)
    ct = Q.T @ c
    k = ct.shape[0]
    n2 = 0.0
    for i in range(k):
        n2 += (ct[i] / lam[i]) ** 2
    mu = 0.0
    if n2 > r * r:
        for _ in range(100):
            n2 = 0.0
            dn2 = 0.0
            for i in range(k):
                d = lam[i] + mu
                n2 += ct[i] * ct[i] / (d * d)
                dn2 -= 2.0 * ct[i] * ct[i] / (d * d * d)
            phi = 1.0 / math.sqrt(n2) - 1.0 / r
            if abs(phi) * r <= 1e-15:
                break
            step = -phi / (-0.5 * n2**-1.5 * dn2)
            if step <= 0.0:
                break
            mu += step
    bt = ct / (lam + mu)
    beta = Q @ bt
    nb = math.sqrt(np.sum(beta * beta))
    if nb > r:
        beta *= r / nb
    return beta


@numba.njit(cache=True)
def _smoothed(Z: np.ndarray, beta: np.ndarray, ridge: float, h: float) -> float:
    m = Z @ beta
    f = ridge * np.sum(beta * beta)
    for i in range(m.shape[0]):
        t = 1.0 - m[i]
        if t >= h:
            f += t - 0.5 * h
        elif t > 0.0:
            f += t * t / (2.0 * h)
    return f


@numba.njit(cache=True)
def _neumaier(total: float, carry: float, x: float) -> tuple[float, float]:
    """One step of Neumaier's compensated sum: (total + x, the carry of what rounding dropped)."""
    s = total + x
    if abs(total) >= abs(x):
        carry += (total - s) + x
    else:
        carry += (x - s) + total
    return s, carry


@numba.njit(cache=True)
def _certify(Z: np.ndarray, beta: np.ndarray, ridge: float, r: float, h: float) -> tuple[float, float, float]:
    """(hinge value at beta, dual bound with alpha = smoothed derivative, its best mu).

    The two sums over the n records are compensated (Neumaier), so their rounding stays about one
    unit of their size instead of growing with n: the certified gap is not eaten by rounding."""
    m = Z @ beta
    n = m.shape[0]
    alpha = np.empty(n)
    value, value_c = ridge * np.sum(beta * beta), 0.0
    asum, asum_c = 0.0, 0.0
    for i in range(n):
        t = 1.0 - m[i]
        if t > 0.0:
            value, value_c = _neumaier(value, value_c, t)
        a = t / h
        a = 0.0 if a < 0.0 else (1.0 if a > 1.0 else a)
        alpha[i] = a
        asum, asum_c = _neumaier(asum, asum_c, a)
    value += value_c
    asum += asum_c
    v = Z.T @ alpha
    vn = math.sqrt(np.sum(v * v))
    if vn <= 2.0 * ridge * r:
        return value, asum - vn * vn / (4.0 * ridge), 0.0
    return value, asum - (r * vn - ridge * r * r), vn / (2.0 * r) - ridge


@numba.njit(cache=True)
def _hinge_solve(
    Z: np.ndarray, beta0: np.ndarray, ridge: float, r: float, tol: float
) -> tuple[float, float, np.ndarray, float, float]:
    """Newton on the smoothed hinge over the ball, h shrinking (to ``_H_MIN``) until value - bound <= tol,
    with no cap on the rounds (module doc: it returns certified or not at all).

    Returns (value, bound, beta, h, mu) with value - bound <= tol.
    """
    n, k = Z.shape
    beta = beta0.copy()
    nb = math.sqrt(np.sum(beta * beta))
    if nb > r:
        beta *= r / nb
    h = 0.1
    value, bound, mu = 0.0, -np.inf, 0.0
    while True:
        for _it in range(200):
            m = Z @ beta
            grad = 2.0 * ridge * beta
            H = 2.0 * ridge * np.eye(k)
            for i in range(n):
                t = 1.0 - m[i]
                if t >= h:
                    for a in range(k):
                        grad[a] -= Z[i, a]
                elif t > 0.0:
                    w = t / h
                    for a in range(k):
                        za = Z[i, a]
                        grad[a] -= w * za
                        for b in range(a, k):
                            H[a, b] += za * Z[i, b] / h
            for a in range(k):
                for b in range(a + 1, k):
                    H[b, a] = H[a, b]
            target = _ball_qp(H, H @ beta - grad, r)
            d = target - beta
            dec = -(grad @ d)
            f0 = _smoothed(Z, beta, ridge, h)
            if dec <= 1e-14 * (1.0 + abs(f0)):
                break
            step = 1.0
            while step > 1e-12:
                if _smoothed(Z, beta + step * d, ridge, h) <= f0 - 1e-4 * step * dec:
                    break
                step *= 0.5
            beta = beta + step * d
            if step * math.sqrt(np.sum(d * d)) <= 1e-15 * (1.0 + math.sqrt(np.sum(beta * beta))):
                break
        value, bound, mu = _certify(Z, beta, ridge, r, h)
        if value - bound <= tol:
            break
        h = max(h * 0.1, _H_MIN)
    return value, bound, beta, h, mu


@numba.njit(cache=True)
def _swap_kernel(
    Zc: np.ndarray, Zin: np.ndarray, rows: np.ndarray, beta_c: np.ndarray, ridge: float, r: float, tol: float
) -> tuple[np.ndarray, np.ndarray]:
    """Values and bounds of the swaps (out rows[a], in column b of Zin), warm-started at the center."""
    n, s = Zc.shape
    m = Zin.shape[1]
    values = np.empty((rows.shape[0], m))
    bounds = np.empty((rows.shape[0], m))
    Z = np.empty((n, s))
    for a in range(rows.shape[0]):
        i = rows[a]
        Z[:, :] = Zc
        start = beta_c.copy()
        start[i] = 0.0
        for b in range(m):
            Z[:, i] = Zin[:, b]
            v, lb, _, _, _ = _hinge_solve(Z, start, ridge, r, tol)
            values[a, b] = v
            bounds[a, b] = lb
    return values, bounds


def hinge_evaluate(problem: Problem, support: np.ndarray, tol: float) -> tuple[float, float, np.ndarray, float, float]:
    """(value, bound, beta, mu, h) of one support; value - bound is the certified error."""
    S = np.asarray(support, dtype=np.int64)
    Z = np.ascontiguousarray(problem.columns(S) * problem.y[:, None])
    value, bound, beta, h, mu = _hinge_solve(Z, np.zeros(S.size), problem.ridge, problem.r, tol)
    return float(value), float(bound), beta, float(mu), float(h)


def hinge_cut(problem: Problem, support: np.ndarray, beta: np.ndarray, h: float) -> tuple[float, np.ndarray]:
    """(intercept L(1_S), gradient g (length p)) of the affine cut eta >= L(1_S) + g^T (z - 1_S).

    alpha = the smoothed derivative at beta, v = X^T (alpha * y), mu the best multiplier for
    v_S: g_j = -v_j^2 / (4 (ridge + mu)), L(1_S) = sum_i alpha_i + sum_{j in S} g_j - mu r^2,
    a lower bound on F_h at every support for any beta and h (module docstring).
    """
    S = np.asarray(support, dtype=np.int64)
    m = problem.y * problem.matvec(beta, S)
    alpha = np.clip((1.0 - m) / h, 0.0, 1.0)
    v = problem.rmatvec(alpha * problem.y)
    ridge, r = problem.ridge, problem.r
    vn = float(np.linalg.norm(v[S]))
    mu = max(0.0, vn / (2.0 * r) - ridge)
    grad = -v * v / (4.0 * (ridge + mu))
    return float(alpha.sum()) + float(grad[S].sum()) - mu * r * r, grad


def hinge_swap_values(
    problem: Problem, center: np.ndarray, tol: float, cols: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """F_h at the one-swaps of ``center`` that bring in a feature of ``cols`` (default: all outside).

    Returns (values (s, len(cols)), +inf where cols[b] is in the center; the largest certified
    error value - bound).
    """
    C = np.asarray(center, dtype=np.int64)
    cols = np.arange(problem.p) if cols is None else np.asarray(cols, dtype=np.int64)
    keep = np.flatnonzero(~np.isin(cols, C))
    values = np.full((C.size, cols.size), np.inf)
    worst = 0.0
    if keep.size == 0:
        return values, worst
    _, _, beta_c, _, _ = hinge_evaluate(problem, C, tol)
    Zc = np.ascontiguousarray(problem.columns(C) * problem.y[:, None])
    rows = np.arange(C.size)
    for start in range(0, keep.size, 256):  # bounded memory: 256 dense columns at a time
        block = keep[start : start + 256]
        Zin = np.asfortranarray(problem.columns(cols[block]) * problem.y[:, None])
        v, lb = _swap_kernel(Zc, Zin, rows, beta_c, problem.ridge, problem.r, tol)
        values[:, block] = v
        worst = max(worst, float(np.max(v - lb)))
    return values, worst
