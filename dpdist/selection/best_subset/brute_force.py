"""Brute-force reference: F at every one of the C(p, s) supports (small p only; docs/algorithms.md §6.7).

This is the ground truth the MIP path is tested against (S*, the top-R list, every
mistakes bucket minimum) and the exact exponential mechanism the samplers are tested
against. ``max_supports`` guards against accidental enumeration of huge candidate sets.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from dpdist.exceptions import ParameterError
from dpdist.selection.best_subset.hinge import hinge_evaluate
from dpdist.selection.best_subset.least_squares import ls_certify
from dpdist.selection.best_subset.objective import Problem

__all__ = ["all_supports", "enumerate_values"]


def all_supports(p: int, s: int) -> np.ndarray:
    """Every s-subset of range(p), ascending, in lexicographic order: (C(p, s), s)."""
    return np.array(list(itertools.combinations(range(p), s)), dtype=np.int64).reshape(-1, s)


def enumerate_values(
    problem: Problem, tol: float = 1e-9, max_supports: int = 2_000_000
) -> tuple[np.ndarray, np.ndarray]:
    """(supports (C(p, s), s), F at each): the objective of every candidate, each certified to ``tol``.
    The inner solves run to their certificate (``least_squares``, ``hinge``), so ``tol`` must exceed
    their floors (the rounding of the value, about 1e-14 n for the least squares; the hinge smoothing's
    n * 5e-14)."""
    p, s = problem.p, problem.s
    if math.comb(p, s) > max_supports:
        raise ParameterError(
            f"brute force over C({p}, {s}) = {math.comb(p, s):,} supports exceeds max_supports={max_supports:,}"
        )
    supports = all_supports(p, s)
    if problem.loss == "squared":
        gram = problem.gram_columns(np.arange(p))
        values = np.empty(supports.shape[0])
        for start in range(0, supports.shape[0], 100_000):
            S = supports[start : start + 100_000]
            A = gram[S[:, :, None], S[:, None, :]]
            v, _, _, _ = ls_certify(A, problem.Xty[S], problem.yty, problem.ridge, problem.r, tol)
            values[start : start + S.shape[0]] = v
        return supports, values
    values = np.empty(supports.shape[0])
    for k, S in enumerate(supports):
        values[k] = hinge_evaluate(problem, S, tol)[0]
    return supports, values
