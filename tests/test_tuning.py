"""The private search: its charge, its number of runs, one release with its count, replay."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp
from dp_audit import chisquare_against
from scipy import stats
from scipy.optimize import brentq
from sklearn.base import is_classifier

from dpdist.exceptions import ParameterError
from dpdist.gradient_models import DPSGDClassifier, DPSGDRegressor, SelectTrainClassifier
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import ORDERS, PrivacyLoss, rdp_curve
from dpdist.tuning import PrivateSearch, number_of_runs


def tnb_pmf(k: np.ndarray, mean: float, shape: float) -> np.ndarray:
    """Papernot & Steinke 2022, Def. 1, gamma (the halting probability) solved from the mean."""

    def mean_of(g):
        return (1 - g) / (g * math.log(1 / g)) if shape == 0 else shape * (1 - g) / (g * (1 - g**shape))

    g = brentq(lambda g: mean_of(g) - mean, 1e-12, 1 - 1e-12)
    if shape == 0:
        return (1 - g) ** k / (k * math.log(1 / g))
    return stats.nbinom.pmf(k, shape, g) / (1 - g**shape)


@pytest.mark.parametrize("mean, shape", [(3.0, 0.0), (4.0, 1.0), (2.5, 2.0)])
def test_the_number_of_runs_has_its_truncated_negative_binomial_law(mean, shape):
    rng = np.random.default_rng(2)
    draws = np.array([number_of_runs(rng, mean, shape) for _ in range(30_000)])
    assert draws.min() >= 1
    ks = np.arange(1, 60)
    counts = np.array([np.sum(draws == k) for k in ks] + [np.sum(draws >= 60)])
    probs = np.append(tnb_pmf(ks, mean, shape), max(0.0, 1 - tnb_pmf(ks, mean, shape).sum()))
    assert chisquare_against(counts, probs) > 1e-3
    assert chisquare_against(counts, np.append(tnb_pmf(ks, 2 * mean, shape), 0.0) + 1e-12) < 1e-3


@pytest.fixture(scope="module")
def data():
    X = sp.random(2500, 40, density=0.2, random_state=4, format="csr")
    y = np.where(X[:, 0].toarray().ravel() - X[:, 1].toarray().ravel() > 0, 1.0, 0.0)
    return X, y


def small_grid():
    return [DPSGDClassifier(epochs=3, batch_size=500, lr=3.0), SelectTrainClassifier(k=5, epochs=3, batch_size=500)]


def test_the_charge_is_the_best_of_runs_of_the_largest_run_curve():
    search = PrivateSearch(candidates=small_grid(), epsilon=2.0, delta=1e-6)
    charge = search.privacy_charge(2000)
    assert charge.epsilon <= 2.0 and charge.details["noise_scale"] >= 1.0
    scale, n_train = charge.details["noise_scale"], search.n_train(2000)
    runs = []
    for c in search._candidates():
        train = c.privacy_charge(n_train, noise_scale=scale).loss
        score = PrivacyLoss.laplace(search.score_epsilon / scale)
        runs.append(np.maximum(rdp_curve(train.parts, ORDERS), rdp_curve(score.parts, ORDERS)))
    inner = PrivacyLoss.tabulated("inner", np.max(runs, axis=0), 1e-6)
    expected = PrivacyLoss.best_of_runs([inner], search._mean, 0.0, 1e-6)
    np.testing.assert_allclose(rdp_curve(charge.loss.parts, ORDERS), rdp_curve(expected.parts, ORDERS))
    # a smaller noise scale would not meet the budget: the calibration is the smallest within 1e-3
    assert search.search_loss(n_train, scale / 1.002).epsilon > 2.0


def test_a_search_is_one_release_after_its_count_and_replays(tmp_path, data):
    X, y = data
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 5.0, 1e-6)
    search = PrivateSearch(candidates=small_grid(), epsilon=2.0, random_state=0, classes=[0.0, 1.0]).fit(
        X, y, acc, "d", key="s"
    )
    assert [r.key for r in acc.history("d")] == ["s/count", "s"]
    assert acc.history("d")[1].mechanism == "private-search" and acc.history("d")[1].epsilon <= 2.0
    assert search.best_index_ in (0, 1) and search.predict(X[:5]).shape == (5,)
    assert set(search.predict(X)) <= {0.0, 1.0} and search.score(X, y) > 0.6
    again = PrivateSearch(candidates=small_grid(), epsilon=2.0, classes=[0.0, 1.0]).fit(X, y, acc, "d", key="s")
    assert np.array_equal(again.coef_, search.coef_) and len(acc.history("d")) == 2


def test_bad_grids_are_refused(data):
    X, y = data
    with pytest.raises(ParameterError, match="classifiers or all regressors"):
        PrivateSearch(candidates=[DPSGDClassifier(), DPSGDRegressor()]).fit(X, y)
    with pytest.raises(ParameterError, match="at least one"):
        PrivateSearch(candidates=[]).fit(X, y)
    with pytest.raises(ParameterError, match="validation_fraction"):
        PrivateSearch(candidates=small_grid(), validation_fraction=0.7).fit(X, y)


def _key_with(X, y, fraction, empty):
    """A split key under which the search's keyed split leaves its ``empty`` side with no record."""
    from dpdist.data.split import record_sides

    for i in range(256):
        key = bytes([i]) * 32
        val = record_sides(X, np.where(y == 1.0, 1.0, -1.0), key, fraction)
        if (empty == "validation" and not val.any()) or (empty == "training" and val.all()):
            return key
    raise AssertionError("no such key")


@pytest.mark.parametrize("empty, fraction", [("validation", 0.1), ("training", 0.49)])
@pytest.mark.parametrize("grid", ["dp-sgd", "select-train"])
def test_a_search_whose_validation_or_training_side_is_empty_releases(tmp_path, empty, fraction, grid):
    """Which side a record falls on depends on the data (P(no validation record) = 0.9^n): an empty side
    is scored as its defined value (the empty sum, 0) and trained on as it is (no rows: noise only), so
    the search releases, as on any other data, never a failure the data made."""
    X = sp.csr_matrix(np.array([[0.5, 0.1, 0.0], [0.2, -0.3, 0.1], [0.1, 0.4, -0.2]]))
    y = np.array([1.0, 0.0, 1.0])
    cand = DPSGDClassifier(epochs=1, batch_size=2) if grid == "dp-sgd" else SelectTrainClassifier(k=1, epochs=1)
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 10.0, 1e-6)
    search = PrivateSearch(
        candidates=[cand], epsilon=2.0, n_records=3, classes=[0.0, 1.0], validation_fraction=fraction
    )
    search.fit(X, y, acc, "d", key="s", split_key=_key_with(X, y, fraction, empty))
    (rec,) = acc.history("d")
    assert rec.key == "s" and rec.mechanism == "private-search"
    assert json.loads(rec.result)["validation_score"] == search.validation_score_  # released, not a failure
    assert math.isfinite(search.validation_score_) and search.predict(X).shape == (3,)


def test_an_empty_validation_side_scores_the_empty_sum():
    for cand in (DPSGDClassifier(), DPSGDRegressor()):
        model = {"indices": [0], "values": [1.0], "intercept": 0.0, "n_features": 3, "row_norm": "l2"}
        if is_classifier(cand):
            model["classes"] = [0.0, 1.0]
        assert PrivateSearch._score(cand, model, sp.csr_matrix((0, 3)), np.zeros(0)) == 0.0
        one = PrivateSearch._score(cand, model, sp.csr_matrix(np.array([[1.0, 0.0, 0.0]])), np.array([1.0]))
        assert abs(one - 0.0) <= (1.0 if is_classifier(cand) else (2.0 * cand.y_bound) ** 2)  # the sensitivity
