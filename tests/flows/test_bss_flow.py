"""Best subset selection (seed 002) in `dpdist run`: both BSS methods on the flow's Dask cluster.

One small run (seed 002's synthetic regression, p = 20, s = 5) releases a top-R and a mistakes
support; the ledger holds exactly the charges the run's privacy plan (`dpdist run --plan`) announced, and the report and
results show each released support (and no content hash, exact count or timing).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from flow_helpers import dpdist, flow_env, small_config, write_config

from dpdist.flows.config import load_config
from dpdist.flows.plan import bss_selector, plan
from dpdist.privacy.accountant import Accountant

pytestmark = pytest.mark.slow

BSS = ["bss-top-r", "bss-mistakes"]


def bss_config(tmp: Path) -> dict:
    return small_config(
        tmp,
        data={"name": "bss", "n": 6000, "d": 20, "test_fraction": 0.5, "count_epsilon": 0.01, "bounds": "clip"},
        budget={"epsilon": 20.0, "delta": 1e-5},
        select={"methods": BSS, "k": 5, "epsilon": 4.0, "bss_delta": 1e-6},
        train={"methods": []},
    )


def test_bss_methods_run_on_the_cluster_charged_as_planned(prefect_server: dict, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, bss_config(tmp_path))
    env = flow_env(tmp_path, prefect_server)
    config = load_config(cfg)
    planned = {(p.step, p.method): p.to_dict() for p in plan(config)}  # what `dpdist run --plan` prints
    assert {m for s, m in planned if s == "select"} == set(BSS)
    for method in BSS:  # the plan charges the selectors' own privacy_charge()
        charge = bss_selector(config, method).privacy_charge()
        planned_charge = planned[("select", method)]
        assert tuple(planned_charge[k] for k in ("mechanism", "epsilon", "delta", "form", "rho")) == (
            charge.mechanism,
            charge.epsilon,
            charge.delta,
            charge.loss.form,
            charge.loss.rho,
        )
    assert planned[("select", "bss-mistakes")]["delta"] == 1e-6  # the propose-test-release delta

    r = dpdist(["run", str(cfg), "--json"], env, tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout)
    assert [s["step"] for s in out["steps"]] == ["ingest", "select", "evaluate", "report"]

    # the ledger holds exactly the planned charges: the counts and one charge per BSS method
    acc = Accountant(tmp_path / "ledger.sqlite")
    dataset = acc.resolve(out["dataset"])
    history = acc.history(dataset)
    assert len(history) == len(planned) == 3
    assert acc.status(dataset).epsilon_basic == pytest.approx(sum(c["epsilon"] for c in planned.values()))
    selection = json.loads((tmp_path / "out" / "selection.json").read_text())
    by_key = {h.key: h for h in history}
    for method in BSS:
        rec, planned_charge = selection[method], planned[("select", method)]
        h = by_key[rec["key"]]
        assert h.mechanism == planned_charge["mechanism"] and h.mechanism.startswith("bss/")
        assert (h.epsilon, h.delta, h.privacy_loss.form, h.privacy_loss.rho) == tuple(
            planned_charge[k] for k in ("epsilon", "delta", "form", "rho")
        )
        assert sorted(json.loads(h.result)) == rec["features"]  # what the flow wrote is the release
        assert len(rec["features"]) == 5 and all(0 <= j < 20 for j in rec["features"])
    assert selection["bss-top-r"]["features"] == [1, 3, 5, 7, 9]  # seed 002's support, found at epsilon 4

    # the report shows each released support, beside no content hash and no timing
    report = Path(out["report"]).read_text()
    for method in BSS:
        row = next(line for line in report.splitlines() if line.startswith(f"| {method} "))
        assert ", ".join(map(str, selection[method]["features"])) in row
    results = (tmp_path / "out" / "results.json").read_text()
    for body in (report, results, r.stdout):
        assert dataset not in body and not re.search(r"seconds|\bfit_time", body)
