"""The full-size run configs (issue 16, deploy/full-size/): each parses and plans within its budget.

Only the plan: the runs themselves are benchmarks (benchmarks/full_size.py), not tests. The
configs' relative paths (the svmlight text, the output) are resolved from a scratch working
directory holding an empty stand-in for the text, so nothing is generated or ingested.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from dpdist.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "deploy" / "full-size"
SHAPES = {"kdda": 20_216_830, "url": 3_231_961, "webspam": 16_609_143}


@pytest.mark.parametrize("profile", sorted(SHAPES))
def test_a_full_size_config_plans_within_its_budget(profile, tmp_path, monkeypatch, capsys):
    config = CONFIGS / f"{profile}.toml"
    doc = tomllib.loads(config.read_text())
    assert doc["data"]["n_features"] == SHAPES[profile] and doc["train"]["iters"] == 4000
    assert doc["data"]["source"] == "svmlight" and doc["data"]["task"] == "binary"
    monkeypatch.chdir(tmp_path)
    text = tmp_path / doc["data"]["path"]
    text.parent.mkdir(parents=True)
    text.touch()
    code = main(["run", str(config), "--plan", "--json", "--ledger", str(tmp_path / "l.sqlite")])
    plan = json.loads(capsys.readouterr().out)["plan"]
    steps = [r["step"] for r in plan["releases"]]
    assert code == 0 and steps.count("select") == 2 and steps.count("train") == 1 and "evaluate" in steps
    assert 0 < plan["epsilon_after"] <= doc["budget"]["epsilon"]
    assert not (tmp_path / doc["output"]).exists()  # planned, nothing run
