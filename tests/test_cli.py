"""The ``dpdist`` command line: JSON output and exit codes per ../shared/spec/cli.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpdist.cli import main
from dpdist.privacy.accountant import Accountant


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse
        code = int(e.code)
    out, err = capsys.readouterr()
    return code, out, err


def test_budget_init_show_history_json(capsys, tmp_path):
    ledger = str(tmp_path / "l.sqlite")
    code, out, _ = run(capsys, "budget", "init", "--dataset", "d1", "--epsilon", "2", "--delta", "1e-6",
                       "--ledger", ledger, "--json")
    assert code == 0
    assert json.loads(out) == {"dataset": "d1", "epsilon_total": 2.0, "delta_total": 1e-6}

    Accountant(ledger).charge("d1", 0.5, 1e-7, "laplace", "r1")

    code, out, _ = run(capsys, "budget", "show", "--dataset", "d1", "--ledger", ledger, "--json")
    shown = json.loads(out)
    assert code == 0
    assert shown["epsilon_spent"] == 0.5 and shown["delta_spent"] == 1e-7 and shown["releases"] == 1
    assert shown["epsilon_total"] == 2.0 and shown["delta_total"] == 1e-6

    code, out, _ = run(capsys, "budget", "show", "--ledger", ledger, "--json")
    assert [d["dataset"] for d in json.loads(out)["datasets"]] == ["d1"]

    code, out, _ = run(capsys, "budget", "history", "--dataset", "d1", "--ledger", ledger, "--json")
    rel = json.loads(out)["releases"]
    assert code == 0 and len(rel) == 1
    assert {"time", "mechanism", "epsilon", "delta", "key"} <= set(rel[0])
    assert rel[0]["key"] == "r1" and rel[0]["epsilon"] == 0.5


def test_human_output(capsys, tmp_path):
    ledger = str(tmp_path / "l.sqlite")
    run(capsys, "budget", "init", "--dataset", "d1", "--epsilon", "1", "--delta", "0", "--ledger", ledger)
    code, out, _ = run(capsys, "budget", "show", "--dataset", "d1", "--ledger", ledger)
    assert code == 0 and "epsilon spent 0 of 1" in out


def test_ledger_from_environment(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DPDIST_LEDGER", str(tmp_path / "env.sqlite"))
    code, _, _ = run(capsys, "budget", "init", "--dataset", "d", "--epsilon", "1", "--delta", "0")
    assert code == 0 and (tmp_path / "env.sqlite").exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["budget", "init", "--dataset", "d", "--epsilon", "0", "--delta", "0"], "epsilon"),
        (["budget", "init", "--dataset", "d", "--epsilon", "nan", "--delta", "0"], "epsilon"),
        (["budget", "init", "--dataset", "d", "--epsilon", "1", "--delta", "1"], "delta"),
        (["budget", "init", "--dataset", "d", "--epsilon", "abc", "--delta", "0"], "--epsilon"),
        (["budget", "init", "--epsilon", "1", "--delta", "0"], "--dataset"),
        (["budget", "history", "--dataset", "unknown"], "budget init"),
    ],
)
def test_bad_input_exits_2(capsys, tmp_path, argv, needle):
    code, out, err = run(capsys, *argv, "--ledger", str(tmp_path / "l.sqlite"))
    assert code == 2
    assert needle in err
    assert out == ""


def test_console_script_installed(tmp_path):
    exe = Path(sys.executable).parent / "dpdist"
    res = subprocess.run([str(exe), "budget", "show", "--ledger", str(tmp_path / "l.sqlite"), "--json"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["datasets"] == []
