"""``dpdist select``: the ledger is charged before anything is printed or written; exit codes."""

from __future__ import annotations

import json

import pytest

from dpdist.cli import main
from dpdist.data.store import open_store
from dpdist.privacy.accountant import Accountant


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def fanlv(tmp_path, capsys):
    code, out, _ = run(
        capsys, "synth", "fan-lv", "--out", str(tmp_path / "f"), "--seed", "1", "--n", "400", "--d", "300", "--json"
    )
    assert code == 0
    meta = json.loads(out)
    meta["dataset_id"] = open_store(tmp_path / "f").dataset_id  # the ledger's key; never printed
    return tmp_path / "f", meta


@pytest.mark.parametrize("method", ["dp-sis", "two-stage"])
def test_select_charges_and_reports(capsys, tmp_path, fanlv, method):
    store, meta = fanlv
    ledger = str(tmp_path / "l.sqlite")
    Accountant(ledger).init_budget(meta["dataset_id"], 1e4, 0.0)
    out_file = tmp_path / "sel.json"
    code, out, _ = run(
        capsys,
        "select",
        str(store),
        "--method",
        method,
        "--k",
        "8",
        "--epsilon",
        "5000",
        "--clip",
        "--seed",
        "3",
        "--ledger",
        ledger,
        "--out",
        str(out_file),
        "--json",
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


def test_select_refused_writes_nothing(capsys, tmp_path, fanlv):
    store, meta = fanlv
    ledger = str(tmp_path / "l.sqlite")
    Accountant(ledger).init_budget(meta["dataset_id"], 1.0, 0.0)
    out_file = tmp_path / "sel.json"
    code, out, err = run(
        capsys,
        "select",
        str(store),
        "--method",
        "dp-sis",
        "--k",
        "5",
        "--epsilon",
        "2",
        "--clip",
        "--ledger",
        ledger,
        "--out",
        str(out_file),
        "--json",
    )
    assert code == 3 and out == "" and "budget refused" in err
    assert not out_file.exists() and Accountant(ledger).history(meta["dataset_id"]) == []


def test_select_bad_input_exit_2(capsys, tmp_path, fanlv):
    store, meta = fanlv
    ledger = str(tmp_path / "l.sqlite")
    code, _, err = run(
        capsys, "select", str(store), "--method", "dp-sis", "--k", "5", "--epsilon", "1", "--ledger", ledger
    )
    assert code == 2 and "budget init" in err and meta["dataset_id"] not in err  # no budget for this dataset yet
    Accountant(ledger).init_budget(meta["dataset_id"], 10.0, 0.0)
    code, _, err = run(
        capsys, "select", str(store), "--method", "dp-sis", "--k", "5", "--epsilon", "1", "--ledger", ledger
    )
    assert code == 2 and ("|y_i| <= 1" in err or "|X_ij| <= 1" in err) and "--clip" in err  # fan-lv is unbounded
    code, _, err = run(
        capsys,
        "select",
        str(store),
        "--method",
        "dp-sis",
        "--k",
        "5",
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--ledger",
        ledger,
    )
    assert code == 2 and "--delta" in err
    code, _, err = run(
        capsys, "select", str(store), "--method", "dp-sis", "--k", "5", "--epsilon", "0", "--clip", "--ledger", ledger
    )
    assert code == 2 and "epsilon" in err
    assert Accountant(ledger).history(meta["dataset_id"]) == []


def test_two_stage_with_stage2_releases_a_model_on_the_selection(capsys, tmp_path, fanlv):
    store, meta = fanlv
    ledger = str(tmp_path / "l.sqlite")
    Accountant(ledger).init_budget(meta["dataset_id"], 1e4, 0.0)
    code, out, err = run(
        capsys,
        "select",
        str(store),
        "--method",
        "two-stage",
        "--k",
        "8",
        "--epsilon",
        "100",
        "--stage2",
        "5",
        "--seed",
        "4",
        "--ledger",
        ledger,
        "--json",
    )
    assert code == 0, err
    res = json.loads(out)
    assert res["stage2"]["indices"] == res["features"] and len(res["stage2"]["values"]) == 8
    hist = Accountant(ledger).history(meta["dataset_id"])
    assert [h.key for h in hist] == [res["key"], res["key"] + "/stage2"]
    assert [h.epsilon for h in hist] == [100.0, 5.0] and res["n_blocks"] >= 1


def test_stage2_charge_is_named_and_pure_methods_refuse_a_delta(capsys, tmp_path, fanlv):
    """The text names both charges of ``--stage2`` (the selection's and the model's); a pure method given a
    positive ``--delta`` exits 2 before any charge."""
    store, meta = fanlv
    ledger = str(tmp_path / "l.sqlite")
    Accountant(ledger).init_budget(meta["dataset_id"], 1e4, 0.0)
    args = ("select", str(store), "--method", "two-stage", "--k", "8", "--epsilon", "100", "--ledger", ledger)
    code, out, err = run(capsys, *args, "--stage2", "5", "--seed", "4")
    assert code == 0, err
    assert "charged epsilon=100, delta=0 for the selection, plus epsilon=5 for its stage-2 model" in out, out
    for method in ("dp-sis", "two-stage", "bss-top-r"):
        code, _, err = run(capsys, "select", str(store), "--method", method, "--k", "3", "--epsilon", "1",
                           "--delta", "1e-6", "--ledger", ledger)  # fmt: skip
        assert code == 2 and "--delta" in err and "pure" in err, (method, err)
    assert len(Accountant(ledger).history(meta["dataset_id"])) == 2
