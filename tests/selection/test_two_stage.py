"""Two-stage (Kifer et al.): block assignment, truncated votes, the Laplace release, stage 2."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import PrivacyLoss
from dpdist.selection.two_stage import (
    TwoStageRegression,
    TwoStageSelector,
    assign_blocks,
    block_votes,
    blocks_from_count,
    truncated_vote,
)


def linear(n=400, d=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X[:, [1, 7, 20]] @ np.array([2.0, -1.5, 1.0]) + 0.1 * rng.normal(size=n)
    return X, y


def test_blocks_partition_the_records():
    blocks = assign_blocks(1000, 31, 0)
    assert len(blocks) == 31
    assert np.array_equal(np.sort(np.concatenate(blocks)), np.arange(1000))
    assert max(map(len, blocks)) < 3 * 1000 / 31
    with pytest.raises(ParameterError, match="n_blocks"):
        assign_blocks(10, 0, 0)
    # m from a released noisy count: floor(sqrt), at least one block
    assert blocks_from_count(1000.4) == 31 and blocks_from_count(-3.0) == 1


def test_votes_are_truncated_to_s():
    coef = np.array([0.0, 3.0, -5.0, 0.1, 0.0, 2.0])
    assert truncated_vote(coef, 2).tolist() == [1, 2]
    assert truncated_vote(coef, 10).tolist() == [1, 2, 3, 5]
    X, y = linear()
    assert len(block_votes(X, y, 2, 0.01)) == 2


def test_selector_finds_support_and_charges_a_count_and_the_votes(tmp_path):
    X, y = linear()
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 2e4, 0.0)
    sel = TwoStageSelector(k=3, epsilon=1e4, alpha=0.1, random_state=0).fit(X, y, acc, "ds", key="a")
    assert sel.features_.tolist() == [1, 7, 20] and sel.n_blocks_ == 20  # floor(sqrt(400 + tiny noise))
    (rec,) = acc.history("ds")
    assert (rec.mechanism, rec.epsilon, rec.key) == ("two_stage/samp_agg", 1e4, "a")
    assert rec.privacy_loss.parts == (("laplace", 1e3, 1), ("laplace", 9e3, 1))
    # with a public number of blocks the whole epsilon goes to the votes, and n is never read
    fixed = TwoStageSelector(k=3, epsilon=1.0, n_blocks=7)
    assert fixed.privacy_charge().loss == PrivacyLoss.laplace(1.0)


def test_release_noise_scale_is_2s_over_m_epsilon():
    """The noisy aggregate's top-k behaves like Lap(2s/(m eps)): compare with a simulation."""
    sel = TwoStageSelector(k=2, epsilon=0.5, n_blocks=16, random_state=3)
    counts = np.zeros(50)
    counts[[4, 9]] = 8.0  # 8 of m=16 blocks vote for 4 and 9
    hits = sum(set(sel.fit_votes(counts, 16).features_) == {4, 9} for _ in range(4000)) / 4000
    rng = np.random.default_rng(4)
    b = 2 * 2 / (16 * 0.5)
    noisy = counts / 16 + rng.laplace(scale=b, size=(20000, 50))
    expected = np.mean([set(np.argsort(-r)[:2]) == {4, 9} for r in noisy])
    assert hits == pytest.approx(expected, abs=0.03)


def test_two_stage_regression_releases_both_stages(tmp_path):
    X, y = linear(n=2000)
    X = X / np.abs(X).max()
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 2e4, 0.0)
    model = TwoStageRegression(k=3, epsilon=1e4, alpha=0.01, random_state=5).fit(X, y / np.abs(y).max(), acc, "ds", "r")
    assert model.features_.tolist() == [1, 7, 20]
    assert np.count_nonzero(model.coef_) <= 3
    assert np.sign(model.coef_[[1, 7, 20]]).tolist() == [1.0, -1.0, 1.0]
    assert [(h.key, h.epsilon) for h in acc.history("ds")] == [("r", 5e3), ("r/stage2", 5e3)]
    assert json_result(acc, "r/stage2") == pytest.approx(model.stage2_.tolist())
    with pytest.raises(ParameterError, match="epsilon_split"):
        TwoStageRegression(k=3, epsilon=1.0, epsilon_split=1.0).fit(X, y)


def json_result(acc, key):
    import json

    return next(json.loads(h.result) for h in acc.history("ds") if h.key == key)


def test_votes_outside_the_truncation_bound_are_refused():
    sel = TwoStageSelector(k=2, epsilon=1.0, n_blocks=4, random_state=0)
    with pytest.raises(ParameterError, match="block votes"):
        sel.fit_votes(np.full(10, 3.0), 4)  # 30 votes from 4 blocks of at most 2
    with pytest.raises(ParameterError, match="block votes"):
        sel.fit_votes(np.array([5.0] + [0.0] * 9), 4)  # a feature voted by more blocks than exist
    with pytest.raises(ParameterError, match="public n_blocks"):
        TwoStageSelector(k=2, epsilon=1.0).fit_votes(np.zeros(10), 4)  # votes need the public m they were cast over
    assert math.isqrt(400) == 20


def test_a_sparse_block_is_fitted_on_its_non_empty_columns_with_the_same_solution():
    import warnings

    import scipy.sparse as sp
    from sklearn.linear_model import Lasso

    from dpdist.selection.two_stage import lasso_coefficients

    rng = np.random.default_rng(0)
    X = sp.random(300, 5000, density=0.004, format="csr", random_state=1)
    w = np.zeros(5000)
    w[np.unique(X.indices)[:20]] = 3.0
    y = X @ w + 0.1 * rng.normal(size=300)
    ours = lasso_coefficients(X, y, 0.001)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = Lasso(alpha=0.001, max_iter=5000, tol=1e-4).fit(sp.csc_matrix(X), y).coef_
    assert np.count_nonzero(full) > 3
    np.testing.assert_allclose(ours, full, atol=1e-9)
    # bit for bit the fit on the block's non-empty columns cut from its CSC form, and the same vote
    nonempty = np.flatnonzero(np.diff(sp.csc_matrix(X).indptr))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cut = Lasso(alpha=0.001, max_iter=5000, tol=1e-4).fit(sp.csc_matrix(X)[:, nonempty], y).coef_
    assert ours[nonempty].tobytes() == cut.tobytes() and not np.delete(ours, nonempty).any()
    assert np.array_equal(block_votes(X, y, 5, 0.001), truncated_vote(ours, 5))
    assert not lasso_coefficients(sp.csr_matrix((3, 10)), np.ones(3), 0.1).any()  # an empty block votes nothing
