"""``dpdist select --method bss-top-r|bss-mistakes``: charged releases, bad input exit 2, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from command import run, selecting

from dpdist.privacy.accountant import Accountant
from dpdist.selection.best_subset import oa as oa_module
from dpdist.selection.best_subset import top_r as top_r_module
from dpdist.selection.best_subset.oa import MasterResult


@pytest.fixture(scope="module")
def bss_store(tmp_path_factory):
    from dpdist.data.store import open_store
    from dpdist.data.synthetic import write_synthetic

    path = tmp_path_factory.mktemp("bss") / "store"
    meta = dict(write_synthetic("bss", path, seed=1, n=4000, d=30, s=3))
    meta["dataset_id"] = open_store(path).budget_id  # the ledger's key; never printed
    return path, meta


@pytest.fixture()
def ledger(tmp_path, bss_store):
    path = str(tmp_path / "l.sqlite")
    Accountant(path).init_budget(bss_store[1]["dataset_id"], 10.0, 1e-5)
    return path


@pytest.fixture()
def select(capsys, bss_store, ledger):
    return selecting(capsys, bss_store[0], ledger)


@pytest.mark.parametrize("method, extra", [("bss-top-r", []), ("bss-mistakes", ["--delta", "1e-6"])])
def test_bss_select_releases_and_charges(select, tmp_path, bss_store, ledger, method, extra):
    store, meta = bss_store
    out_file = tmp_path / "sel.json"
    code, out, err = select(method, "--k", "3", "--epsilon", "4", *extra, "--clip", "--out", str(out_file), "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["features"] == meta["true_support"] == [1, 3, 5]
    assert "seconds" not in res and f"{method}: " in err  # solver time: terminal only
    assert meta["dataset_id"] not in out
    assert json.loads(out_file.read_text())["features"] == res["features"]
    (rel,) = Accountant(ledger).history(meta["dataset_id"])
    # --delta is what the command spends in all: the propose-test-release runs at its quarter
    assert rel.epsilon == 4.0 and rel.delta == (2.5e-7 if extra else 0.0) and rel.key == res["key"]
    assert res["delta"] == (1e-6 if extra else 0.0) and res["plan"]["model_delta"] == rel.delta


@pytest.mark.parametrize(
    "args, message",
    [
        (["--k", "30"], "s must be smaller"),
        (["--r", "0"], "r must"),
        (["--r", "-1"], "r must"),
        (["--x-bound", "0"], "x_bound"),
        (["--y-bound", "-0.5"], "y_bound"),
        (["--ridge", "0"], "ridge"),
        (["--tol", "0.5"], "tol"),
        (["--nonprivate-time-limit", "0"], "nonprivate_time_limit"),
        (["--time-limit", "5"], "--nonprivate-time-limit"),
        (["--delta", "1e-6"], "--delta"),  # top-r is pure: no delta to spend
        (["--loss", "hinge"], "needs a binary target"),  # a regression store has no class labels
    ],
)
def test_bss_bad_input_exit_2(select, bss_store, ledger, args, message):
    store, meta = bss_store
    base = {"--k": "3", "--epsilon": "1"}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    flat = [x for kv in base.items() for x in kv]
    code, out, err = select("bss-top-r", *flat, "--clip")
    assert code == 2 and message in err and out == ""
    assert Accountant(ledger).history(meta["dataset_id"]) == []


def test_bss_violated_bounds_and_missing_delta_exit_2(select, tmp_path, bss_store, ledger):
    store, meta = bss_store
    code, _, err = select("bss-top-r", "--k", "3", "--epsilon", "1")
    assert code == 2 and "x_bound" in err and "--clip" in err
    assert Accountant(ledger).history(meta["dataset_id"]) == []
    pure = str(tmp_path / "pure.sqlite")  # a budget of delta 0: no default --delta (a share of it) to run at
    Accountant(pure).init_budget(meta["dataset_id"], 10.0, 0.0)
    code, _, err = select("bss-mistakes", "--k", "3", "--epsilon", "1", "--clip", ledger=pure)
    assert code == 2 and "--delta" in err
    assert Accountant(pure).history(meta["dataset_id"]) == []


def test_bss_nonprivate_time_limit_abort_keeps_the_charge_and_is_marked(capsys, select, bss_store, ledger, monkeypatch):
    store, meta = bss_store

    def out_of_time(*a, **k):
        return MasterResult("timelimit", None, None, -np.inf, 1.0, 0, 0)

    monkeypatch.setattr(oa_module, "solve_master", out_of_time)
    monkeypatch.setattr(top_r_module, "solve_master", out_of_time)
    code, out, err = select(
        "bss-top-r", "--k", "3", "--epsilon", "1", "--nonprivate-time-limit", "5", "--clip", "--json"
    )
    assert code == 1 and out == ""
    assert "stopped before its certificate" in err and "charge stands" in err and "5 s" not in err
    (rel,) = Accountant(ledger).history(meta["dataset_id"])
    assert rel.epsilon == 1.0 and rel.covered is False
    code, out, _ = run(capsys, "budget", "history", "--dataset", str(store), "--ledger", ledger)
    assert code == 0 and "NOT COVERED" in out


def test_bss_mistakes_with_stage2_spends_epsilon_and_delta_in_all(capsys, tmp_path, bss_store):
    """On a budget of exactly (4, 1e-6), ``--epsilon 4 --delta 1e-6 --stage2 1``: the selection (3, at a quarter
    of the command's delta: the filter's basic share) and the stage-2 model (1, pure) -- the budget's filter
    admits both; without ``--delta`` the command takes a tenth of the budget's."""
    store, meta = bss_store
    ledger = str(tmp_path / "l.sqlite")
    Accountant(ledger).init_budget(meta["dataset_id"], 4.0, 1e-6)
    args = ("select", str(store), "--method", "bss-mistakes", "--k", "3", "--epsilon", "4", "--stage2", "1",
            "--clip", "--ledger", ledger, "--json")  # fmt: skip
    code, out, err = run(capsys, *args, "--delta", "1e-6")
    assert code == 0, err
    res = json.loads(out)
    assert "plan: the selection 3 + its stage-2 model 1 = epsilon 4 in all; the selection's delta 2.5e-07" in err
    hist = Accountant(ledger).history(meta["dataset_id"])
    assert [(h.epsilon, h.delta) for h in hist] == [(3.0, 2.5e-7), (1.0, 0.0)]
    assert res["stage2"]["indices"] == res["features"] == meta["true_support"]
    code, _, err = run(capsys, *args, "--fresh")  # the budget is spent: refused, nothing charged
    assert code == 3 and "the selection's delta 2.5e-08 (of the command's 1e-07)" in err  # default --delta
    assert Accountant(ledger).history(meta["dataset_id"]) == hist
