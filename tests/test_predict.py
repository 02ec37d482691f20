"""``dpdist predict``: a released model's predictions on new rows, read as its training rows were."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from customer_table import rows, schema

from dpdist.cli import main
from dpdist.data.store import open_store
from dpdist.data.table_schema import schema_from_dict
from dpdist.released import table_schema


@pytest.fixture(scope="module")
def customers(tmp_path_factory):
    """A small customer table, its schema, its store and a model record as `train --out` writes it."""
    tmp = tmp_path_factory.mktemp("customers")
    (tmp / "t.csv").write_text("\n".join(rows(300, seed=5)) + "\n")
    (tmp / "new.csv").write_text("\n".join(rows(12, seed=6, labelled=False, first_id=7000)) + "\n")
    (tmp / "schema.json").write_text(json.dumps(schema()))
    assert main(["ingest", str(tmp / "t.csv"), "--schema", str(tmp / "schema.json"), "--out", str(tmp / "s")]) == 0
    store = open_store(tmp / "s")
    rng = np.random.default_rng(0)
    d = store.shape[1]
    result = {
        "indices": list(range(0, d, 2)),
        "values": rng.normal(size=len(range(0, d, 2))).tolist(),
        "intercept": -0.3,
        "n_features": d,
        "classes": ["no", "yes"],
        "schema": table_schema(store.meta),
    }
    (tmp / "model.json").write_text(json.dumps({"key": "k", "result": result}))
    return tmp, store, result


def _read(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _margins(result, X):
    w = np.zeros(result["n_features"])
    w[result["indices"]] = result["values"]
    return X @ w + result["intercept"]


def test_table_rows_named_by_their_key_in_the_users_labels(customers, tmp_path):
    tmp, _, result = customers
    ledger = tmp_path / "no-ledger.sqlite"
    out = tmp_path / "preds.csv"
    assert (
        main(["predict", str(tmp / "model.json"), str(tmp / "new.csv"), "--out", str(out), "--ledger", str(ledger)])
        == 0
    )
    assert not ledger.exists()  # post-processing: no budget, no ledger
    lines = _read(out)
    assert lines[0] == ["customer_id", "prediction", "probability_yes"]
    X, _, keys = schema_from_dict(result["schema"]["table_schema"]).read(tmp / "new.csv", target=False)
    p = 1 / (1 + np.exp(-_margins(result, X)))
    assert [r[0] for r in lines[1:]] == list(keys) and len(lines) == 13
    assert [r[1] for r in lines[1:]] == ["yes" if q > 0.5 else "no" for q in p]
    np.testing.assert_allclose([float(r[2]) for r in lines[1:]], p, rtol=1e-5)


def test_store_scored_in_row_blocks_as_in_one(customers, tmp_path):
    tmp, store, result = customers
    out = tmp_path / "p.csv"
    assert main(["predict", str(tmp / "model.json"), str(tmp / "s"), "--out", str(out), "--block-rows", "7"]) == 0
    lines = _read(out)
    assert lines[0][0] == "row" and [int(r[0]) for r in lines[1:]] == list(range(1, 301))
    p = 1 / (1 + np.exp(-_margins(result, store.csr().toarray())))
    np.testing.assert_allclose([float(r[2]) for r in lines[1:]], p, rtol=1e-5)


def test_svmlight_rows_and_a_regression_in_raw_units(customers, tmp_path, capsys):
    tmp, _, _ = customers
    spec = schema()
    spec["fields"][-1] = {"name": "spend_next", "type": "number", "constraints": {"minimum": 0, "maximum": 400}}
    result = {
        "indices": [0, 2],
        "values": [0.5, -0.25],
        "intercept": 0.1,
        "n_features": 3,
        "schema": {"table_schema": spec},
    }
    (tmp_path / "m.json").write_text(json.dumps(result))
    (tmp_path / "x.svm").write_text("0 1:1 3:1\n0 2:0.5\n")
    assert main(["predict", str(tmp_path / "m.json"), str(tmp_path / "x.svm")]) == 0  # to stdout
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "row,prediction"
    # margins 0.35 and 0.1 on [-1, 1] -> the target's declared range [0, 400]
    assert [float(v.split(",")[1]) for v in lines[1:]] == pytest.approx([270.0, 220.0])


def test_refusals_exit_2(customers, tmp_path, capsys):
    tmp, _, result = customers
    (tmp_path / "sel.json").write_text(json.dumps({"features": [1, 2]}))
    assert main(["predict", str(tmp_path / "sel.json"), str(tmp / "new.csv")]) == 2
    assert "not a released model" in capsys.readouterr().err
    bare = {k: v for k, v in result.items() if k != "schema"}
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    assert main(["predict", str(tmp_path / "bare.json"), str(tmp / "new.csv")]) == 2
    assert "it records no table schema" in capsys.readouterr().err
    (tmp_path / "bad.csv").write_text("customer_id,age\nc1,30\n")
    out = tmp_path / "p.csv"
    assert main(["predict", str(tmp / "model.json"), str(tmp_path / "bad.csv"), "--out", str(out)]) == 2
    assert "bad.csv:1: the header lacks the schema's field(s)" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))  # nothing half-written


def test_a_table_ingested_by_the_flags_is_predicted_from_raw_rows(tmp_path, capsys):
    """A model of a table ingested without --schema (declared categories and fill value by the flags) reads
    new raw rows as its training rows were: the label column may be there or not, columns in any order."""
    (tmp_path / "t.csv").write_text("age,plan,y\n30,basic,no\n41,,yes\n25,gold,no\n52,basic,yes\n")
    args = ["ingest", str(tmp_path / "t.csv"), "--out", str(tmp_path / "s"), "--categories", "plan=basic,gold"]
    assert main([*args, "--fill-value", "0"]) == 0
    store = open_store(tmp_path / "s")
    result = {
        "indices": [0, 1, 2, 3],
        "values": [0.05, 1.0, -1.0, 2.0],
        "intercept": -2.0,
        "n_features": 4,
        "classes": ["no", "yes"],
        "schema": table_schema(store.meta),
    }
    assert result["schema"]["feature_names"] == ["age", "plan=basic", "plan=gold", "plan=other"]
    (tmp_path / "m.json").write_text(json.dumps(result))
    (tmp_path / "new.csv").write_text("plan,age\nbasic,10\nsilver,40\ngold,\n")  # no label, a gap, another order
    assert main(["predict", str(tmp_path / "m.json"), str(tmp_path / "new.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    lines = _read(tmp_path / "p.csv")
    margins = np.array([0.5 + 1.0, 2.0 + 2.0, 0.0 - 1.0]) - 2.0  # age * 0.05 + the plan's weight, gap -> 0
    assert [r[1] for r in lines[1:]] == ["yes" if m > 0 else "no" for m in margins]
    np.testing.assert_allclose([float(r[2]) for r in lines[1:]], 1 / (1 + np.exp(-margins)), rtol=1e-5)
    (tmp_path / "bad.csv").write_text("plan\nbasic\n")
    assert main(["predict", str(tmp_path / "m.json"), str(tmp_path / "bad.csv")]) == 2
    assert "bad.csv: no column 'age' of the model's 4 feature columns" in capsys.readouterr().err
    result["schema"]["fill_value"] = None
    (tmp_path / "m.json").write_text(json.dumps(result))
    assert main(["predict", str(tmp_path / "m.json"), str(tmp_path / "new.csv")]) == 2
    assert "a missing value in data row 3, and the model declares no fill value" in capsys.readouterr().err
