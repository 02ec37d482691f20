"""The selectors: charge before compute, refusals recorded and replayed, paper mode, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from bss_helpers import bss_data
from sklearn.base import clone

from dpdist.exceptions import BudgetExceeded, ParameterError, ReleaseRefused, SolverFailure
from dpdist.privacy.accountant import Accountant
from dpdist.selection.best_subset import BSSMistakesSelector, BSSTopRSelector
from dpdist.selection.best_subset import oa as oa_module
from dpdist.selection.best_subset import top_r as top_r_module
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
    assert rel.loss.rho == pytest.approx(2.0 ** 2 / 8)  # epsilon-bounded range: epsilon^2/8-zCDP
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
    assert rel.result is not None and '__dpdist_failure__' in rel.result and 'ReleaseRefused' in rel.result
    with pytest.raises(ReleaseRefused, match="recorded as this release.s outcome"):  # replayed, never redrawn
        sel.fit(X, y, acc, "d", key="ptr")
    assert acc.status("d").epsilon_spent == pytest.approx(0.5)


def test_mip_time_limit_is_a_refusal_that_keeps_the_charge(data, acc, monkeypatch):
    X, y = data

    def out_of_time(*args, **kwargs):
        return MasterResult("timelimit", None, None, -np.inf, 1.0, 0, 0)

    monkeypatch.setattr(oa_module, "solve_master", out_of_time)
    monkeypatch.setattr(top_r_module, "solve_master", out_of_time)
    with pytest.raises(SolverFailure, match="time limit \\(7 s\\).*charge stands"):
        BSSTopRSelector(s=3, epsilon=1.0, bounds="clip", time_limit=7).fit(X, y, acc, "d")
    assert acc.status("d").epsilon_spent == pytest.approx(1.0)


def test_bad_input_costs_nothing(data, acc):
    X, y = data
    for kw in (dict(s=20), dict(r=0.0), dict(x_bound=-1.0), dict(y_bound=0.0), dict(epsilon=0.0), dict(tol=0.5),
               dict(loss="huber")):
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
