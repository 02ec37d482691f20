"""Exact least-squares objective on a support, its dual bound and its outer-approximation cut.

References: docs/algorithms.md §6.5, B.1.

For a support S with Gram A = X_S^T X_S, b = X_S^T y and H = A + ridge I (positive definite,
ridge > 0)::

    F(S) = 1/2 y^T y + min_{||beta|| <= r} (1/2 beta^T H beta - b^T beta)

Exact inner solve (docs/algorithms.md's "eigendecomposition plus bisection on the ball multiplier",
replacing the paper's code projected gradient): H = Q diag(lam) Q^T, c = Q^T b. If
||H^-1 b|| <= r the ball is inactive; otherwise beta(mu) = (H + mu I)^-1 b with the unique
mu > 0 where ||beta(mu)|| = r, found by Newton's method on phi(mu) = 1/||beta(mu)|| - 1/r
(concave and increasing, so Newton from mu = 0 increases monotonically to the root; More and
Sorensen 1983). Everything is batched over many supports at once (numpy's stacked eigh).

Certificate. For any alpha in R^n and mu >= 0 (Lagrange duality: the conjugate of
1/2||y - w||^2 and the ball multiplier)

    F(S) >= y^T alpha - 1/2 ||alpha||^2 - ||X_S^T alpha||^2 / (2 (ridge + mu)) - mu r^2 / 2.

With alpha = y - X_S beta (the residual of the computed beta) and the best mu for that alpha
this is a lower bound on F(S), and the primal objective at the (feasible) beta an upper
bound: ``value - bound`` is the certified error of the solve.

Cut. The bound holds at every binary z, and in a form that is *affine* in z. Move delta of
X^T X (0 <= delta <= lambda_min(X^T X), ``Problem.shift``; 0 when p > n) into the ridge and
put the perspective on both the ridge and the ball (sum_j beta_j^2/z_j <= r^2, the same ball
at binary z). Then, for every beta^ in R^p and mu >= 0, with Q = X^T X - delta I (PSD) and
w = X^T y - Q beta^, weak duality (1/2 b^T Q b >= (Q beta^)^T b - 1/2 beta^T Q beta^, then
the minimum over beta_T of the separable rest) gives for every support T

    F(T) >= L(1_T) = 1/2 y^T y - 1/2 beta^T Q beta^ - sum_{j in T} w_j^2 / (2 (ridge + delta + mu)) - mu r^2/2,

an affine function of z = 1_T. Taking beta^ = the solve's beta on S and mu the best
multiplier for w_S, L(1_S) equals F(S) at the exact solution (KKT: w_j = (ridge + delta +
mu) beta_j on S), so the cut is tight at S and valid at every support whatever the solver's
accuracy. Against the tangent of the plain perspective relaxation (the paper's cut, spec
6.5: -(x_j^T alpha)^2/(2 ridge) off S) the slopes are (ridge + delta + mu)/ridge times
steeper: the shift and an active ball both tighten the master.
"""

from __future__ import annotations

import numpy as np

from dpdist.selection.best_subset.objective import Problem

__all__ = ["ball_ridge", "ls_certify", "ls_cut", "ls_evaluate", "ls_swap_values"]

_NEWTON_STEPS = 100


def ball_ridge(H: np.ndarray, c: np.ndarray, r: float) -> tuple[np.ndarray, np.ndarray]:
    """argmin_{||beta|| <= r} 1/2 beta^T H beta - c^T beta for a stack of PD matrices.

    ``H``: (B, k, k), ``c``: (B, k). Returns (beta (B, k), mu (B,)), mu the ball multiplier;
    beta is scaled onto the ball when it is active, so it is always feasible.
    """
    lam, Q = np.linalg.eigh(H)
    ct = np.einsum("bji,bj->bi", Q, c)
    ct2 = ct * ct
    mu = np.zeros(lam.shape[0])
    active = (ct2 / (lam * lam)).sum(axis=1) > r * r
    idx = np.flatnonzero(active)
    for _ in range(_NEWTON_STEPS):
        if idx.size == 0:
            break
        d = lam[idx] + mu[idx, None]
        n2 = (ct2[idx] / (d * d)).sum(axis=1)
        dn2 = -2.0 * (ct2[idx] / (d * d * d)).sum(axis=1)
        phi = 1.0 / np.sqrt(n2) - 1.0 / r
        step = -phi / (-0.5 * n2**-1.5 * dn2)
        mu[idx] += np.maximum(step, 0.0)
        idx = idx[np.abs(phi) * r > 1e-15]
    bt = ct / (lam + mu[:, None])
    beta = np.einsum("bij,bj->bi", Q, bt)
    norm = np.linalg.norm(beta, axis=1)
    scale = np.where(active & (norm > 0), r / np.maximum(norm, 1e-300), 1.0)
    return beta * np.minimum(scale, 1.0)[:, None], mu


def ls_certify(
    A: np.ndarray, b: np.ndarray, yty: float, ridge: float, r: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Primal value, dual bound, beta and mu for a stack of supports given their Grams.

    ``A``: (B, k, k) = X_S^T X_S, ``b``: (B, k) = X_S^T y. The value is the objective at the
    feasible beta (an upper bound on F), the bound L(1_S; alpha, mu*) with alpha the residual
    and mu* the best multiplier for it (a lower bound; module docstring).
    """
    k = A.shape[-1]
    H = A + ridge * np.eye(k)
    beta, _ = ball_ridge(H, b, r)
    Ab = np.einsum("bij,bj->bi", A, beta)
    bAb = np.einsum("bi,bi->b", beta, Ab)
    btb = np.einsum("bi,bi->b", beta, beta)
    bb = np.einsum("bi,bi->b", b, beta)
    value = 0.5 * yty - bb + 0.5 * bAb + 0.5 * ridge * btb
    v = b - Ab  # X_S^T alpha
    vn = np.linalg.norm(v, axis=1)
    mu = np.maximum(0.0, vn / r - ridge)
    # y^T a - 1/2 ||a||^2 = 1/2 y^T y - 1/2 beta^T A beta for a = y - X_S beta
    bound = 0.5 * yty - 0.5 * bAb - vn * vn / (2.0 * (ridge + mu)) - 0.5 * mu * r * r
    return value, bound, beta, mu


def ls_evaluate(problem: Problem, support: np.ndarray) -> tuple[float, float, np.ndarray, float]:
    """(value, bound, beta, mu) of one support (ascending feature indices)."""
    S = np.asarray(support, dtype=np.int64)
    G = problem.gram_columns(S)
    value, bound, beta, mu = ls_certify(G[S][None], problem.Xty[S][None], problem.yty, problem.ridge, problem.r)
    return float(value[0]), float(bound[0]), beta[0], float(mu[0])


def ls_cut(problem: Problem, support: np.ndarray, beta: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """(intercept L(1_S), gradient g (length p)) of the affine cut eta >= L(1_S) + g^T (z - 1_S).

    With the diagonal shift delta = ``problem.shift`` (0 <= delta <= lambda_min(X^T X)) and
    w = X^T y - (X^T X - delta I) beta (module docstring), g_j = -w_j^2 / (2 (ridge + delta + mu))
    for every j and L(1_S) = 1/2 y^T y - 1/2 beta^T (X^T X - delta I) beta + sum_{j in S} g_j -
    mu r^2 / 2, mu the best multiplier for w_S. ``mu`` (the solve's) is not needed: it is
    recomputed for w.
    """
    S = np.asarray(support, dtype=np.int64)
    lam = problem.ridge + problem.shift
    G = problem.gram_columns(S)
    w = problem.Xty - G @ beta  # X^T alpha
    w[S] += problem.shift * beta
    wS = float(np.linalg.norm(w[S]))
    mu = max(0.0, wS / problem.r - lam)
    bQb = float(beta @ (G[S] @ beta)) - problem.shift * float(beta @ beta)
    grad = -w * w / (2.0 * (lam + mu))
    intercept = 0.5 * problem.yty - 0.5 * bQb + float(grad[S].sum()) - 0.5 * mu * problem.r**2
    return intercept, grad


def ls_swap_values(problem: Problem, center: np.ndarray, cols: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """F at the one-swaps of ``center`` that bring in a feature of ``cols`` (default: all outside).

    Returns (values (s, len(cols)): out center[i], in cols[b] -- +inf where cols[b] is in the
    center; the largest certified error value - bound).
    """
    C = np.asarray(center, dtype=np.int64)
    s, p = C.size, problem.p
    cols = np.arange(p) if cols is None else np.asarray(cols, dtype=np.int64)
    keep = ~np.isin(cols, C)
    inc = cols[keep]
    G = problem.gram_columns(C)  # (p, s)
    values = np.full((s, cols.size), np.inf)
    worst = 0.0
    A0, b0 = G[C], problem.Xty[C]
    m = inc.size
    if m == 0:
        return values, worst
    for i in range(s):
        A = np.broadcast_to(A0, (m, s, s)).copy()
        A[:, i, :] = G[inc]
        A[:, :, i] = G[inc]
        A[:, i, i] = problem.col_sq[inc]
        b = np.broadcast_to(b0, (m, s)).copy()
        b[:, i] = problem.Xty[inc]
        val, bound, _, _ = ls_certify(A, b, problem.yty, problem.ridge, problem.r)
        values[i, keep] = val
        worst = max(worst, float(np.max(val - bound)))
    return values, worst
