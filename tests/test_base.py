"""The release skeleton (dpdist.base): declared parameters, the plan of charges, and a release on no rows."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from dpdist.base import PLANNED_RECORDS, PrivateEstimator
from dpdist.exceptions import ParameterError, ReleaseRefused
from dpdist.methods import REGISTRY, get
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.guard import charged_by_caller
from dpdist.privacy.loss import Charge, PrivacyLoss

WIDTH = 150  # wider than the default grid's select-train k (100)


def _params(name: str, task: str) -> dict:
    """Small public parameters of each registered method (a support, a count, a screening budget)."""
    entry = get(name)
    learner = entry.kind in ("learner", "screening")
    params: dict = {"classes": [-1.0, 1.0]} if task == "binary" and learner else {}
    if entry.counted:
        params["n_records"] = 50
    if entry.kind == "screening":
        params.update(screen_epsilon=0.5, screen_delta=1e-6, n_max=100)
    if entry.sparsity:
        params[entry.sparsity] = 3
    params.update({"dp-sis": {"k": 3}, "two-stage": {"k": 3}}.get(name, {}))
    if entry.kind == "best-subset":
        params["s"] = 2
    return params


PRIVATE = [(n, t) for n, m in REGISTRY.items() if m.private and not m.on_selection for t in m.tasks]


@pytest.mark.parametrize("name, task", PRIVATE)
def test_a_release_on_no_rows_is_the_mechanisms_output(tmp_path, name, task):
    """The keyed split's training half of a small set is empty with a probability that depends on the data:
    a release on it is the mechanism's output on no rows (its noise), recorded as any other -- or, for the
    mistakes method, its propose-test-release refusal: a charged output of that mechanism -- never a
    failure of the release."""
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 1e6, 1e-3)
    est = get(name).build(task, **_params(name, task))
    X, y = sp.csr_matrix((0, WIDTH)), np.zeros(0)
    if name == "bss-mistakes":
        with pytest.raises(ReleaseRefused):
            est.fit(X, y, acc, "ds", key="k")
        assert [r.key for r in acc.history("ds")] == ["k"]  # charged, its outcome recorded
        return
    est.fit(X, y, acc, "ds", key="k")
    (rec,) = [r for r in acc.history("ds") if r.key == "k"]
    # released, not a failure (a model's weights read back from their artefact)
    assert json.loads(json.dumps(acc.result(rec))) == json.loads(json.dumps(est.release_record_))
    assert est.release_ == {"key": "k", "epsilon": rec.epsilon, "delta": rec.delta}


def test_a_model_on_a_released_selection_takes_no_rows_inside_a_charged_release():
    est = get("objective-perturbation").build("binary", epsilon=1.0, classes=[-1.0, 1.0])
    with charged_by_caller():  # the flow's worker, inside the central release
        est.fit(np.zeros((0, 3)), np.zeros(0))
    assert est.coef_.shape == (1, 3) and np.all(np.isfinite(est.coef_))


def test_the_flows_fit_on_an_empty_train_half_releases(tmp_path):
    """dpdist.pipelines.train.fit_store (the flow's fit, inside its central release) on a store with no rows."""
    from dpdist.data.store import write_store
    from dpdist.pipelines.train import STORE_CLASSES, FitJob, fit_store

    write_store(tmp_path / "s", sp.csr_matrix((0, 30)), np.zeros(0), task="binary", labels=[-1.0, 1.0])
    base = {"epsilon": 1.0, "delta": 1e-6, "classes": STORE_CLASSES, "random_state": 1}
    fw = fit_store(FitJob(str(tmp_path / "s"), "fast-dp-fw", {**base, "lam": 5.0, "max_iter": 20}))
    sgd = fit_store(FitJob(str(tmp_path / "s"), "dp-sgd", {**base, "n_records": 40}))
    assert len(fw["path"]) == 20 and fw["n_features"] == 30 and sgd["n_features"] == 30


@pytest.mark.parametrize("name, task", [("dp-sgd", "binary"), ("fast-dp-fw", "regression"), ("dp-sis", "binary")])
def test_an_experiment_refuses_no_rows_as_scikit_learn_does(name, task):
    """Outside a release (``dpdist.unaccounted()``: the tests' fits) an empty X is refused, as scikit-learn's
    estimator checks ask (tests/test_estimator_checks.py)."""
    est = get(name).build(task, **_params(name, task))
    with pytest.raises(ValueError, match="0 sample"):
        est.fit(sp.csr_matrix((0, WIDTH)), np.zeros(0))


def test_the_search_refuses_a_grid_too_wide_for_the_data_before_any_charge(tmp_path):
    """The default grid's select-train screens k = 100 columns: on 20 columns that is refused, a public
    fact, before the count or the search is charged (it was charged, then failed in the release)."""
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 10.0, 1e-6)
    X, y = sp.random(60, 20, density=0.3, format="csr", random_state=0), np.tile([-1.0, 1.0], 30)
    with pytest.raises(ParameterError, match="k=100 must be smaller"):
        get("private-search").build("binary", classes=[-1.0, 1.0]).fit(X, y, acc, "ds", key="s")
    assert acc.history("ds") == []


def _estimator_classes() -> list[type]:
    classes = {m.estimator_class(t) for m in REGISTRY.values() for t in m.tasks}
    from dpdist.selection.two_stage import TwoStageRegression

    return sorted(classes | {TwoStageRegression}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", _estimator_classes(), ids=lambda c: c.__name__)
def test_every_parameter_is_declared_and_init_is_keyword_only(cls):
    """Each estimator declares the constraints of exactly the parameters its ``__init__`` takes (as
    scikit-learn's estimators do), and takes them by keyword only."""
    import inspect

    assert issubclass(cls, PrivateEstimator)
    assert set(cls.declared_constraints()) == set(cls._get_param_names())
    kinds = {p.kind for name, p in inspect.signature(cls.__init__).parameters.items() if name != "self"}
    assert kinds == {inspect.Parameter.KEYWORD_ONLY}


@pytest.mark.parametrize(
    "name, bad, message",
    [
        ("dp-sgd", {"epsilon": -1.0}, "epsilon must be finite and > 0"),
        ("dp-sgd", {"row_norm": "l3"}, r"row_norm must be one of \('l2', 'max', None\)"),
        ("select-train", {"selection_share": 1.5}, r"selection_share must lie in \(0, 1\)"),
        ("fast-dp-fw", {"method": "fw2"}, "method must be one of"),
        ("private-search", {"validation_fraction": 0.7}, r"validation_fraction must lie in \(0, 0.5\)"),
        ("dp-sis", {"bounds": "cut"}, "bounds must be one of"),
        ("bss-top-r", {"tol": 0.5}, r"tol must lie in \[1e-6, 0.05\]"),
    ],
)
def test_a_bad_parameter_is_named_before_anything_is_read(name, bad, message):
    est = get(name).build("binary", **bad)
    with pytest.raises(ParameterError, match=message):
        est.check_params()


def test_the_plan_of_charges_is_the_fits_own():
    """A counted estimator with no public count plans its count's release then its model's, the model's at
    the planned count until the count is released; with a count, the model's at that count."""
    est = get("dp-sgd").build("binary", epsilon=1.0)
    count, model = est.charges()
    assert count.mechanism == "count/laplace" and model == est.privacy_charge(PLANNED_RECORDS)
    (only,) = get("dp-sgd").build("binary", epsilon=1.0, n_records=5000).charges()
    assert only == est.privacy_charge(5000)
    assert get("fast-dp-fw").build("binary").charges(n_features=40) == [
        get("fast-dp-fw").build("binary").privacy_charge(n_features=40)
    ]


@pytest.mark.parametrize("name", ["dp-sgd", "auto"])
def test_a_count_and_its_model_are_charged_as_one_plan_or_not_at_all(tmp_path, name):
    """Issue 56: a counted learner whose model the budget cannot take charged its count first (lost), then was
    refused; the plan (count + model) is now checked whole before the count is released."""
    from dpdist.exceptions import BudgetExceeded

    rng = np.random.default_rng(0)
    X = sp.random(300, 6, density=0.5, format="csr", random_state=2)
    y = np.where(rng.random(300) < 0.5, 1, -1)
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("b" * 64, 1.0, 1e-6, name="b")
    est = get(name).build("binary", epsilon=0.99, delta=1e-6, classes=[-1, 1])
    with pytest.raises(BudgetExceeded, match="nothing was charged"):
        est.fit(X, y, acc, "b" * 64, "k")
    assert acc.history("b" * 64) == []  # not the count alone


@pytest.mark.parametrize("name", ["dp-sgd", "auto"])
def test_no_release_can_take_the_budget_between_a_count_and_its_model(tmp_path, monkeypatch, name):
    """Issue 56: the count and its model were checked as one plan but charged in two transactions, so a
    release charged between them (another process on the same ledger) left the count charged and the model
    refused. Here a competing release starts while the count is being drawn: it must wait for the count's
    transaction, which charges the model too, and then be refused. On the old code the competitor was charged
    first and the fit refused."""
    import threading

    import dpdist.base
    import dpdist.gradient_models.auto
    from dpdist.exceptions import BudgetExceeded

    rng = np.random.default_rng(0)
    X = sp.random(300, 6, density=0.5, format="csr", random_state=2)
    y = np.where(rng.random(300) < 0.5, 1, -1)
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("b" * 64, 1.0, 1e-6, name="b")
    outcome: list[str] = []

    def compete() -> None:
        try:
            Accountant(tmp_path / "l.sqlite").charge("b" * 64, Charge(PrivacyLoss.laplace(0.9), "other"), "other")
            outcome.append("charged")
        except BudgetExceeded:
            outcome.append("refused")

    competitor = threading.Thread(target=compete)

    def draw_while_competing(draw):
        def drawn(*args):
            competitor.start()
            competitor.join(timeout=1.0)  # on the old code the competitor is charged here
            return draw(*args)

        return drawn

    for module, draw in [(dpdist.base, "noisy_count"), (dpdist.gradient_models.auto, "noisy_class_counts")]:
        monkeypatch.setattr(module, draw, draw_while_competing(getattr(module, draw)))
    est = get(name).build("binary", epsilon=0.5, delta=1e-7, classes=[-1, 1])
    est.fit(X, y, acc, "b" * 64, "k")
    competitor.join()
    assert outcome == ["refused"]
    assert [r.key for r in acc.history("b" * 64)] == ["k/count", "k"]
