"""The certificates the privacy proofs rest on, on constructed objectives.

* The mistakes centre is a one-swap local minimum however many moves the descent needs,
  so the computed gap is never negative and the centre is the optimum (``mistakes`` (d)).
* The top-R certificate lists every support it meets whose certified lower bound is below
  t^ - tau, so every unlisted support has F >= t^ - tau (``top_r``, certified tolerance).
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from dpdist.selection.best_subset.iht import local_search, swap_support, swap_values
from dpdist.selection.best_subset.mistakes import center_and_gap
from dpdist.selection.best_subset.oa import Cut, MasterResult, Oracle, evaluate_unit, master_unit
from dpdist.selection.best_subset.top_r import CertifyJob, certify_unit


class PathExecutor:
    """F on s = 2 supports of range(K + 2): (k, k + 1) has F = (K - k) * step, the rest 1000.

    Each path support's only improving one-swap is the next one ((k, k + 1) -> (k + 1, k + 2)),
    so best-improvement descent from (0, 1) makes exactly K moves to the optimum (K, K + 1);
    path supports two or more steps apart share no feature. The master is brute force.
    """

    workers = 1

    def __init__(self, K: int, step: float) -> None:
        self.K, self.step = K, step
        self.meta = SimpleNamespace(p=K + 2, s=2, loss="squared", delta=1.0)

    def F(self, S) -> float:
        a, b = sorted(int(j) for j in S)
        return (self.K - a) * self.step if b == a + 1 else 1000.0

    def call(self, fn, item):
        if fn is evaluate_unit:
            value = self.F(item[0])
            return value, value
        return (0, 1)  # iht_unit: the start of the path

    def map(self, fn, items):
        assert fn is swap_values
        out = []
        for center, cols, _ in items:
            values = np.full((2, len(cols)), np.inf)
            for i in range(2):
                for b, j in enumerate(cols):
                    if int(j) not in center:
                        values[i, b] = self.F(swap_support(center, i, int(j)))
            out.append((values, 0.0))
        return out

    def mip(self, fn, job):
        assert fn is master_unit
        region = [
            S for S in itertools.combinations(range(self.meta.p), 2) if len(set(S) & set(job.center)) <= job.max_common
        ]
        best = min(region, key=self.F)
        if not self.F(best) < job.objlimit:
            return MasterResult("infeasible", None, None, job.objlimit, 0.0, 0, 0)
        return MasterResult("optimal", best, self.F(best), self.F(best), 0.0, 0, 0)


@pytest.mark.parametrize("K", [3, 60, 200])
def test_local_search_has_no_move_cap(K):
    """The descent stops only at a one-swap local minimum (the old cap stopped at 50 moves)."""
    ex = PathExecutor(K, step=1.0)
    center, value, table = local_search(ex, (0, 1), 0.01)
    assert center == (K, K + 1) and value == 0.0
    assert table.min() >= value - 0.01


def test_mistakes_centre_is_the_optimum_after_many_moves():
    """55 moves of 0.015 each: after 50 the rest is within tau of the centre, so neither the
    >= 2-mistake master (no support below F(C) - tau) nor a restart would catch a capped
    descent; only a local minimum gives the optimum and a gap >= 0."""
    tau = 0.1
    ex = PathExecutor(55, step=0.015)
    center, f0, f1, table, second = center_and_gap(ex, tau)
    assert f1 - f0 >= 0.0  # the capped descent gave gamma^ = -0.075 at the centre (50, 51)
    assert center == (55, 56) and f0 == 0.0
    assert f1 - f0 == pytest.approx(0.015) and second == (54, 55)


def constructed_oracle(values: dict, p: int, s: int, tol: float) -> SimpleNamespace:
    """A problem whose oracle returns the given (value, bound) pairs, with valid cuts.

    The cut of S is eta >= bound(S) - 100 |T \\ S| at 1_T: exact at S, far below every F elsewhere.
    """
    problem = SimpleNamespace(p=p, s=s)
    oracle = Oracle(problem, tol)
    for S, (value, bound) in values.items():
        oracle.values[S] = (value, bound)
        grad = np.full(p, -100.0)
        grad[list(S)] = 0.0
        oracle._cuts[S] = Cut(S, bound, grad)
    problem._oracles = {tol: oracle}
    return problem


def test_top_r_lists_by_certified_lower_bound():
    """A support met in the tree whose value is >= t^ - tau but whose lower bound is below it
    may have F < t^ - tau: it must be listed, or the sampler's utility is off by 1.1 tau."""
    tau, p, s = 0.1, 5, 2
    center = (0, 1)
    table = np.full((2, p), np.inf)
    table[:, 2:] = 2.0  # the one-swaps: t^ = 2
    values = {center: (1.0, 0.995)}
    for i, j in itertools.product(range(2), range(2, p)):
        values[swap_support(center, i, j)] = (2.0, 1.995)
    values[(2, 3)] = (1.905, 1.895)  # value >= t^ - tau > bound: F may be 1.895 < t^ - tau
    values[(2, 4)] = (3.0, 2.995)  # F >= t^ - tau for sure: not listed
    values[(3, 4)] = (1.5, 1.495)  # below t^ - tau for sure: listed
    problem = constructed_oracle(values, p, s, tau / 10.0)
    status, lst = certify_unit(problem, CertifyJob(center, 1.0, table, tau, 60.0))
    assert status == "infeasible"
    _, listed_values = lst.listed()
    t = float(listed_values.max())
    assert lst.R == 1 + s * (p - s)
    assert lst.is_listed((2, 3)) and lst.is_listed((3, 4)) and not lst.is_listed((2, 4))
    for S, (_, bound) in values.items():  # the certificate the sampler's tolerance rests on
        assert lst.is_listed(S) or bound >= t - tau
