"""Issue 56's "Done when", as a new user runs it: a customer table declared by a Table Schema goes ingest ->
budget (1, 1e-6) -> train at --epsilon 1 --delta 1e-6 (no --method) -> predict on new unlabelled rows ->
evaluate on public rows, every step exit 0, the ledger's spend at most 1, and the private model's exact AUC
within 0.05 of a non-private logistic regression on the same scaled design, measured in the same run."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from customer_table import write

pytestmark = pytest.mark.slow

EXE = Path(sys.executable).parent / "dpdist"


def test_customer_table_to_a_useful_model_and_its_predictions(tmp_path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from dpdist.data.store import open_store
    from dpdist.data.table_schema import load_schema

    files = write(tmp_path / "data")
    env = {k: v for k, v in os.environ.items() if k not in ("DPDIST_LEDGER", "DPDIST_UNACCOUNTED")}
    env.update(HOME=str(tmp_path / "home"), DPDIST_LEDGER=str(tmp_path / "ledger.sqlite"))

    def dpdist(*args: str) -> dict:
        r = subprocess.run([str(EXE), *args, "--json"], env=env, capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, (args, r.stderr)
        return json.loads(r.stdout)

    store = tmp_path / "customers"
    ingest = ["ingest", str(files["customers"]), "--schema", str(files["schema"]), "--out", str(store)]
    assert dpdist(*ingest, "--name", "customers")["task"] == "binary"
    dpdist("budget", "init", str(store), "--epsilon", "1", "--delta", "1e-6")
    train = dpdist("train", str(store), "--epsilon", "1", "--delta", "1e-6", "--out", str(tmp_path / "model.json"))
    preds = dpdist("predict", str(tmp_path / "model.json"), str(files["new"]), "--out", str(tmp_path / "preds.csv"))
    assert preds["rows"] == 10
    with open(tmp_path / "preds.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 and {r["prediction"] for r in rows} <= {"yes", "no"}
    assert all(0 < float(r["probability_yes"]) < 1 for r in rows) and rows[0]["customer_id"] == "c900000"
    by_key = dpdist("predict", train["key"], str(files["new"]), "--out", str(tmp_path / "by-key.csv"))
    assert by_key["rows"] == 10 and (tmp_path / "by-key.csv").read_text() == (tmp_path / "preds.csv").read_text()
    evaluation = dpdist("evaluate", str(tmp_path / "model.json"), "--public-test", str(files["public"]))
    shown = dpdist("budget", "show", "--dataset", "customers")
    assert shown["epsilon_spent"] <= 1.0 and shown["epsilon_basic"] <= 1.0 + 1e-9

    # the non-private ceiling on the same scaled design: the store's rows, the public rows read by the schema
    s = open_store(store)
    schema = load_schema(files["schema"])
    X_public, y_public, _ = schema.read(files["public"])
    ceiling = LogisticRegression(C=1e4, max_iter=5000).fit(s.csr(), np.asarray(s.y))
    auc_ceiling = roc_auc_score(y_public, ceiling.decision_function(X_public))
    print(f"private AUC {evaluation['auc']:.3f}, non-private {auc_ceiling:.3f}, spent {shown['epsilon_spent']:.3f}")
    assert auc_ceiling > 0.7  # the table carries signal
    assert evaluation["auc"] >= auc_ceiling - 0.05
