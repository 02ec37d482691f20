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

__all__ = ["ls_certify", "ls_cut", "ls_evaluate", "ls_swap_values"]

_NEWTON_STEPS = 100  # per call; the certificate loop of ``ls_certify`` calls again while it is not met
_U = 2.0**-53  # unit roundoff of float64


def _gamma(m: int) -> float:
    """Higham's gamma_m = m u / (1 - m u): a sum or dot product of m terms, in any order, is
    within gamma_m * (the same sum of absolute values) of the exact one (Higham 2002, §3.1)."""
    return m * _U / (1.0 - m * _U)


def _multiplier(lam: np.ndarray, ct2: np.ndarray, r: float, mu: np.ndarray) -> np.ndarray:
    """Newton's method on phi(mu) = 1/||beta(mu)|| - 1/r from ``mu`` (below the root) for the
    rows where the ball is active at ``mu``; ``lam`` (B, k) the eigenvalues of H, ``ct2`` (B, k)
    the squared coordinates of X_S^T y in H's eigenbasis. phi is concave and increasing, so the
    iterates increase monotonically to the root (More and Sorensen 1983)."""
    mu = mu.copy()
    idx = np.flatnonzero((ct2 / (lam + mu[:, None]) ** 2).sum(axis=1) > r * r)
    for _ in range(_NEWTON_STEPS):
        if idx.size == 0:
            break
        d = lam[idx] + mu[idx, None]
        n2 = (ct2[idx] / (d * d)).sum(axis=1)
        dn2 = -2.0 * (ct2[idx] / (d * d * d)).sum(axis=1)
        phi = 1.0 / np.sqrt(n2) - 1.0 / r
        step = -phi / (-0.5 * n2**-1.5 * dn2)
        mu[idx] += np.maximum(step, 0.0)
        idx = idx[(np.abs(phi) * r > 1e-15) & (step > 0.0)]
    return mu


def _onto_ball(raw: np.ndarray, r: float) -> np.ndarray:
    """``raw`` scaled into the ball where it may lie outside, strictly inside by more than the norm's
    own rounding (about (k/2 + 1) u relative), so the point is feasible whatever that rounding: its
    exact objective is then an upper bound of F."""
    k = raw.shape[-1]
    norm = np.linalg.norm(raw, axis=1)
    near = norm > r * (1.0 - (k + 4) * _U)
    scale = np.where(near, r / np.maximum(norm, 1e-300) * (1.0 - (k + 8) * _U), 1.0)
    return raw * scale[:, None]


def _certificate(
    A: np.ndarray, b: np.ndarray, yty: float, ridge: float, r: float, beta: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, bound, mu) at feasible ``beta`` (module docstring, certificate): bound <= F <= value.

    value = F's objective at beta as computed, plus a bound on that computation's rounding (so it
    is above the exact objective at beta, hence above F); bound = the computed objective less the
    same rounding bound and less the duality gap for the residual alpha = y - X_S beta and the
    best multiplier mu for it, in the cancellation-free form ||v - c beta||^2 / (2c) + mu (r^2 -
    ||beta||^2) / 2 (v = X_S^T alpha, c = ridge + mu; value - bound of the module docstring,
    expanded; exact for every mu >= 0), each term's rounding bounded by Higham's gamma. Both ends
    are rounded outwards. The statistics A, b and y^T y are taken as given: their own rounding
    (n-term sums, ``objective.Problem``) is not part of this bound.
    """
    k = A.shape[-1]
    absb, absbeta = np.abs(b), np.abs(beta)
    Ab = np.einsum("bij,bj->bi", A, beta)
    bAb = np.einsum("bi,bi->b", beta, Ab)
    btb = np.einsum("bi,bi->b", beta, beta)
    bb = np.einsum("bi,bi->b", b, beta)
    value = 0.5 * yty - bb + 0.5 * bAb + 0.5 * ridge * btb
    aAa = np.einsum("bi,bij,bj->b", absbeta, np.abs(A), absbeta)
    value_err = _gamma(2 * k + 4) * (0.5 * yty + np.einsum("bi,bi->b", absb, absbeta) + 0.5 * aAa + 0.5 * ridge * btb)
    v = b - Ab  # X_S^T alpha
    c = ridge + np.maximum(0.0, np.linalg.norm(v, axis=1) / r - ridge)
    mu = c - ridge  # the multiplier c stands for, after c's own rounding (the identity holds for it)
    w = v - c[:, None] * beta  # the KKT residual: 0 at the exact solution
    w_err = _gamma(k + 3) * (absb + np.einsum("bij,bj->bi", np.abs(A), absbeta) + c[:, None] * absbeta)
    wn2 = ((np.abs(w) + w_err) ** 2).sum(axis=1)
    slack = np.maximum(r * r - btb, 0.0) + _gamma(k + 1) * (r * r + btb)
    gap = (1.0 + _gamma(2 * k + 4)) * (wn2 / (2.0 * c) + 0.5 * mu * slack)
    upper = np.nextafter(value + value_err * (1.0 + 4.0 * _U), np.inf)
    lower = np.nextafter(value - (value_err + gap) * (1.0 + 4.0 * _U), -np.inf)
    return upper, lower, mu


def _refine(
    H: np.ndarray, lam: np.ndarray, Q: np.ndarray, b: np.ndarray, raw: np.ndarray, mu: np.ndarray, r: float
) -> tuple[np.ndarray, np.ndarray]:
    """One round of refinement of (raw, mu) towards (H + mu I) raw = b with ||raw|| = r where the ball
    is active: a step of iterative refinement (the residual against H itself, its correction solved
    in the computed eigenbasis ``lam``, ``Q``), then a Newton step on phi(mu) = 1/||raw|| - 1/r whose
    value is taken at the refined point and whose slope ||raw||^-3 raw^T (H + mu I)^-1 raw from the
    eigenbasis, so an inexact eigendecomposition only slows the rounds (module docstring)."""
    k = H.shape[-1]
    resid = b - np.einsum("bij,bj->bi", H + mu[:, None, None] * np.eye(k), raw)
    d = lam + mu[:, None]
    raw = raw + np.einsum("bij,bj->bi", Q, np.einsum("bji,bj->bi", Q, resid) / d)
    norm = np.linalg.norm(raw, axis=1)
    active = (norm > r) | (mu > 0.0)
    qr = np.einsum("bji,bj->bi", Q, raw)
    slope = (qr * qr / d).sum(axis=1) / np.maximum(norm, 1e-300) ** 3
    phi = 1.0 / np.maximum(norm, 1e-300) - 1.0 / r
    mu = np.where(active, np.maximum(mu - phi / np.maximum(slope, 1e-300), 0.0), mu)
    return raw, mu


def ls_certify(
    A: np.ndarray, b: np.ndarray, yty: float, ridge: float, r: float, tol: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Primal value, dual bound, beta and mu for a stack of supports given their Grams, each
    certified: bound <= F <= value and value - bound <= ``tol`` (``_certificate``: the value
    includes a bound on its own rounding).

    ``A``: (B, k, k) = X_S^T X_S, ``b``: (B, k) = X_S^T y. The closed-form solve (module
    docstring) is refined until every support is certified, with no cap on the rounds: a release
    must not stop on a condition of the data, so each support returns certified or not at all.
    Each round takes one step of iterative refinement of (H + mu I) beta = b and one Newton step
    on the ball multiplier (``_refine``), which contract the solve's error by about cond(H) u per
    round. The rounds end once the error bound's own floor -- twice the rounding of the value,
    2 gamma_(2k+4) (y^T y / 2 + |b|^T |beta| + |beta|^T |A| |beta| / 2 + ridge ||beta||^2 / 2)
    <= 2 gamma_(2k+4) n (B_y^2 / 2 + B_x B_y sqrt(k) r + B_x^2 k r^2 / 2 + ridge r^2 / (2n)) for n rows
    bounded by B_x and B_y, about 1.6e-14 n at k = 5 with unit bounds -- is below ``tol``: the
    mechanisms' inner tolerance tol * Delta / 10 meets it up to about 3e10 rows at best subset's
    default ``tol`` (1e-3) and 3e7 at its floor (1e-6). Were it ever out of reach, the loop would go on and nothing
    would be published: the solve's time (the operator's terminal) is the only trace, the channel
    docs/privacy.md lists.
    """
    k = A.shape[-1]
    H = A + ridge * np.eye(k)
    lam, Q = np.linalg.eigh(H)
    ct = np.einsum("bji,bj->bi", Q, b)
    mu_solve = _multiplier(lam, ct * ct, r, np.zeros(lam.shape[0]))
    raw = np.einsum("bij,bj->bi", Q, ct / (lam + mu_solve[:, None]))
    beta = _onto_ball(raw, r)
    value, bound, mu = _certificate(A, b, yty, ridge, r, beta)
    todo = np.flatnonzero(~(value - bound <= tol))  # a NaN goes on, never out uncertified
    while todo.size:
        raw[todo], mu_solve[todo] = _refine(H[todo], lam[todo], Q[todo], b[todo], raw[todo], mu_solve[todo], r)
        beta[todo] = _onto_ball(raw[todo], r)
        value[todo], bound[todo], mu[todo] = _certificate(A[todo], b[todo], yty, ridge, r, beta[todo])
        todo = todo[~(value[todo] - bound[todo] <= tol)]
    return value, bound, beta, mu


def ls_evaluate(problem: Problem, support: np.ndarray, tol: float) -> tuple[float, float, np.ndarray, float]:
    """(value, bound, beta, mu) of one support (ascending feature indices), certified to ``tol``."""
    S = np.asarray(support, dtype=np.int64)
    G = problem.gram_columns(S)
    value, bound, beta, mu = ls_certify(G[S][None], problem.Xty[S][None], problem.yty, problem.ridge, problem.r, tol)
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


def ls_swap_values(
    problem: Problem, center: np.ndarray, tol: float, cols: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """F at the one-swaps of ``center`` that bring in a feature of ``cols`` (default: all outside).

    Returns (values (s, len(cols)): out center[i], in cols[b] -- +inf where cols[b] is in the
    center; the largest certified error value - bound, at most ``tol``).
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
        val, bound, _, _ = ls_certify(A, b, problem.yty, problem.ridge, problem.r, tol)
        values[i, keep] = val
        worst = max(worst, float(np.max(val - bound)))
    return values, worst
