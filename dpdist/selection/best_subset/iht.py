"""Warm start: IHT kickstart (seed App. B.2; Bertsimas-King-Mazumder Alg. 1) and one-swap local search.

IHT (spec B.2) on g(beta) = 1/2 ||y - X beta||^2 + ridge/2 ||beta||^2 with step 1/L,
L = lambda_max(X^T X) + ridge (power iteration): beta <- H_s(beta - grad g / L), H_s keeping
the s largest |.|. The seed starts from the indicator of the last s coordinates; we start from
the s largest |x_j^T y| (either is a heuristic: the MIP certifies whatever it returns), and
stop when the objective changes by less than 1e-3 relatively (the paper's rule) or after
``max_iter`` steps. For the hinge loss the paper has no warm start; we run the same IHT on the
+-1 labels as a squared-loss surrogate.

Local search: evaluate all s(p - s) one-swaps of the current support with the exact inner
solve and move to the best one while it improves F by more than the inner tolerance, with no
cap on the moves; the result is a one-swap local minimum (which the mistakes certificate
needs), and its swap values are exactly the ones the top-R list and the mistakes bucket 1 need.
The swap evaluations are independent: ``swap_values`` is the unit of work that
``executor.map`` spreads over workers (chunks of incoming features).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpdist.selection.best_subset.hinge import hinge_swap_values
from dpdist.selection.best_subset.least_squares import ls_swap_values
from dpdist.selection.best_subset.objective import Problem

__all__ = ["iht", "iht_unit", "local_search", "swap_support", "swap_table", "swap_values"]


def _lambda_max(problem: Problem, iters: int = 15) -> float:
    v = np.random.default_rng(0).standard_normal(problem.p)  # a fixed public start vector
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(iters):
        w = problem.rmatvec(problem.matvec(v))
        lam_new = float(np.linalg.norm(w))
        if lam_new == 0.0:
            return 0.0
        v = w / lam_new
        if abs(lam_new - lam) <= 1e-3 * lam_new:
            return lam_new
        lam = lam_new
    return lam


def iht(problem: Problem, max_iter: int = 500) -> tuple[int, ...]:
    """The support of the IHT iterate (spec B.2)."""
    s, ridge = problem.s, problem.ridge
    L = 1.05 * _lambda_max(problem) + ridge  # 5% margin on the power-iteration estimate
    beta = np.zeros(problem.p)
    top = np.argpartition(-np.abs(problem.Xty), s - 1)[:s]
    beta[top] = problem.Xty[top] / L
    prev = np.inf
    for _ in range(max_iter):
        S = np.flatnonzero(beta)
        resid = problem.y - problem.matvec(beta[S], S) if S.size else problem.y.copy()
        obj = 0.5 * resid @ resid + 0.5 * ridge * beta @ beta
        if abs(prev - obj) <= 1e-3 * abs(obj):
            break
        prev = obj
        step = beta - (-problem.rmatvec(resid) + ridge * beta) / L
        keep = np.argpartition(-np.abs(step), s - 1)[:s]
        beta = np.zeros(problem.p)
        beta[keep] = step[keep]
    S = np.flatnonzero(beta)
    if S.size < s:  # pad with the largest |x_j^T y| (all-zero steps)
        extra = [int(j) for j in np.argsort(-np.abs(problem.Xty)) if int(j) not in set(S.tolist())]
        S = np.concatenate([S, extra[: s - S.size]])
    return tuple(sorted(int(j) for j in S))


def swap_values(problem: Problem, item: tuple[Sequence[int], np.ndarray, float]) -> tuple[np.ndarray, float]:
    """Work unit: (values (s, len(cols)), largest certified error) for item = (center, cols, tol)."""
    center, cols, tol = item
    C = np.asarray(center, dtype=np.int64)
    if problem.loss == "squared":
        return ls_swap_values(problem, C, tol, cols)
    return hinge_swap_values(problem, C, tol, cols)


def iht_unit(problem: Problem, item: object = None) -> tuple[int, ...]:
    """Work unit: the IHT support."""
    return iht(problem)


def swap_table(executor: Any, center: Sequence[int], tol: float, chunks: int | None = None) -> tuple[np.ndarray, float]:
    """F at every one-swap of ``center`` as an (s, p) table (+inf where j is in the center).

    The incoming features are split into chunks mapped over ``executor`` (one per worker,
    four per worker for the hinge loss whose swaps cost a Newton solve each).
    """
    p = executor.meta.p
    if chunks is None:
        chunks = max(1, int(executor.workers)) * (4 if executor.meta.loss == "hinge" else 1)
    parts = [c for c in np.array_split(np.arange(p), min(chunks, p)) if c.size]
    results = executor.map(swap_values, [(tuple(center), c, tol) for c in parts])
    table = np.concatenate([r[0] for r in results], axis=1)
    return table, max(r[1] for r in results)


def swap_support(center: Sequence[int], i: int, j: int) -> tuple[int, ...]:
    """center with its i-th feature replaced by j, sorted."""
    return tuple(sorted([*[int(c) for k, c in enumerate(center) if k != i], int(j)]))


def local_search(executor: Any, start: Sequence[int], tol: float) -> tuple[tuple[int, ...], float, np.ndarray]:
    """Best-improvement one-swap descent from ``start``, to a one-swap local minimum.

    Returns (center, F^(center), its swap table) with ``table.min() >= F^(center) - tol``
    (F^: the computed values, certified within ``tol`` of F): no one-swap of the centre is
    lower by more than ``tol``. The centres of the mechanisms must be such local minima (the
    mistakes gap gamma^ = f_1 - F^(C) >= -tol and the optimality certificate need it), so
    the descent has no move cap: a cap would return a non-minimum on data whose descent is
    long. It terminates: every accepted move lowers the computed value by more than ``tol``,
    and computed values are certified within ``tol`` of F >= 0 (``objective``), so >= -tol:
    at most F^(start)/tol + 1 moves. Every inner solve returns certified to ``tol`` (``least_squares``,
    ``hinge``: each loops until it is), so no evaluation can stop the descent.
    """
    from dpdist.selection.best_subset.oa import evaluate_unit

    C = tuple(sorted(int(j) for j in start))
    value = executor.call(evaluate_unit, (C, tol))[0]
    while True:
        table, _ = swap_table(executor, C, tol)
        i, j = np.unravel_index(int(np.argmin(table)), table.shape)
        if not table[i, j] < value - tol:
            return C, value, table
        C, value = swap_support(C, int(i), int(j)), float(table[i, j])
