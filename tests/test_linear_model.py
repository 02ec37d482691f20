"""DP Frank-Wolfe estimators and ``dpdist train``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from command import synth_with_budget

from dpdist.cli import main
from dpdist.exceptions import ParameterError
from dpdist.linear_model import DPFrankWolfeClassifier, DPFrankWolfeRegressor
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.filter import PrivacyFilter


def data(n=3000, d=200, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.1, random_state=seed, format="csr", data_rvs=lambda k: rng.uniform(0, 1, k))
    w = np.zeros(d)
    w[:5] = [8, -8, 6, -6, 4]
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(X @ w))), "spam", "ham")
    return X, y, X @ w / 10


@pytest.mark.parametrize("method", ["fast-dp-fw", "dp-fw", "fw", "fast-fw"])
def test_classifier_learns(method):
    X, y, _ = data()
    clf = DPFrankWolfeClassifier(epsilon=20.0, delta=1e-5, lam=20.0, max_iter=300, method=method, random_state=1)
    clf.fit(X, y)
    assert list(clf.classes_) == ["ham", "spam"]
    majority = max(np.mean(y == "spam"), np.mean(y == "ham"))
    assert clf.score(X, y) > majority + 0.05
    assert np.abs(clf.coef_).sum() <= 20.0 + 1e-9
    proba = clf.predict_proba(X)
    assert proba.shape == (3000, 2) and np.allclose(proba.sum(axis=1), 1)


def test_regressor_bounds_and_accountant(tmp_path):
    X, _, y = data()
    with pytest.raises(ParameterError, match=r"\|y_i\| <= 0.1"):
        DPFrankWolfeRegressor(y_bound=0.1, max_iter=10).fit(X, y)
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 2.0, 1e-5)
    reg = DPFrankWolfeRegressor(
        epsilon=1.0, delta=1e-6, lam=5.0, max_iter=200, y_bound=1.0, bounds="clip", random_state=2
    ).fit(X, y, acc, "ds", key="m1")
    again = DPFrankWolfeRegressor(
        epsilon=1.0, delta=1e-6, lam=5.0, max_iter=200, y_bound=1.0, bounds="clip", random_state=3
    ).fit(X, y, acc, "ds", key="m1")
    np.testing.assert_array_equal(reg.coef_, again.coef_)  # replayed, not re-noised
    charge = reg.privacy_charge()
    assert charge.epsilon <= 1.0 and charge.loss.form == "zcdp"
    # the budget's filter: Renyi composition at the order the budget (2, 1e-5) fixes, converted at delta / 2
    assert acc.status("ds").epsilon_spent == pytest.approx(PrivacyFilter.for_budget(2.0, 1e-5).spent([charge.loss])[0])
    assert acc.status("ds").epsilon_spent >= charge.loss.epsilon_at(1e-5)
    with pytest.raises(ParameterError, match="not private"):
        DPFrankWolfeRegressor(method="fw").fit(X, y, acc, "ds")


def test_parameters_are_validated_in_fit():
    X, y, _ = data(200, 20)
    for bad, needle in (
        ({"method": "sgd"}, "method"),
        ({"epsilon": 0}, "epsilon"),
        ({"calibration": "x"}, "calibration"),
        ({"delta": 0.0}, "delta"),
        ({"lam": -1}, "lam"),
        ({"max_iter": 0}, "max_iter"),
    ):
        est = DPFrankWolfeClassifier(**bad)  # scikit-learn style: __init__ only stores
        assert est.get_params()[next(iter(bad))] == next(iter(bad.values()))
        with pytest.raises(ParameterError, match=needle):
            est.fit(X, y)
        with pytest.raises(ParameterError, match=needle):
            est.privacy_charge()
    with pytest.raises(ParameterError, match="2 classes"):
        DPFrankWolfeClassifier(max_iter=5).fit(sp.eye(3, format="csr"), [0, 1, 2])


def test_scikit_learn_clone_pipeline_and_grid_search():
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MaxAbsScaler

    X, y, _ = data(600, 30)
    est = DPFrankWolfeClassifier(method="fast-fw", lam=5.0, max_iter=100)
    assert clone(est).get_params() == est.get_params()
    pipe = make_pipeline(MaxAbsScaler(), est).fit(X, y)
    assert pipe.score(X, y) > 0.6
    grid = GridSearchCV(est, {"lam": [1.0, 10.0], "max_iter": [50, 100]}, cv=3).fit(X, y)  # non-private search
    assert grid.best_params_["lam"] in (1.0, 10.0) and hasattr(grid.best_estimator_, "coef_")


def test_a_released_model_is_rebuilt_from_its_record(tmp_path):
    X, y, _ = data()
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 30.0, 1e-5)
    clf = DPFrankWolfeClassifier(  # a release names its public classes (read from y they would be the data's)
        epsilon=20.0, delta=1e-6, lam=20.0, max_iter=300, classes=["ham", "spam"], random_state=1
    ).fit(X, y, acc, "ds", key="m")
    (rec,) = acc.history("ds")
    again = DPFrankWolfeClassifier.from_release(json.loads(rec.result))
    assert list(again.classes_) == ["ham", "spam"] and again.path_ == clf.path_
    np.testing.assert_array_equal(again.predict(X), clf.predict(X))
    with pytest.raises(ParameterError, match="released"):
        DPFrankWolfeRegressor.from_release({"features": [1, 2]})


def test_cli_train(tmp_path, capsys):
    store, ledger, ds = synth_with_budget(capsys, tmp_path, "rcv1", 3000, 2000, 1.5e4)
    args = [
        "train",
        store,
        "--loss",
        "logistic",
        "--lam",
        "20",
        "--iters",
        "300",
        "--ledger",
        ledger,
        "--seed",
        "1",
        "--json",
    ]
    assert main(args + ["--method", "fast-dp-fw", "--epsilon", "1e4", "--delta", "1e-6", "--eval-epsilon", "20"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert {
        "method",
        "loss",
        "accuracy",
        "auc",
        "nnz_weights",
        "iterations",
        "epsilon",
        "delta",
        "eval_epsilon",
        "key",
        "ledger",
        "rows",
    } <= set(res)
    assert not {"seconds", "seconds_per_iter", "n_train", "n_test", "dataset_id"} & set(res)  # private run
    assert 0 < res["nnz_weights"] <= 300 and res["accuracy"] > 0.55
    spent = Accountant(ledger).status(ds).epsilon_spent
    assert 1e4 - 1e-6 < spent <= 1e4 + 1e-6  # --epsilon is what the command spends in all: model and metrics
    # the rest of the budget cannot pay for another 0.8: exit 3, nothing printed or charged
    out_file = tmp_path / "m.json"
    assert main(args + ["--method", "dp-fw", "--epsilon", "1e4", "--delta", "1e-6", "--out", str(out_file)]) == 3
    assert capsys.readouterr().out == "" and not out_file.exists()
    assert Accountant(ledger).status(ds).epsilon_spent == spent
    assert main(args + ["--method", "fw"]) == 2  # non-private needs --non-private
    assert main(args + ["--method", "fast-fw", "--non-private"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert not res["private"] and "epsilon" not in res and res["seconds_per_iter"] > 0


def test_a_release_key_reused_with_another_lambda_is_refused(tmp_path):
    from dpdist.exceptions import ReleaseKeyConflict

    X, _, y = data()
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 10.0, 1e-5)
    kw = dict(epsilon=1.0, delta=1e-6, max_iter=50, y_bound=1.0, bounds="clip")
    DPFrankWolfeRegressor(lam=5.0, **kw).fit(X, y, acc, "ds", key="m")
    with pytest.raises(ReleaseKeyConflict):  # same epsilon, delta and mechanism: only lambda differs
        DPFrankWolfeRegressor(lam=10.0, **kw).fit(X, y, acc, "ds", key="m")
    with pytest.raises(ReleaseKeyConflict):
        DPFrankWolfeRegressor(lam=5.0, **{**kw, "max_iter": 60}).fit(X, y, acc, "ds", key="m")
    assert acc.status("ds").releases == 1


@pytest.mark.parametrize("where", ["accountant", "caller's release"])
def test_a_released_classifier_never_takes_its_classes_from_y(tmp_path, where) -> None:
    """Read from y, the released model's classes (and a refusal of one-label data) would be functions
    of the data: in a release -- charged here, or inside one its caller charged (a flow's worker) --
    the classes must be given."""
    from dpdist.privacy.guard import charged_by_caller

    rng = np.random.default_rng(0)
    X, y = sp.random(60, 8, density=0.5, format="csr", random_state=1), rng.choice([3.0, 7.0], size=60)
    est = DPFrankWolfeClassifier(epsilon=1.0, max_iter=5)
    with pytest.raises(ParameterError, match="classes are public"):
        if where == "accountant":
            acc = Accountant(tmp_path / "l.sqlite")
            acc.init_budget("d", 10.0, 1e-6)
            est.fit(X, y, accountant=acc, dataset="d")
        else:
            with charged_by_caller():
                est.fit(X, y)
    if where == "accountant":
        assert acc.history("d") == []  # refused before anything is charged
