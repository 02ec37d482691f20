"""Screening as an option of the FW estimators: charge = what fit charges, bad input, CLI, run configs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from command import synth_with_budget

from dpdist.cli import main
from dpdist.data.synthetic import make_synthetic
from dpdist.exceptions import ParameterError
from dpdist.flows.config import ConfigError, load_config
from dpdist.flows.plan import train_model, train_params
from dpdist.linear_model import DPFrankWolfeClassifier, DPFrankWolfeRegressor
from dpdist.methods import get
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import PrivacyLoss
from dpdist.solvers.frank_wolfe import privacy_plan
from dpdist.solvers.screening import screening_plan

COMMON = dict(
    epsilon=2.0,
    delta=1e-6,
    lam=5.0,
    max_iter=200,
    y_bound=8.0,
    screen_epsilon=0.5,
    screen_delta=1e-6,
    n_max=2000,
    screen_schedule=10,
)


@pytest.fixture(scope="module")
def raj():
    return make_synthetic("raj", random_state=1, n=800, d=80).materialize()


@pytest.mark.parametrize("screening", ["rnm", "adp"])
@pytest.mark.parametrize("method", ["fast-dp-fw", "dp-fw"])
def test_fit_charges_exactly_privacy_charge(tmp_path, raj, screening, method):
    X, y = raj
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 10.0, 1e-5)
    reg = DPFrankWolfeRegressor(method=method, screening=screening, random_state=3, **COMMON)
    reg.fit(X, y, acc, "ds", key="m")
    (rec,) = acc.history("ds")
    charge = reg.privacy_charge()
    assert rec.privacy_loss == charge.loss and rec.mechanism == f"frank_wolfe/{method}+{screening}-screen"
    fw = privacy_plan(2.0, 1e-6, 200, "squared", 5.0, 8.0, "laplace" if method == "dp-fw" else "exponential")
    sc = screening_plan(
        screening, "squared", 5.0, 80, 200, 10, 0.5, 1e-6, y_bound=8.0, n_max=2000, standalone_delta=1e-6
    )
    assert charge.loss == PrivacyLoss.compose(fw.loss, sc.loss)
    assert charge.epsilon <= 2.5 and charge.details["screen_passes"] == 20
    assert all(t % 10 == 0 for t, _ in reg.screened_)
    again = DPFrankWolfeRegressor(method=method, screening=screening, random_state=4, **COMMON).fit(
        X, y, acc, "ds", key="m"
    )
    np.testing.assert_array_equal(again.coef_, reg.coef_)  # replayed with its screening record
    assert again.screened_ == reg.screened_


def test_rho_form_and_paper_mode(raj):
    X, y = raj
    kw = {**COMMON, "screen_epsilon": None, "screen_delta": None, "screen_rho": 0.05}
    reg = DPFrankWolfeRegressor(screening="rnm", **kw)
    assert (
        reg.privacy_charge(n_features=80).loss.parts[-2:]
        == screening_plan(
            "rnm", "squared", 5.0, 80, 200, 10, rho=0.05, y_bound=8.0, n_max=2000, standalone_delta=1e-6
        ).loss.parts
    )
    paper = DPFrankWolfeRegressor(screening="adp", calibration="paper", screen_rule="seed", **COMMON)
    charge = paper.privacy_charge(n_features=80)
    assert charge.details["screen_claimed_epsilon"] == 0.5 and charge.details["calibration"] == "paper"
    # the seeds' FW noise takes squared loss as 1-Lipschitz: charged with the true L = lam + y_bound
    fw = privacy_plan(2.0, 1e-6, 200, "squared", 5.0, 8.0, "exponential", "paper", lipschitz_noise=1.0)
    assert fw.lipschitz == 1.0 and fw.loss.rho == pytest.approx(200 * (fw.eps0 * 13.0) ** 2 / 8)
    assert charge.epsilon > 2.5  # the true loss, above the claimed eps1 + eps2
    res = paper.fit(X, y)
    assert res.screened_ is not None


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"screen_epsilon": -1.0}, "screen_epsilon"),
        ({"screen_delta": 1.5}, "screen_delta"),
        ({"screen_delta": None}, "screen_delta"),
        ({"screen_schedule": 0}, "screen_schedule"),
        ({"screen_schedule": [5, 500]}, "screen_schedule"),
        ({"screen_schedule": "often"}, "screen_schedule"),
        ({"n_max": None}, "n_max"),
        ({"n_max": 0}, "n_max"),
        ({"screen_rho": 0.1}, "screen_rho"),
        ({"screen_rule": "raj"}, "screen_rule"),
        ({"screening": "rnm", "method": "fw"}, "screening"),
        ({"screening": "exact"}, "screening"),
    ],
)
def test_bad_screening_parameters_name_themselves(raj, kw, needle):
    est = DPFrankWolfeRegressor(**{**COMMON, "screening": "rnm", **kw})  # scikit-learn style: validated in fit
    with pytest.raises(ParameterError, match=needle):
        est.fit(*raj)
    if est.method != "fw":
        with pytest.raises(ParameterError, match=needle):
            est.privacy_charge(n_features=80)


def test_unbounded_data_is_refused_unless_clipped(raj):
    X, y = raj
    with pytest.raises(ParameterError, match=r"\|y_i\| <= 1"):
        DPFrankWolfeRegressor(screening="rnm", **{**COMMON, "y_bound": 1.0}).fit(X, y)
    with pytest.raises(ParameterError, match=r"\|X_ij\|"):
        DPFrankWolfeRegressor(screening="adp", **COMMON).fit(X * 3, y)
    DPFrankWolfeRegressor(screening="adp", bounds="clip", **COMMON).fit(X * 3, y)
    clf = DPFrankWolfeClassifier(screening="rnm", **{k: v for k, v in COMMON.items() if k != "y_bound"})
    clf.fit(X, y > 0)
    assert clf.privacy_charge().loss.epsilon <= 2.5


def test_exact_screening_for_non_private_methods(raj):
    X, y = raj
    reg = DPFrankWolfeRegressor(
        method="fast-fw", screening="exact", screen_rule="seed", lam=5.0, max_iter=300, y_bound=8.0
    ).fit(X, y)
    assert reg.screened_ and np.count_nonzero(reg.coef_) <= 300


def test_cli_rnm_and_adp_screen(tmp_path, capsys, monkeypatch):
    store, ledger, ds = synth_with_budget(capsys, tmp_path, "raj", 1500, 100, 6.0)
    base = [
        "train",
        store,
        "--loss",
        "squared",
        "--lam",
        "5",
        "--iters",
        "100",
        "--ledger",
        ledger,
        "--y-bound",
        "9",
        "--seed",
        "1",
        "--json",
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
    ]
    # the screening's delta inside the command's --delta (its quarter covers the model's and its parts')
    scr = ["--screen-epsilon", "0.5", "--screen-delta", "1e-7", "--n-max", "2000"]
    assert main(base + ["--method", "rnm-screen", "--screen-every", "5"] + scr) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["method"] == "rnm-screen" and res["screen_schedule"] == 5 and 0 <= res["density"] <= 1
    assert res["true_epsilon"] < 1.5 and "mse" in res and "seconds" not in res
    (rec, _) = Accountant(ledger).history(ds)
    assert rec.mechanism == "frank_wolfe/fast-dp-fw+rnm-screen" and rec.epsilon == res["true_epsilon"]
    assert main(base + ["--method", "adp-screen", "--screen-at", "50,100"] + scr) == 0
    assert json.loads(capsys.readouterr().out)["screen_schedule"] == [50, 100]
    # bad input: exit 2 naming the option, nothing charged
    spent = Accountant(ledger).status(ds).epsilon_spent
    for bad, needle in [
        (["--screen-every", "0"], "screen_schedule"),
        (["--screen-at", "a,b"], "screen-at"),
        (["--screen-at", "1", "--screen-every", "2"], "not both"),
    ]:
        assert main(base + ["--method", "rnm-screen"] + scr + bad) == 2
        assert needle in capsys.readouterr().err
    assert main(base + ["--method", "rnm-screen", "--screen-epsilon", "0.5", "--screen-delta", "1e-7"]) == 2
    assert "n_max" in capsys.readouterr().err
    assert main(base + ["--method", "fast-dp-fw", "--n-max", "10"]) == 2
    assert main(base + ["--method", "rnm-screen", "--y-bound", "1"] + scr) == 2  # |y| > 1: refused, not clipped
    assert Accountant(ledger).status(ds).epsilon_spent == spent

    # a refused budget: exit 3 before the solver runs
    def boom(*a, **k):
        raise AssertionError("the solver ran before the budget check")

    monkeypatch.setattr("dpdist.linear_model.fast_frank_wolfe", boom)
    assert main(base[:-4] + ["--epsilon", "20", "--delta", "1e-6", "--method", "rnm-screen"] + scr) == 3
    assert Accountant(ledger).status(ds).epsilon_spent == spent


def test_cli_screen_rho_and_paper_calibration_stay_within_the_commands_epsilon(tmp_path, capsys, monkeypatch):
    """``--screen-rho`` is a part of the command's ``--epsilon`` (converted at an eighth of ``--delta``, the model at
    the other eighth), not on top of it; ``--calibration paper`` is checked by the true epsilon it is charged,
    refused (exit 3, nothing charged, before the solver) when that exceeds ``--epsilon``."""
    store, ledger, ds = synth_with_budget(capsys, tmp_path, "raj", 600, 100, 1e4)
    base = ["train", store, "--loss", "squared", "--lam", "5", "--iters", "60", "--y-bound", "9",
            "--ledger", ledger, "--json", "--epsilon", "1", "--delta", "1e-6", "--n-max", "2000"]  # fmt: skip
    assert main([*base, "--method", "adp-screen", "--screen-rho", "0.01", "--screen-every", "5"]) == 0
    out, err = capsys.readouterr()
    res = json.loads(out)
    (screening,) = [p for p in res["plan"]["parts"] if "screening" in p["what"]]
    rho_epsilon = PrivacyLoss.zcdp(0.01, 1e-6 / 8).epsilon
    assert screening["epsilon"] == pytest.approx(rho_epsilon) and f"its screening (rho 0.01) {rho_epsilon:.4g}" in err
    assert res["plan"]["model_delta"] == pytest.approx(1e-6 / 8)
    assert sum(h.epsilon for h in Accountant(ledger).history(ds)) <= 1.0  # model + screening + held-out metrics
    spent = Accountant(ledger).status(ds).epsilon_spent

    def boom(*a, **k):
        raise AssertionError("the solver ran before the plan's check")

    monkeypatch.setattr("dpdist.linear_model.fast_frank_wolfe", boom)
    paper = ["--method", "rnm-screen", "--calibration", "paper", "--screen-rule", "seed"]
    code = main([*base, *paper, "--screen-epsilon", "0.2", "--screen-delta", "1e-8", "--screen-every", "5"])
    err = capsys.readouterr().err
    assert code == 3 and "--calibration paper is charged its true epsilon" in err
    assert "above what it spends in all" in err
    assert Accountant(ledger).status(ds).epsilon_spent == spent  # the budget of 1e4 could pay it: nothing charged


def test_run_config_and_pipeline_estimator(tmp_path: Path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[train]\nmethods = ["rnm-screen", "adp-screen"]\nscreen_epsilon = 0.5\nscreen_delta = 1e-7\n'
        "n_max = 200000\nscreen_schedule = 50\n"
    )
    cfg = load_config(path)
    assert cfg.train.screening()["screen_schedule"] == 50
    est = train_model(cfg, "regression", "rnm-screen", 1.0, None)
    assert est.method == "fast-dp-fw" and est.screening == "rnm" and est.n_max == 200000
    assert train_model(cfg, "binary", "adp-screen", 1.0, None).screening == "adp"
    good = {"screen_epsilon": "0.5", "screen_delta": "1e-7", "n_max": "10"}
    for change, key in [
        ({"n_max": "0"}, "train.n_max"),
        ({"screen_rule": '"raj"'}, "train.screen_rule"),
        ({"screen_schedule": "0"}, "train.screen_schedule"),
        ({"screen_schedule": "[1, 99999]"}, "train.screen_schedule"),
        ({"screen_delta": "2.0"}, "train.screen_delta"),
        ({"screen_rho": "0.1"}, "train.screen_rho"),
    ]:
        lines = "".join(f"{k} = {v}\n" for k, v in {**good, **change}.items())
        path.write_text(f'[train]\nmethods = ["rnm-screen"]\n{lines}')
        with pytest.raises(ConfigError, match=key):
            load_config(path)
    path.write_text('[train]\nmethods = ["adp-screen"]\nscreen_epsilon = 0.5\nscreen_delta = 1e-7\n')
    with pytest.raises(ConfigError, match="train.n_max"):
        load_config(path)


@pytest.mark.parametrize("calibration, rule", [("safe", "safe"), ("paper", "seed")])
def test_run_plan_lists_the_screening_charges_the_fits_make(tmp_path: Path, raj, calibration, rule):
    """dpdist.flows.plan (``dpdist run --plan``): each screened model's entry is what its fit charges the ledger
    (paper mode's true loss depends on the number of features: the plan takes the data's)."""
    from dpdist.flows.plan import plan

    path = tmp_path / "c.toml"
    path.write_text(
        '[data]\nsource = "synth"\nname = "raj"\nn = 800\nd = 80\n[budget]\nepsilon = 50.0\ndelta = 1e-5\n'
        f'[train]\nmethods = ["rnm-screen", "adp-screen"]\nepsilon = [2.0]\ndelta = 1e-6\nlam = 5.0\n'
        f'iters = 200\ncalibration = "{calibration}"\nscreen_rule = "{rule}"\nscreen_epsilon = 0.5\n'
        "screen_delta = 1e-6\nn_max = 2000\nscreen_schedule = 10\n[select]\nmethods = []\n"
    )
    cfg = load_config(path)
    planned = {p.method: p.charge for p in plan(cfg, "binary") if p.step == "train"}
    X, y = raj
    acc = Accountant(tmp_path / "l.sqlite")
    # paper mode's true loss is large (the seeds' RNM test leaks d-fold): its huge pure steps, in one release
    # with the fit's zCDP steps, count by their rho (epsilon^2 / 2 each) in the ledger's filter
    acc.init_budget("ds", 1e5, 1e-5)
    for method in ("rnm-screen", "adp-screen"):
        est = get(method).build("binary", **train_params(cfg, "binary", method, 2.0, None, 0))
        est.fit(X, np.where(y > 0, 1.0, -1.0), acc, "ds", key=method)  # the public classes -1, +1
        (rec,) = [h for h in acc.history("ds") if h.key == method]
        assert planned[f"{method} eps=2"].loss == rec.privacy_loss
        assert planned[f"{method} eps=2"].mechanism == rec.mechanism
