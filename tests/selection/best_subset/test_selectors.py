"""The selectors: charge before compute, refusals recorded and replayed, paper mode, bad input."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from bss_helpers import bss_data, trouble_on_first_attempt
from sklearn.base import clone

from dpdist.exceptions import BudgetExceeded, ParameterError, ReleaseRefused, SolverAborted
from dpdist.privacy.accountant import Accountant
from dpdist.selection.best_subset import BSSMistakesSelector, BSSTopRSelector
from dpdist.selection.best_subset import base as base_module
from dpdist.selection.best_subset import mistakes as mistakes_module
from dpdist.selection.best_subset import oa as oa_module
from dpdist.selection.best_subset import top_r as top_r_module
from dpdist.selection.best_subset.executor import LocalExecutor
from dpdist.selection.best_subset.oa import MasterResult

TRUE = [1, 3, 5]


@pytest.fixture(scope="module")
def data():
    return bss_data(0, 4000, 20, 3)


@pytest.fixture()
def acc(tmp_path):
    a = Accountant(tmp_path / "ledger.sqlite")
    a.init_budget("d", 10.0, 1e-5)
    return a


def test_top_r_recovers_and_charges_epsilon(data, acc):
    X, y = data
    sel = BSSTopRSelector(s=3, epsilon=2.0, bounds="clip", random_state=0).fit(X, y, acc, "d", key="k1")
    assert list(sel.support_) == TRUE
    assert sel.get_support(indices=True).tolist() == TRUE
    assert sel.transform(X).shape == (X.shape[0], 3)
    assert acc.status("d").epsilon_spent == pytest.approx(2.0)
    (rel,) = acc.history("d")
    assert rel.mechanism == "bss/top-r" and rel.delta == 0.0 and rel.key == "k1"
    assert rel.loss.rho == pytest.approx(2.0**2 / 8)  # epsilon-bounded range: epsilon^2/8-zCDP
    again = BSSTopRSelector(s=3, epsilon=2.0, bounds="clip").fit(X, y, acc, "d", key="k1")  # replay, no charge
    assert list(again.support_) == TRUE and acc.status("d").epsilon_spent == pytest.approx(2.0)
    assert clone(sel).get_params()["epsilon"] == 2.0


def test_mistakes_ptr_charges_epsilon_delta(data, acc):
    X, y = data
    sel = BSSMistakesSelector(s=3, epsilon=4.0, delta=1e-6, bounds="clip", random_state=0).fit(X, y, acc, "d")
    assert list(sel.support_) == TRUE
    st = acc.status("d")
    assert st.epsilon_spent == pytest.approx(4.0) and st.delta_spent == pytest.approx(1e-6)


def test_failed_gap_test_is_a_recorded_refusal(acc):
    X, y = bss_data(0, 60, 20, 3)  # too few records for a stable optimum
    sel = BSSMistakesSelector(s=3, epsilon=0.5, delta=1e-6, bounds="clip", random_state=0)
    with pytest.raises(ReleaseRefused, match="propose-test-release.*charge stands"):
        sel.fit(X, y, acc, "d", key="ptr")
    assert acc.status("d").epsilon_spent == pytest.approx(0.5)
    (rel,) = acc.history("d")
    assert rel.result is not None and "__dpdist_failure__" in rel.result and "ReleaseRefused" in rel.result
    with pytest.raises(ReleaseRefused, match="recorded as this release.s outcome"):  # replayed, never redrawn
        sel.fit(X, y, acc, "d", key="ptr")
    assert acc.status("d").epsilon_spent == pytest.approx(0.5)


class CountingRng:
    """A Generator wrapper that counts the release's draws (laplace, gumbel, integers, ...)."""

    def __init__(self, seed: int) -> None:
        self._rng, self.draws = np.random.default_rng(seed), 0

    def __getattr__(self, name):
        attr = getattr(self._rng, name)
        if callable(attr):

            def counted(*args, **kwargs):
                self.draws += 1
                return attr(*args, **kwargs)

            return counted
        return attr


@pytest.mark.parametrize("cls", [BSSTopRSelector, BSSMistakesSelector])
def test_by_default_no_solve_has_a_time_limit(cls, data, monkeypatch):
    """The private default runs every MIP to its certificate: no time limit reaches SCIP."""
    X, y = data
    limits = []
    real = oa_module.solve_master

    def spy(*args, **kwargs):
        limits.append(kwargs.get("time_limit"))
        return real(*args, **kwargs)

    for module in (oa_module, top_r_module, mistakes_module):
        monkeypatch.setattr(module, "solve_master", spy)
    sel = cls(s=3, epsilon=4.0, bounds="clip", random_state=0).fit(X, y)
    assert limits and set(limits) == {None} and sel.covered and sel.privacy_charge().covered


@pytest.mark.parametrize("cls", [BSSTopRSelector, BSSMistakesSelector])
def test_the_nonprivate_time_limit_aborts_before_noise_and_is_marked_not_covered(cls, data, acc, monkeypatch):
    """The operator's opt-in guard stops the solver work before any draw: SolverAborted, with no time
    or value of the data in the message; it is the release's outcome (a function of the data and the
    solver's time): recorded under the key, the charge stands, a retry replays it instead of measuring
    again -- and the ledger marks the release as outside the guarantee."""
    X, y = data

    def out_of_time(*args, **kwargs):
        return MasterResult("timelimit", None, None, -np.inf, 1.0, 0, 0)

    for module in (oa_module, top_r_module, mistakes_module):
        monkeypatch.setattr(module, "solve_master", out_of_time)
    rng = CountingRng(0)
    monkeypatch.setattr(base_module, "check_random_state", lambda seed: rng)
    sel = cls(s=3, epsilon=4.0, bounds="clip", nonprivate_time_limit=7)
    assert not sel.covered and not sel.privacy_charge().covered
    with pytest.raises(SolverAborted, match="stopped before its certificate.*charge stands.*retry") as err:
        sel.fit(X, y, acc, "d", key="k")
    assert rng.draws == 0  # nothing random was drawn before the abort
    assert not any(ch.isdigit() for ch in str(err.value))  # no time, limit or value of the data
    assert acc.status("d").epsilon_spent == pytest.approx(4.0)
    (rel,) = acc.history("d")
    assert rel.result is not None and "SolverAborted" in rel.result  # recorded as the release's outcome
    assert rel.covered is False and acc.status("d").uncovered == 1
    monkeypatch.undo()
    with pytest.raises(SolverAborted, match="recorded as this release's outcome"):  # replayed, not re-solved
        cls(s=3, epsilon=4.0, bounds="clip", nonprivate_time_limit=7, random_state=0).fit(X, y, acc, "d", key="k")
    assert acc.status("d").epsilon_spent == pytest.approx(4.0) and len(acc.history("d")) == 1
    again = cls(s=3, epsilon=4.0, bounds="clip", random_state=0).fit(X, y, acc, "d", key="k2")
    assert list(again.support_) == TRUE  # a new release (a new key, charged again) computes
    assert acc.status("d").epsilon_spent == pytest.approx(8.0) and [r.covered for r in acc.history("d")] == [
        False,
        True,
    ]


@pytest.mark.parametrize("cls", [BSSTopRSelector, BSSMistakesSelector])
def test_a_numerical_breakdown_never_stops_a_release(cls, data, acc, monkeypatch):
    """Least-squares solves that miss their certificate (an eigendecomposition 0.1% off) and master trees
    that SCIP ends in numerical trouble (every first tree) are refined or solved again: the release is
    the mechanism's output, recorded as a release (not a failure), with the charged budget -- as with
    exact numerics. The old code recorded ``SolverAborted`` here."""
    from dpdist.selection.best_subset import least_squares as ls_module

    X, y = data
    real_eigh = np.linalg.eigh

    def off(H):
        lam, Q = real_eigh(H)
        return lam * 1.001, Q

    monkeypatch.setattr(ls_module.np.linalg, "eigh", off)
    attempts = trouble_on_first_attempt(monkeypatch)
    sel = cls(s=3, epsilon=4.0, bounds="clip", random_state=0).fit(X, y, acc, "d", key="k")
    assert 0 in attempts and 1 in attempts and list(sel.support_) == TRUE
    (rel,) = acc.history("d")
    assert rel.result is not None and "__dpdist_failure__" not in rel.result and rel.covered


def test_mistakes_draws_the_test_after_every_solve(data, acc, monkeypatch):
    """A crash in the bucket MIPs happens before the gap test is drawn, so a retry under the same key
    draws the test for the first time (audit ptr_retry.py: one charge, one test)."""
    X, y = data

    class CrashInBuckets(LocalExecutor):
        def mip_map(self, fn, items):
            raise MemoryError("out of memory in a bucket MIP")

    rng = CountingRng(0)
    monkeypatch.setattr(base_module, "check_random_state", lambda seed: rng)
    sel = BSSMistakesSelector(s=3, epsilon=4.0, delta=1e-6, bounds="clip")
    problem = sel.make_problem(X, y)
    for _ in range(2):
        with pytest.raises(MemoryError):
            sel.fit_executor(CrashInBuckets(problem), acc, "d", key="k")
        assert rng.draws == 0  # the crash came before the test's noise
    assert acc.history("d")[0].result is None
    sel.fit_executor(LocalExecutor(problem), acc, "d", key="k")
    assert rng.draws >= 2 and list(sel.support_) == TRUE  # the test, then the sampler
    assert acc.status("d").epsilon_spent == pytest.approx(4.0)


def test_top_r_list_grows_without_a_cap():
    """The certificate's list takes every entry it needs (no data-dependent overflow refusal)."""
    table = np.array([[2.0, 3.0], [4.0, 5.0]])
    lst = top_r_module.TopRList((0, 1), 1.0, table, tau=0.01)
    for k in range(10_050):
        assert lst.offer((2 + k, 3 + k), 1.5 - 1e-5 * k)  # each below the threshold: all taken
    assert lst.R == 5 and len(lst.extras) == 10_050


class FakeExecutor:
    """Recentres ``moves`` times (a better support each time), then certifies."""

    def __init__(self, moves: int) -> None:
        self.meta = SimpleNamespace(p=6, s=2)
        self.moves, self.calls = moves, 0

    def call(self, fn, item):
        return (0, 1)

    def mip(self, fn, job):
        self.calls += 1
        better = (self.calls % 5, 5)
        if fn is top_r_module.certify_unit:
            lst = top_r_module.TopRList(job.center, job.center_value, job.table, job.tau)
            if self.calls <= self.moves:
                lst.better = better
                return "better", lst
            return "infeasible", lst
        if self.calls <= self.moves:
            return MasterResult("optimal", better, 10.0 - self.calls - 1.0, -np.inf, 0.0, 0, 0)
        return MasterResult("infeasible", None, None, -np.inf, 0.0, 0, 0)


def test_recentring_has_no_limit(monkeypatch):
    """Each recentre strictly lowers F, so both methods follow as many as the data need (no refusal)."""

    def descend(executor, start, tol):  # the centre's value falls with every restart
        return tuple(start), 10.0 - executor.calls, np.full((2, 4), 20.0)

    monkeypatch.setattr(top_r_module, "local_search", descend)
    monkeypatch.setattr(mistakes_module, "local_search", descend)
    ex = FakeExecutor(8)
    assert top_r_module.top_r_list(ex, 0.1, 1.0).center == (3, 5) and ex.calls == 9
    ex = FakeExecutor(8)
    assert mistakes_module.center_and_gap(ex, 0.1, 1.0)[0] == (3, 5) and ex.calls == 9


def test_bad_input_costs_nothing(data, acc):
    X, y = data
    for kw in (
        dict(s=20),
        dict(r=0.0),
        dict(x_bound=-1.0),
        dict(y_bound=0.0),
        dict(epsilon=0.0),
        dict(tol=0.5),
        dict(loss="huber"),
    ):
        with pytest.raises(ParameterError):
            BSSTopRSelector(**{"s": 3, "bounds": "clip", **kw}).fit(X, y, acc, "d")
    with pytest.raises(ParameterError, match="x_bound"):
        BSSTopRSelector(s=3).fit(X, y, acc, "d")  # bounds="check" on unclipped Gaussian data
    with pytest.raises(ParameterError, match="delta"):
        BSSMistakesSelector(s=3, delta=0.0, bounds="clip").fit(X, y, acc, "d")
    assert acc.status("d").epsilon_spent == 0.0
    with pytest.raises(BudgetExceeded):
        BSSTopRSelector(s=3, epsilon=11.0, bounds="clip").fit(X, y, acc, "d")


def test_paper_mode_reproduces_the_seed_code_and_refuses_an_accountant(data, acc):
    X, y = data
    sel = BSSMistakesSelector(s=3, epsilon=1.0, mode="paper", bounds="clip", random_state=0).fit(X, y)
    assert list(sel.support_) == TRUE
    with pytest.raises(ParameterError, match="no privacy guarantee"):
        BSSMistakesSelector(s=3, mode="paper", bounds="clip").fit(X, y, acc, "d")
    assert acc.status("d").epsilon_spent == 0.0


def test_hinge_selectors(acc):
    X, y = bss_data(1, 3000, 15, 2, hinge=True)
    sel = BSSTopRSelector(s=2, epsilon=5.0, loss="hinge", ridge=100.0, bounds="clip", random_state=0)
    sel.fit(X, y, acc, "d")
    assert list(sel.support_) == [1, 3]
