"""``dpdist select``: the ledger is charged before anything is printed or written; exit codes."""

from __future__ import annotations

import json

import pytest
from command import run, selecting

from dpdist.data.store import open_store
from dpdist.privacy.accountant import Accountant


@pytest.fixture()
def fanlv(tmp_path, capsys):
    code, out, _ = run(
        capsys, "synth", "fan-lv", "--out", str(tmp_path / "f"), "--seed", "1", "--n", "400", "--d", "300", "--json"
    )
    assert code == 0
    meta = json.loads(out)
    meta["dataset_id"] = open_store(tmp_path / "f").dataset_id  # the ledger's key; never printed
    return tmp_path / "f", meta


@pytest.fixture()
def ledger(tmp_path) -> str:
    return str(tmp_path / "l.sqlite")


@pytest.fixture()
def select(capsys, fanlv, ledger):
    return selecting(capsys, fanlv[0], ledger)


@pytest.mark.parametrize("method", ["dp-sis", "two-stage"])
def test_select_charges_and_reports(select, tmp_path, fanlv, ledger, method):
    store, meta = fanlv
    Accountant(ledger).init_budget(meta["dataset_id"], 1e4, 0.0)
    out_file = tmp_path / "sel.json"
    code, out, _ = select(
        method, "--k", "8", "--epsilon", "5000", "--clip", "--seed", "3", "--out", str(out_file), "--json"
    )
    assert code == 0, out
    res = json.loads(out)
    assert set(res) >= {"method", "k", "features", "epsilon", "delta", "dataset", "key", "ledger"}
    assert "seconds" not in res and meta["dataset_id"] not in out  # no timing, no content hash
    assert res["method"] == method and len(res["features"]) == 8 and res["delta"] == 0.0
    assert json.loads(out_file.read_text())["features"] == res["features"]
    if method == "dp-sis":  # with this budget DP-SIS finds most of the 8 true features
        assert len(set(res["features"]) & set(meta["true_support"])) >= 6
    hist = Accountant(ledger).history(meta["dataset_id"])
    assert [(r.epsilon, r.key) for r in hist] == [(5000.0, res["key"])]


def test_select_refused_writes_nothing(select, tmp_path, fanlv, ledger):
    store, meta = fanlv
    Accountant(ledger).init_budget(meta["dataset_id"], 1.0, 0.0)
    out_file = tmp_path / "sel.json"
    code, out, err = select("dp-sis", "--k", "5", "--epsilon", "2", "--clip", "--out", str(out_file), "--json")
    assert code == 3 and out == "" and "budget refused" in err
    assert not out_file.exists() and Accountant(ledger).history(meta["dataset_id"]) == []


def test_select_bad_input_exit_2(select, fanlv, ledger):
    store, meta = fanlv
    code, _, err = select("dp-sis", "--k", "5", "--epsilon", "1")
    assert code == 2 and "budget init" in err and meta["dataset_id"] not in err  # no budget for this dataset yet
    Accountant(ledger).init_budget(meta["dataset_id"], 10.0, 0.0)
    code, _, err = select("dp-sis", "--k", "5", "--epsilon", "1")
    assert code == 2 and ("|y_i| <= 1" in err or "|X_ij| <= 1" in err) and "--clip" in err  # fan-lv is unbounded
    code, _, err = select("dp-sis", "--k", "5", "--epsilon", "1", "--delta", "1e-6")
    assert code == 2 and "--delta" in err
    code, _, err = select("dp-sis", "--k", "5", "--epsilon", "0", "--clip")
    assert code == 2 and "epsilon" in err
    assert Accountant(ledger).history(meta["dataset_id"]) == []


def test_two_stage_with_stage2_releases_a_model_on_the_selection(select, fanlv, ledger):
    store, meta = fanlv
    Accountant(ledger).init_budget(meta["dataset_id"], 1e4, 0.0)
    code, out, err = select("two-stage", "--k", "8", "--epsilon", "100", "--stage2", "5", "--seed", "4", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["stage2"]["indices"] == res["features"] and len(res["stage2"]["values"]) == 8
    hist = Accountant(ledger).history(meta["dataset_id"])
    assert [h.key for h in hist] == [res["key"], res["key"] + "/stage2"]
    # --epsilon is what the command spends in all: the stage-2 model's 5 out of it, the selection the rest
    assert [h.epsilon for h in hist] == [95.0, 5.0] and res["n_blocks"] >= 1


def test_stage2_charge_is_named_and_pure_methods_refuse_a_delta(select, fanlv, ledger):
    """The text names both charges of ``--stage2`` (the selection's and the model's); a pure method given a
    positive ``--delta`` exits 2 before any charge."""
    store, meta = fanlv
    Accountant(ledger).init_budget(meta["dataset_id"], 1e4, 0.0)
    code, out, err = select("two-stage", "--k", "8", "--epsilon", "100", "--stage2", "5", "--seed", "4")
    assert code == 0, err
    assert "charged epsilon=95, delta=0 for the selection, plus epsilon=5 for its stage-2 model" in out, out
    for method in ("dp-sis", "two-stage", "bss-top-r"):
        code, _, err = select(method, "--k", "3", "--epsilon", "1", "--delta", "1e-6")
        assert code == 2 and "--delta" in err and "pure" in err, (method, err)
    assert len(Accountant(ledger).history(meta["dataset_id"])) == 2


@pytest.mark.parametrize("method", ["dp-sis", "two-stage"])
def test_select_epsilon_is_what_the_command_spends_in_all(select, fanlv, ledger, method):
    """``select --epsilon 1 --stage2 0.3`` fits a budget of exactly 1: the stage-2 model is charged 0.3 and the
    selection the rest (0.7; two-stage's noisy row count inside it), the split shown on stderr and in the JSON;
    the same command again (its --key) replays both releases on the spent budget and charges nothing."""
    store, meta = fanlv
    Accountant(ledger).init_budget(meta["dataset_id"], 1.0, 1e-6)
    args = (method, "--k", "8", "--epsilon", "1", "--stage2", "0.3", "--clip", "--key", "sel", "--json")
    code, out, err = select(*args)
    assert code == 0, err
    res = json.loads(out)
    assert "plan: the selection 0.7 + its stage-2 model 0.3 = epsilon 1 in all" in err
    assert res["plan"] == {
        "epsilon": 1.0,
        "delta": 0.0,
        "main": "the selection",
        "model_epsilon": 0.7,
        "model_delta": 0.0,
        "parts": [{"what": "its stage-2 model", "epsilon": 0.3}],
    }
    assert res["epsilon"] == 1.0 and res["delta"] == 0.0 and res["stage2"]["epsilon"] == 0.3
    hist = Accountant(ledger).history(meta["dataset_id"])
    assert [(h.key, h.epsilon) for h in hist] == [("sel", 0.7), ("sel/stage2", 0.3)]
    assert sum(h.epsilon for h in hist) <= 1.0  # basic composition: the epsilons added
    code, out, err = select(*args)  # a replay on the spent budget: not refused, nothing charged
    assert code == 0, err
    again = json.loads(out)
    assert again["replayed"] and again["features"] == res["features"] and again["stage2"] == res["stage2"]
    assert Accountant(ledger).history(meta["dataset_id"]) == hist


def test_a_stage2_that_is_not_a_part_of_epsilon_is_refused_before_anything_is_read(capsys, tmp_path, fanlv, ledger):
    store, meta = fanlv
    Accountant(ledger).init_budget(meta["dataset_id"], 10.0, 0.0)
    for stage2, where in [("1", str(store)), ("2", str(store)), ("1", str(tmp_path / "no-such-store"))]:
        code, out, err = run(capsys, "select", where, "--method", "two-stage", "--k", "8", "--epsilon", "1",
                             "--stage2", stage2, "--ledger", ledger, "--json")  # fmt: skip
        assert code == 2 and out == "" and "--stage2" in err and "smaller than --epsilon 1" in err, err
    assert Accountant(ledger).history(meta["dataset_id"]) == []


def test_a_budget_that_cannot_pay_the_stage2_model_charges_nothing(select, tmp_path, fanlv, ledger, monkeypatch):
    """The selection (0.9) fits the budget of 1, the whole command (1.5) does not: refused exit 3 before the data is
    read, the selection not charged either."""
    from dpdist.data.store.reader import SparseStore

    store, meta = fanlv
    Accountant(ledger).init_budget(meta["dataset_id"], 1.0, 0.0)

    def boom(*a, **k):
        raise AssertionError("the data was read before the plan was checked")

    monkeypatch.setattr(SparseStore, "csr", boom)
    out_file = tmp_path / "sel.json"
    code, out, err = select(
        "two-stage", "--k", "8", "--epsilon", "1.5", "--stage2", "0.6", "--out", str(out_file), "--json"
    )
    assert code == 3 and out == "" and "budget refused" in err, err
    assert "plan: the selection 0.9 + its stage-2 model 0.6 = epsilon 1.5 in all" in err
    assert Accountant(ledger).history(meta["dataset_id"]) == [] and not out_file.exists()
