"""DP-SIS: enforced bounds, the accountant charged before release, and the right features."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpdist.data.store import open_store, write_store
from dpdist.data.synthetic import make_synthetic
from dpdist.exceptions import BudgetExceeded, ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.selection.sis import DPSIS, MECHANISMS, correlation_scores, store_scores


def bounded(n=200, d=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    y = np.clip(X[:, [3, 30, 100]].sum(axis=1) / 3 + 0.05 * rng.normal(size=n), -1, 1)
    return X, y


def test_scores_are_absolute_correlations_dense_and_sparse():
    X, y = bounded()
    np.testing.assert_allclose(correlation_scores(X, y), np.abs(X.T @ y))
    np.testing.assert_allclose(correlation_scores(sp.csr_matrix(X), y), np.abs(X.T @ y))


def test_bounds_are_enforced():
    X, y = bounded()
    with pytest.raises(ParameterError, match=r"\|X_ij\| <= 1"):
        DPSIS(k=3, epsilon=1.0).fit(2 * X, y)
    with pytest.raises(ParameterError, match=r"\|y_i\| <= 1"):
        DPSIS(k=3, epsilon=1.0).fit(X, 3 * y)
    # clipping is the per-record alternative
    assert DPSIS(k=3, epsilon=1e4, bounds="clip", random_state=0).fit(2 * X, 3 * y).features_.size == 3


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_large_epsilon_finds_the_signal(mechanism):
    X, y = bounded()
    delta = 1e-6 if mechanism == "laplace" else 0.0
    sis = DPSIS(k=3, epsilon=1e5, delta=delta, mechanism=mechanism, random_state=1).fit(X, y)
    assert sis.features_.tolist() == [3, 30, 100]
    assert sis.get_support().sum() == 3 and sis.transform(X).shape == (200, 3)


def test_accountant_charged_once_per_key_and_refusal(tmp_path):
    X, y = bounded()
    acc = Accountant(tmp_path / "ledger.sqlite")
    acc.init_budget("ds", 1.0, 0.0)
    first = DPSIS(k=3, epsilon=0.6, random_state=2).fit(X, y, acc, "ds", key="k1").features_
    again = DPSIS(k=3, epsilon=0.6, random_state=99).fit(X, y, acc, "ds", key="k1").features_  # retried: replayed
    assert first.tolist() == again.tolist()
    assert acc.status("ds").epsilon_spent == pytest.approx(0.6)
    with pytest.raises(BudgetExceeded):
        DPSIS(k=3, epsilon=0.6).fit(X, y, acc, "ds", key="k2")
    assert [r.key for r in acc.history("ds")] == ["k1"]
    with pytest.raises(ParameterError, match="dataset is required"):
        DPSIS(k=3, epsilon=0.1).fit(X, y, acc)


def test_parameters_are_validated_in_fit_and_it_is_a_scikit_learn_selector():
    from sklearn.base import clone
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline

    X, y = bounded()
    for kw, needle in (
        ({"mechanism": "nope"}, "mechanism"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"delta": 1e-5, "mechanism": "peeling"}, "pure epsilon-DP"),
    ):
        sel = DPSIS(k=3, **{"epsilon": 1.0, **kw})
        with pytest.raises(ParameterError, match=needle):
            sel.fit(X, y)
        with pytest.raises(ParameterError, match=needle):
            sel.privacy_charge()
    with pytest.raises(ParameterError, match="smaller than the number of features"):
        DPSIS(k=10, epsilon=1.0).fit(X[:, :10], y)
    sel = DPSIS(k=3, epsilon=1e5, random_state=1)
    assert clone(sel).get_params() == sel.get_params()
    pipe = make_pipeline(DPSIS(k=3, epsilon=1e5, random_state=1), LinearRegression()).fit(X, y)
    assert pipe[0].get_support(indices=True).tolist() == [3, 30, 100] and pipe[1].coef_.shape == (3,)


def test_store_scores_match_in_memory(tmp_path):
    syn = make_synthetic("rcv1", random_state=0, n=3000, d=2000)
    X, y = syn.materialize()
    write_store(tmp_path / "s", X, y, task="binary", block_rows=500)
    store = open_store(tmp_path / "s")
    got = store_scores(store, block_rows=700)
    np.testing.assert_allclose(got, correlation_scores(X, y), rtol=1e-12)  # labels -1/+1 stay -1/+1


def test_the_unverified_laplace_top_k_never_releases_through_an_accountant(tmp_path):
    X, y = bounded()
    acc = Accountant(tmp_path / "ledger.sqlite")
    acc.init_budget("ds", 10.0, 1e-3)
    with pytest.raises(ParameterError, match="experiments only"):
        DPSIS(k=3, epsilon=1.0, delta=1e-6, mechanism="laplace").fit(X, y, acc, "ds")
    assert acc.history("ds") == [] and acc.status("ds").epsilon_spent == 0
    assert DPSIS(k=3, epsilon=1e5, delta=1e-6, mechanism="laplace", random_state=1).fit(X, y).features_.size == 3
