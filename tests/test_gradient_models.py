"""The gradient learners as scikit-learn estimators: fit, predict, the charges, replay, from_release."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

from dpdist.exceptions import ParameterError
from dpdist.gradient_models import (
    AutoClassifier,
    AutoRegressor,
    DPGDClassifier,
    DPGDRegressor,
    DPIHTClassifier,
    DPIHTRegressor,
    DPSGDClassifier,
    DPSGDRegressor,
    SelectTrainClassifier,
    SelectTrainRegressor,
)
from dpdist.privacy.accountant import Accountant


@pytest.fixture(scope="module")
def binary():
    rng = np.random.default_rng(0)
    X = sp.random(3000, 60, density=0.15, random_state=1, format="csr")
    X.data = rng.uniform(0.2, 1.0, X.nnz)
    w = np.zeros(60)
    w[:5] = [3.0, -3.0, 2.5, -2.5, 2.0]
    margin = (X @ w) / np.maximum(1e-9, np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel()))
    y = np.where(margin > 0, "yes", "no")
    return X, y, margin


CLASSIFIERS = [
    DPSGDClassifier(epochs=20, batch_size=500, lr=5.0),
    DPGDClassifier(max_iter=100, lr=30.0),
    DPIHTClassifier(s=10, max_iter=60, lr=30.0, intercept_scaling=0.1),
    SelectTrainClassifier(k=10, epochs=20, batch_size=500, lr=5.0),
    AutoClassifier(),
]


@pytest.mark.parametrize("est", CLASSIFIERS, ids=lambda e: type(e).__name__)
def test_classifiers_learn_at_a_large_budget_with_the_users_labels(binary, est):
    X, y, _ = binary
    model = clone(est).set_params(epsilon=50.0, random_state=0).fit(X[:2500], y[:2500])
    assert set(model.predict(X[2500:])) <= {"yes", "no"} and list(model.classes_) == ["no", "yes"]
    assert model.score(X[2500:], y[2500:]) > 0.8
    assert model.coef_.shape == (1, 60) and model.predict_proba(X[:3]).shape == (3, 2)


@pytest.mark.parametrize("cls", [DPSGDRegressor, DPGDRegressor, DPIHTRegressor, SelectTrainRegressor, AutoRegressor])
def test_regressors_fit_clipped_targets(binary, cls):
    X, _, margin = binary
    y = np.clip(margin / 3.0, -1, 1)
    kw = {"s": 10, "lr": 20.0} if cls is DPIHTRegressor else ({"k": 10} if cls is SelectTrainRegressor else {})
    model = cls(epsilon=50.0, random_state=0, **kw).fit(X, y)
    assert np.corrcoef(model.predict(X), y)[0, 1] > 0.5


def test_a_fit_with_a_ledger_charges_the_count_then_the_model_and_replays(tmp_path, binary):
    X, y, _ = binary
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 5.0, 1e-6)
    with pytest.raises(ParameterError, match="classes are public schema"):  # not read from y for a release
        SelectTrainClassifier(k=10).fit(X, y, acc, "d", key="m")
    assert acc.history("d") == []
    est = SelectTrainClassifier(k=10, epsilon=1.0, epochs=2, batch_size=500, classes=["no", "yes"])
    first = clone(est).fit(X, y, acc, "d", key="m")
    hist = acc.history("d")
    assert [r.key for r in hist] == ["m/count", "m"]
    assert hist[1].privacy_loss == est.privacy_charge(first.n_public_).loss  # charged what it says
    assert hist[1].epsilon <= 1.0 + 1e-9 and hist[0].epsilon == pytest.approx(0.01)
    again = clone(est).fit(X, y, acc, "d", key="m")  # replayed: the same model, nothing charged
    assert np.array_equal(again.coef_, first.coef_) and len(acc.history("d")) == 2
    assert np.count_nonzero(first.coef_) <= 10
    rebuilt = SelectTrainClassifier.from_release(acc.history("d")[1].to_dict("d"))
    with pytest.raises(ParameterError, match="k=60 must be smaller"):  # the public width: before any charge
        clone(est).set_params(k=60).fit(X, y, acc, "d", key="wide")
    assert [r.key for r in acc.history("d")] == ["m/count", "m"]
    assert np.array_equal(rebuilt.predict(X), first.predict(X))
    given = clone(est).set_params(n_records=3000).fit(X, y, acc, "d", key="n")  # a public count: no count release
    assert [r.key for r in acc.history("d")][-1] == "n" and given.n_public_ == 3000


def test_a_released_model_carries_its_row_normalisation(binary):
    X, y, _ = binary
    model = DPSGDClassifier(epsilon=20.0, epochs=2, batch_size=500, random_state=1).fit(X, y)
    result = {
        "indices": np.flatnonzero(model.coef_).tolist(),
        "values": model.coef_[model.coef_ != 0].tolist(),
        "intercept": model.intercept_,
        "n_features": 60,
        "row_norm": "l2",
        "classes": ["no", "yes"],
    }
    rebuilt = DPSGDClassifier.from_release(result)
    assert np.allclose(rebuilt.decision_function(X * 7.0), model.decision_function(X))  # scale-free rows


@pytest.mark.parametrize(
    "params, message",
    [
        ({"epsilon": 0}, "epsilon"),
        ({"delta": 0}, "delta"),
        ({"row_norm": "l3"}, "row_norm"),
        ({"clip": -1}, "clip"),
        ({"batch_size": 0}, "batch_size"),
        ({"n_records": 0}, "n_records"),
        ({"count_epsilon": 0}, "count_epsilon"),
    ],
)
def test_bad_parameters_are_refused_before_anything_runs(binary, params, message):
    X, y, _ = binary
    with pytest.raises(ParameterError, match=message):
        DPSGDClassifier(**params).fit(X, y)
    with pytest.raises(ParameterError, match="selection_share"):
        SelectTrainClassifier(selection_share=1.0).fit(X, y)


def test_exact_grid_search_over_private_fits_warns(binary):
    from sklearn.model_selection import GridSearchCV

    from dpdist.exceptions import NonPrivateSelectionWarning
    from dpdist.linear_model import DPFrankWolfeClassifier

    X, y, _ = binary
    for est, grid in (
        (DPSGDClassifier(epochs=1, batch_size=500, n_records=2000), {"lr": [1.0, 3.0]}),
        (DPFrankWolfeClassifier(max_iter=20), {"lam": [5.0, 50.0]}),
    ):
        with pytest.warns(NonPrivateSelectionWarning, match="PrivateSearch"):
            GridSearchCV(est, grid, cv=2).fit(X[:1000], y[:1000])


@pytest.mark.parametrize(
    "cls, pair",
    [
        (AutoClassifier, (SelectTrainClassifier, DPSGDClassifier)),
        (AutoRegressor, (SelectTrainRegressor, DPSGDRegressor)),
    ],
)
def test_the_default_learner_chooses_from_public_values_and_charges_the_chosen_learner(cls, pair):
    import math

    budget = dict(epsilon=1.0, delta=1e-6)
    sparse, dense = pair[0](**budget), pair[1](**budget)
    sigma = 1.0 / math.sqrt(2.0 * sparse.privacy_charge(100_000).details["screening_rho"])
    model = cls(**budget)
    # the rule: select-then-train when its screening's noise is at most screen_noise_limit n~
    edge = math.ceil(sigma / model.screen_noise_limit)
    assert type(model.chosen(edge + 50)) is pair[0] and type(model.chosen(edge - 50)) is pair[1]
    for n, chosen in ((edge + 50, sparse), (edge - 50, dense)):
        charge = model.privacy_charge(n)
        assert charge.loss == chosen.privacy_charge(n).loss  # exactly the chosen learner's mechanism
        assert charge.details["learner"] == chosen.mechanism and charge.epsilon <= 1.0 + 1e-9
    assert type(cls(**budget, screen_noise_limit=0.0).chosen(10**9)) is pair[1]
    for bad in (-1.0, float("nan"), True, "1e-4"):
        with pytest.raises(ParameterError, match="screen_noise_limit"):
            cls(screen_noise_limit=bad).check_params()


def test_the_default_learner_records_which_learner_ran_and_replays(tmp_path):
    rng = np.random.default_rng(3)
    X = sp.random(4000, 400, density=0.05, random_state=3, format="csr")
    X.data = rng.uniform(0.2, 1.0, X.nnz)
    y = np.where(X[:, :5] @ np.array([3.0, -3.0, 2.0, -2.0, 2.0]) > 0, 1.0, 0.0)
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 10.0, 1e-6)
    # a screening noise at most 1 n~ (a loose limit): select-then-train runs, k-sparse
    est = AutoClassifier(epsilon=3.0, screen_noise_limit=1.0, classes=[0.0, 1.0])
    first = clone(est).fit(X, y, acc, "d", key="m")
    record = acc.history("d")[-1]
    result = record.to_dict("d")["result"]
    assert result["learner"] == "select-train" and result["method"] == "auto"
    assert record.privacy_loss == est.privacy_charge(first.n_public_).loss
    assert 0 < np.count_nonzero(first.coef_) <= 100 and first.score(X, y) > 0.6
    again = clone(est).fit(X, y, acc, "d", key="m")
    assert np.array_equal(again.coef_, first.coef_) and len(acc.history("d")) == 2
    rebuilt = AutoClassifier.from_release(record.to_dict("d"))
    assert np.array_equal(rebuilt.predict(X), first.predict(X))
    dense = clone(est).set_params(screen_noise_limit=0.0).fit(X, y, acc, "d", key="dense")
    assert acc.history("d")[-1].to_dict("d")["result"]["learner"] == "dp-sgd" and np.count_nonzero(dense.coef_) > 100


def test_the_default_learner_on_no_more_columns_than_k_is_charged_as_the_plan_says(binary, tmp_path):
    """The choice never reads the width (every charge made before the columns are known names the same
    learner): on 60 columns, with select-then-train chosen, its DP-SGD phase runs on every column and
    the release is charged select-then-train's loss, as ``privacy_charge`` says before the fit."""
    X, y, _ = binary
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 10.0, 1e-6)
    est = AutoClassifier(epsilon=5.0, screen_noise_limit=1.0, n_records=2500, classes=["no", "yes"])
    planned = est.privacy_charge(2500)  # as the CLI and the flow charge it, before any width is seen
    model = clone(est).fit(X[:2500], y[:2500], acc, "d", key="narrow")
    record = acc.history("d")[-1]
    assert record.privacy_loss == planned.loss and planned.details["learner"] == "select-train"
    assert record.to_dict("d")["result"]["learner"] == "select-train"
    assert np.count_nonzero(model.coef_) == 60 and model.score(X[2500:], y[2500:]) > 0.7
