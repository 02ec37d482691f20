"""A new user's first hour (issue 17): each surprise the issue lists, as a test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from command import run

from dpdist.data.store import open_store, write_store
from dpdist.flows.config import load_config
from dpdist.privacy.accountant import Accountant


def _svm(tmp_path: Path) -> Path:
    p = tmp_path / "mine.svm"
    p.write_text("".join(f"{(-1) ** i} 1:0.5 {2 + i % 7}:0.25\n" for i in range(60)))
    return p


def test_1_no_permanent_budget_is_set_without_an_explicit_choice(capsys, tmp_path):
    cfg = tmp_path / "mine.toml"
    cfg.write_text(
        f'output = "{tmp_path / "out"}"\n[data]\nsource = "svmlight"\npath = "{_svm(tmp_path)}"\n'
        'n_features = 10\ntask = "binary"\nlabels = [-1, 1]\n'
    )
    code, out, err = run(capsys, "run", str(cfg), "--ledger", str(tmp_path / "l.sqlite"))
    assert code == 2 and "no privacy budget" in err and "[budget]" in err and "budget init" in err
    assert not (tmp_path / "out").exists()  # nothing ran: no store, no ledger entry
    assert not (tmp_path / "l.sqlite").exists() or Accountant(tmp_path / "l.sqlite").datasets() == []


def test_4_a_plan_the_budget_cannot_hold_is_refused_before_any_work_in_one_line(capsys, tmp_path):
    cfg = tmp_path / "small.toml"
    cfg.write_text(f'output = "{tmp_path / "out"}"\n[budget]\nepsilon = 2.0\ndelta = 1e-6\n')
    code, out, err = run(capsys, "run", str(cfg), "--ledger", str(tmp_path / "l.sqlite"))
    assert code == 3 and out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "budget refused" in lines[0] and "nothing was charged" in lines[0]
    assert not (tmp_path / "out").exists()  # nothing generated or ingested
    # --plan shows the plan and runs nothing
    big = tmp_path / "big.toml"
    big.write_text(f'output = "{tmp_path / "out"}"\n[budget]\nepsilon = 20.0\ndelta = 1e-6\n')
    code, out, _ = run(capsys, "run", str(big), "--plan", "--json", "--ledger", str(tmp_path / "l.sqlite"))
    plan = json.loads(out)["plan"]
    defaults = load_config().train
    assert code == 0 and [r["step"] for r in plan["releases"]].count("train") == len(defaults.methods) * len(
        defaults.epsilon
    )
    assert plan["epsilon_after"] < plan["epsilon_basic"] <= 20.0 + 0.32 and not (tmp_path / "out").exists()


def test_4_the_plan_is_checked_against_the_ledger_for_known_data(capsys, tmp_path):
    write_store(tmp_path / "s", np.eye(8) * 0.5, np.array([1.0, -1.0] * 4))
    ledger = tmp_path / "l.sqlite"
    Accountant(ledger).init_budget(open_store(tmp_path / "s").dataset_id, 1.0, 1e-6, name="known")
    cfg = tmp_path / "store.toml"
    cfg.write_text(f'output = "{tmp_path / "out"}"\n[data]\nsource = "store"\npath = "{tmp_path / "s"}"\n')
    code, out, err = run(capsys, "run", str(cfg), "--ledger", str(ledger))
    assert code == 3 and "'known'" in err  # the ledger's budget (1.0), not the defaults' 15


def test_9_a_budget_is_only_set_for_a_store_that_exists(capsys, tmp_path):
    code, _, err = run(
        capsys,
        "budget",
        "init",
        "--dataset",
        "ds-1234",
        "--epsilon",
        "1",
        "--delta",
        "0",
        "--ledger",
        str(tmp_path / "l.sqlite"),
    )
    assert code == 2  # the old form (an id) is gone: budget init takes the store
    code, _, err = run(
        capsys, "budget", "init", "ds-1234", "--epsilon", "1", "--delta", "0", "--ledger", str(tmp_path / "l.sqlite")
    )
    assert code == 2 and "does not exist" in err and Accountant(tmp_path / "l.sqlite").datasets() == []


def test_11_version_typo_ledgers_and_fast_config_errors(capsys, tmp_path):
    out = subprocess.run([sys.executable, "-m", "dpdist.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("dpdist ")
    typo = tmp_path / "typo" / "dir" / "x.sqlite"
    assert run(capsys, "budget", "show", "--ledger", str(typo))[0] == 0 and not typo.parent.exists()
    assert run(capsys, "budget", "history", "--dataset", "a", "--ledger", str(typo))[0] == 2
    assert not typo.parent.exists()
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nlam = -1\n")
    r = subprocess.run([sys.executable, "-m", "dpdist.cli", "run", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2 and "train.lam" in r.stderr
    # no Prefect import before the config is read (checked by the modules loaded, not by a clock)
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, dpdist.cli as c; c.main(['run', sys.argv[1]]);print('prefect' in sys.modules)",
            str(bad),
        ],
        capture_output=True,
        text=True,
    )
    assert r.stdout.strip() == "False"
