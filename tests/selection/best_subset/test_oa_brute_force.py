"""The MIP path against brute-force enumeration (p <= 12, s <= 3; least squares and hinge).

OA's S*, the certified top-R list and every mistakes bucket minimum must equal what
enumerating all C(p, s) supports gives.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from bss_helpers import small_problem, trouble_on_first_attempt

from dpdist.selection.best_subset.brute_force import enumerate_values
from dpdist.selection.best_subset.executor import LocalExecutor
from dpdist.selection.best_subset.mistakes import BucketJob, bucket_unit, center_and_gap, mistakes_buckets
from dpdist.selection.best_subset.oa import oracle_for, solve_master
from dpdist.selection.best_subset.top_r import top_r_list

TOL = 1e-3


def mistakes_of(supports: np.ndarray, center) -> np.ndarray:
    return np.array([len(set(map(int, S)) - set(center)) for S in supports])


def test_oa_finds_the_optimum(small):
    supports, values = enumerate_values(small)
    worst = tuple(int(j) for j in supports[np.argmax(values)])  # start from the worst support
    res = solve_master(oracle_for(small, 1e-9), [worst], gap=1e-9)
    assert res.status == "optimal"
    assert res.support == tuple(int(j) for j in supports[np.argmin(values)])
    assert res.value == pytest.approx(values.min(), abs=1e-9)
    assert res.lower <= values.min() + 1e-7


def test_top_r_list_is_the_exact_top_r(small):
    supports, values = enumerate_values(small)
    tau = TOL * small.delta
    lst = top_r_list(LocalExecutor(small), tau)
    p, s = small.p, small.s
    R = 1 + s * (p - s)
    assert lst.R == R
    idx, listed_values = lst.listed()
    listed = {lst.support(int(k)) for k in idx}
    assert len(listed) == R
    order = np.argsort(values, kind="stable")
    t_true = values[order[R - 1]]
    # every listed support has F <= the true R-th value, every unlisted one F >= it (ties allowed)
    by_support = {tuple(int(j) for j in S): v for S, v in zip(supports, values)}
    assert max(by_support[S] for S in listed) == pytest.approx(t_true, abs=1e-9)
    assert min(v for S, v in by_support.items() if S not in listed) >= t_true - 1e-9
    np.testing.assert_allclose(sorted(listed_values), np.sort(values)[:R], atol=1e-9)
    for S in by_support:
        assert lst.is_listed(S) == (S in listed)


def test_bucket_minima_equal_enumeration(small):
    supports, values = enumerate_values(small)
    tau = TOL * small.delta
    ex = LocalExecutor(small)
    center, f0, f1, _, _ = center_and_gap(ex, tau)
    assert center == tuple(int(j) for j in supports[np.argmin(values)])
    mist = mistakes_of(supports, center)
    second = values[mist > 0].min()
    assert f1 == pytest.approx(second, abs=1e-9)  # the optimality gap gamma = f1 - f0
    for j in range(1, small.s + 1):
        kind, value, best = bucket_unit(small, BucketJob(center, j, math.inf, tau, 60.0))
        assert kind == "exact"
        assert value == pytest.approx(values[mist == j].min(), abs=tau)
        assert len(set(best) - set(center)) == j
    # the clamped buckets of the mechanism: min(f_j, f0 + M_j) with M_j from a (public) rate
    buckets = mistakes_buckets(ex, center, f0, f1, tau, scale=0.2, horizon=1.0, time_limit=None, best_one=center)
    for j in range(small.s + 1):
        M = (math.log(math.comb(small.s, j) * math.comb(small.p - small.s, j)) + 1.0) / 0.2
        assert buckets.values[j] == pytest.approx(min(values[mist == j].min(), f0 + M), abs=tau)


def test_no_good_fallback_is_exercised():
    """An instance where a two-mistake support beats the worst one-swap: the exact top-R needs no-good cuts."""
    for seed in range(6):
        P = small_problem("squared", seed, p=10, s=3, n=80)
        lst = top_r_list(LocalExecutor(P), TOL * P.delta)
        if lst.stats["extras"]:
            supports, values = enumerate_values(P)
            _, listed_values = lst.listed()
            np.testing.assert_allclose(sorted(listed_values), np.sort(values)[: lst.R], atol=1e-9)
            return
    pytest.fail("no instance exercised the no-good fallback")


def test_a_master_scip_ends_in_numerical_trouble_is_solved_again_to_the_optimum(small, monkeypatch):
    """A status other than optimal/infeasible is never an outcome: a fresh tree (another seed, every cut
    kept) solves the same region, and the result is the enumerated optimum."""
    supports, values = enumerate_values(small)
    attempts = trouble_on_first_attempt(monkeypatch)
    worst = tuple(int(j) for j in supports[np.argmax(values)])
    res = solve_master(oracle_for(small, 1e-9), [worst], gap=1e-9)
    assert attempts == [0, 1] and res.status == "optimal"
    assert res.support == tuple(int(j) for j in supports[np.argmin(values)])


def test_repeated_trouble_switches_scip_to_its_numerics_emphasis_and_still_ends_at_the_optimum(small, monkeypatch):
    """Trouble that a new seed does not cure: from the third tree on SCIP runs with its numerics emphasis
    and no presolving (another strategy, not only another path), and the solve still ends certified."""
    from dpdist.selection.best_subset import oa as oa_module

    supports, values = enumerate_values(small)
    attempts = trouble_on_first_attempt(monkeypatch, trees=3)
    models = []
    real = oa_module._master_model
    monkeypatch.setattr(oa_module, "_master_model", lambda *a: models.append(real(*a)) or models[-1])
    res = solve_master(oracle_for(small, 1e-9), [tuple(int(j) for j in supports[np.argmax(values)])], gap=1e-9)
    assert attempts == [0, 1, 2, 3] and res.status == "optimal"
    assert res.support == tuple(int(j) for j in supports[np.argmin(values)])
    presolve = [m.getParam("presolving/maxrounds") for m in models]
    assert presolve[0] != 0 and presolve[1] != 0 and presolve[2] == 0 and presolve[3] == 0


def test_an_exception_inside_the_tree_is_raised_as_it_was(small, monkeypatch):
    """Out of memory while SCIP's callback evaluates a support is a machine failure (never recorded as a
    release's outcome): it must not become SCIP's plain "unspecified error" (an ``Exception``)."""
    from dpdist.selection.best_subset import oa as oa_module

    supports, values = enumerate_values(small)
    oracle = oracle_for(small, 1e-9)
    worst = tuple(int(j) for j in supports[np.argmax(values)])
    oracle.evaluate(worst)
    oracle.cut(worst)
    real = oa_module.Oracle.evaluate

    def evaluate(self, support):
        if tuple(sorted(int(j) for j in support)) not in self.values:  # a new support, inside the tree
            raise MemoryError("out of memory in the oracle")
        return real(self, support)

    monkeypatch.setattr(oa_module.Oracle, "evaluate", evaluate)
    with pytest.raises(MemoryError, match="out of memory in the oracle"):
        solve_master(oracle, [worst], gap=1e-9)


def test_the_top_r_list_stays_exact_when_every_first_tree_is_in_trouble(small, monkeypatch):
    """In collecting mode the retry keeps the supports already collected (no-good cuts) and the fallen
    limit: the list is still the exact top-R."""
    supports, values = enumerate_values(small)
    attempts = trouble_on_first_attempt(monkeypatch)
    lst = top_r_list(LocalExecutor(small), TOL * small.delta)
    assert attempts.count(0) >= 1 and attempts.count(0) == attempts.count(1)
    R = lst.R
    _, listed_values = lst.listed()
    np.testing.assert_allclose(sorted(listed_values), np.sort(values)[:R], atol=1e-9)


def test_scip_catching_the_operators_ctrl_c_is_a_keyboard_interrupt(small, monkeypatch):
    trouble_on_first_attempt(monkeypatch, "userinterrupt")
    supports, _ = enumerate_values(small)
    with pytest.raises(KeyboardInterrupt):
        solve_master(oracle_for(small, 1e-9), [tuple(int(j) for j in supports[0])], gap=1e-9)
