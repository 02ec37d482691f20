"""A table read by its declared Frictionless Table Schema (dpdist.data.table_schema) and ingested with it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpdist.cli import main
from dpdist.data.store import open_store
from dpdist.data.table_schema import load_schema
from dpdist.exceptions import ParameterError
from dpdist.released import table_schema

SCHEMA = {
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "age", "type": "integer", "constraints": {"minimum": 18, "maximum": 90}, "fill": 54},
        {"name": "income", "type": "number", "constraints": {"minimum": 0, "maximum": 100000, "required": True}},
        {"name": "plan", "type": "string", "constraints": {"enum": ["basic", "plus"]}},
        {"name": "member", "type": "boolean", "trueValues": ["y"], "falseValues": ["n"], "fill": False},
        {"name": "churn", "type": "string", "constraints": {"enum": ["yes", "no"]}},
    ],
    "missingValues": ["", "NA"],
    "primaryKey": "id",
}
ROWS = [
    "id,age,income,plan,member,churn",
    "a,18,50000,basic,y,yes",
    "b,NA,150000,plus,n,no",  # a gap filled (54 -> 0.5); income above its maximum: clipped to 1
    "c,100,0,gold,,no",  # age above 90: 1; an undeclared plan: plan=other; a boolean gap: its fill
    "d,36,25000,,y,yes",  # a text gap without a fill: in no column
]


def _write(tmp_path, rows=ROWS, schema=SCHEMA):
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "schema.json").write_text(json.dumps(schema, indent=1))
    return tmp_path / "t.csv", tmp_path / "schema.json"


def test_each_record_mapped_by_the_declared_schema(tmp_path):
    table, path = _write(tmp_path)
    schema = load_schema(path)
    X, y, keys = schema.read(table)
    assert schema.feature_names == ["age", "income", "plan=basic", "plan=plus", "plan=other", "member"]
    expected = [
        [0.0, 0.5, 1, 0, 0, 1],
        [0.5, 1.0, 0, 1, 0, 0],
        [1.0, 0.0, 0, 0, 1, 0],
        [0.25, 0.25, 0, 0, 0, 1],
    ]
    np.testing.assert_allclose(X, expected)
    assert y.tolist() == [1.0, 0.0, 0.0, 1.0]  # codes of the sorted classes: no=0, yes=1
    assert keys.tolist() == ["a", "b", "c", "d"] and schema.task == "binary" and schema.target == "churn"
    X_new, y_new, _ = schema.read(_write(tmp_path, [r.rsplit(",", 1)[0] for r in ROWS])[0], target=False)
    assert y_new is None and np.array_equal(X_new, X)  # new unlabelled rows read exactly as the training rows


def test_ingest_records_the_schema_in_the_store_and_its_models(tmp_path):
    table, path = _write(tmp_path)
    assert main(["ingest", str(table), "--schema", str(path), "--out", str(tmp_path / "s")]) == 0
    store = open_store(tmp_path / "s")
    assert store.meta["feature_schema"] == "declared" and store.meta["schema"] == "declared"
    assert store.meta["classes"] == ["no", "yes"] and store.task == "binary"
    recorded = table_schema(store.meta)
    assert recorded is not None and recorded["table_schema"] == SCHEMA
    assert store.csr().max() <= 1.0 and store.csr().min() >= 0.0


@pytest.mark.parametrize(
    ("rows", "schema", "words"),
    [
        (ROWS[:2] + ["e,30,,basic,y,no"], SCHEMA, "t.csv:3: field 'income' is required"),
        (ROWS[:2] + ["e,30,12x,basic,y,no"], SCHEMA, "t.csv:3: field 'income': not a finite number"),
        (ROWS[:2] + ["e,30.5,1,basic,y,no"], SCHEMA, "t.csv:3: field 'age': not a finite integer"),
        (ROWS[:2] + ["e,30,1,basic,maybe,no"], SCHEMA, "t.csv:3: field 'member': not one of its true"),
        (ROWS[:3] + ["e,30,1,basic,y,perhaps"], SCHEMA, "t.csv:4: the target 'churn' holds a label outside"),
        (["id,age,plan,member,churn", "a,1,basic,y,no"], SCHEMA, "t.csv:1: the header lacks the schema's field(s)"),
        (
            ROWS,
            {**SCHEMA, "fields": [SCHEMA["fields"][0], {**SCHEMA["fields"][1], "constraints": {"minimum": 18}}]},
            "field 'age': a numeric field (integer) needs its public range",
        ),
        (
            ROWS,
            {**SCHEMA, "fields": [SCHEMA["fields"][0], {"name": "plan", "type": "string"}, *SCHEMA["fields"][5:]]},
            "field 'plan': a string field needs its public values",
        ),
        (
            ROWS,
            {**SCHEMA, "fields": [SCHEMA["fields"][0], {**SCHEMA["fields"][1], "type": "float"}]},
            "fields/1/type (field 'age'): 'float' is not one of",
        ),
    ],
)
def test_bad_table_or_schema_named_exit_2(tmp_path, capsys, rows, schema, words):
    table, path = _write(tmp_path, rows, schema)
    assert main(["ingest", str(table), "--schema", str(path), "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert words in err, err
    assert "12x" not in err and "perhaps" not in err  # no value of the table in an error
    assert not (tmp_path / "s").exists()


def test_schema_that_is_not_json_named_by_line_and_column(tmp_path, capsys):
    text = '{"fields": [\n  {"name": "a",}\n]}'
    (tmp_path / "schema.json").write_text(text)
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    assert main(["ingest", str(tmp_path / "t.csv"), "--schema", str(tmp_path / "schema.json"), "--out", "s"]) == 2
    # the place is the json module's own (Python 3.13 names the trailing comma, 3.11 the character after it)
    with pytest.raises(json.JSONDecodeError) as bad:
        json.loads(text)
    assert bad.value.lineno == 2 and bad.value.colno in (15, 16)
    assert f"schema.json:2:{bad.value.colno}: not JSON" in capsys.readouterr().err
    with pytest.raises(ParameterError, match="no such file"):
        load_schema(tmp_path / "absent.json")
