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
    "est, n, d, learner",
    [
        (AutoClassifier(class_counts=[90_000.0, 90_000.0]), 180_000, 47_236, "select-train"),
        (AutoClassifier(epsilon=0.1, class_counts=[90_000.0, 90_000.0]), 180_000, 47_236, "select-train"),
        (AutoClassifier(class_counts=[1_500.0, 1_500.0]), 3_000, 47_236, "dp-sgd"),
        (AutoClassifier(class_counts=[90_000.0, 90_000.0]), 180_000, 60, "dp-sgd"),  # nothing to screen
        (AutoClassifier(class_counts=[170_000.0, 9_000.0]), 179_000, 47_236, "dp-sgd+threshold"),
        (AutoClassifier(epsilon=3.0, dense=True, class_counts=[30.0, 20.0]), 50, 7_129, "screened-centroid"),
        (AutoRegressor(y_bound=7.5), 40_000, 280, "adassp"),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else "",
)
def test_the_default_learner_follows_the_public_rule_and_charges_the_chosen_learner(est, n, d, learner):
    """One rule (dpdist.gradient_models.default_learner.plan_default) for the CLI's, the flows' and the
    estimators' default:
    the learner it names is the one charged, exactly as that learner charges itself."""
    assert est.plan(n, d).learner == learner
    chosen = est.chosen(n, d)
    charge = est.privacy_charge(n, d)
    assert charge.loss == chosen.privacy_charge(n, d).loss and charge.details["learner"] == learner
    assert charge.epsilon <= est.epsilon * (1 + 1e-9) and charge.mechanism.startswith("auto/")
    for bad in ([1.0], [0.0, 5.0], "ab", [float("nan"), 1.0]):
        with pytest.raises(ParameterError, match="class_counts"):
            AutoClassifier(class_counts=bad).check_params()
    with pytest.raises(ParameterError, match="private search"):
        est.privacy_charge(n, d, noise_scale=2.0)


def test_the_default_learner_releases_its_class_counts_records_which_learner_ran_and_replays(tmp_path):
    rng = np.random.default_rng(3)
    X = sp.random(4000, 400, density=0.05, random_state=3, format="csr")
    X.data = rng.uniform(0.2, 1.0, X.nnz)
    score = np.asarray(X[:, :5] @ np.array([3.0, -3.0, 2.0, -2.0, 2.0])).ravel()
    y = np.where(score > np.quantile(score, 0.9), 1.0, 0.0)  # 10% positives: imbalanced
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 10.0, 1e-6)
    est = AutoClassifier(epsilon=3.0, classes=[0.0, 1.0], count_epsilon=0.1)  # counts to +-10: the rule sees 10%
    first = clone(est).fit(X, y, acc, "d", key="m")
    counts, record = acc.history("d")[-2], acc.history("d")[-1]
    assert counts.to_dict("d")["key"] == "m/count" and counts.to_dict("d")["mechanism"] == "count/laplace"
    neg, pos = counts.to_dict("d")["result"]
    assert abs(neg - 3600) < 2000 and abs(pos - 400) < 2000 and first.n_public_ == max(1, round(neg + pos))
    result = record.to_dict("d")["result"]
    assert result["learner"] == "dp-sgd+threshold" and result["method"] == "auto"
    assert result["threshold"] == pytest.approx(np.log(pos / neg))  # the noisy prior: post-processing
    assert record.privacy_loss == est.privacy_charge(first.n_public_, 400).loss
    again = clone(est).fit(X, y, acc, "d", key="m")
    assert np.array_equal(again.coef_, first.coef_) and len(acc.history("d")) == 2
    rebuilt = AutoClassifier.from_release(record.to_dict("d"))
    assert np.array_equal(rebuilt.predict(X), first.predict(X))
    assert 0.0 < np.mean(first.predict(X)) < 1.0  # not the majority class everywhere


def test_released_counts_are_the_ones_the_fit_would_release_and_then_public(tmp_path, binary):
    """A front end releases the counts first (to show the pre-flight before the model is charged): the
    same key and charge as the fit's own, and the fit then releases nothing more than the model."""
    X, y, _ = binary
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("d", 10.0, 1e-6)
    est = AutoClassifier(epsilon=5.0, classes=["no", "yes"])
    n, counts = est.release_counts(y[:2500], acc, "d", "k")
    assert counts is not None and n == max(1, round(sum(counts))) and est.n_records == n
    assert acc.history("d")[-1].to_dict("d")["key"] == "k/count"
    est.fit(X[:2500], y[:2500], acc, "d", key="k")
    assert len(acc.history("d")) == 2 and est.n_public_ == n
    assert est.score(X[2500:], y[2500:]) > 0.7


def test_dp_gd_regression_takes_its_step_from_public_bounds_and_does_not_diverge():
    """Nonnegative unit rows (a table in raw units, as BlogFeedback): the mean Gram's top eigenvalue is
    near 1, and the old step 30 swung the iterates apart (R^2 -11 there). The default step is 1 / L from
    the public smoothness bound L = 1 + c^2 (+ l2); a step above 2 / L is refused before anything is read."""
    rng = np.random.default_rng(0)
    X = rng.random((3000, 20))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.clip(3.0 * (X[:, 0] - X[:, 1]) + 0.1 * rng.standard_normal(3000), -1.0, 1.0)
    model = DPGDRegressor(epsilon=1e3, random_state=0).fit(X, y)
    assert model.step_size() == pytest.approx(1.0 / (1.0 + 0.1**2))
    assert model.score(X, y) > -0.05  # the plain steps from 0 never leave the loss above where they began
    with pytest.raises(ParameterError, match="lr=30"):
        DPGDRegressor(lr=30.0).check_params()
    with pytest.raises(ParameterError, match="pass lr"):
        DPGDRegressor(row_norm=None).check_params()
    assert DPGDRegressor(lr=1.5, intercept_scaling=0.5).check_params() is None  # 1.5 <= 2 / 1.25
    wild = DPGDRegressor(epsilon=1e3, random_state=0)  # the step the bound refuses diverges on these rows
    wild.step_size = lambda: 30.0  # type: ignore[method-assign]
    assert wild.fit(X, y).score(X, y) < -1.0
