"""The central accountant: durable, atomic, idempotent, and never overspent under races."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpdist.exceptions import BudgetExceeded, ParameterError, ReleaseKeyConflict, UnknownDataset
from dpdist.privacy.accountant import Accountant, default_ledger_path


@pytest.fixture
def ledger(tmp_path: Path) -> Accountant:
    acc = Accountant(tmp_path / "ledger.sqlite")
    acc.init_budget("ds", 1.0, 1e-6)
    return acc


def test_wal_mode_and_durable_sync(ledger: Accountant):
    con = sqlite3.connect(ledger.path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_charge_status_history(ledger: Accountant):
    ledger.charge("ds", 0.25, 1e-7, "laplace", "a")
    ledger.charge("ds", 0.5, 0.0, "exponential", "b")
    s = ledger.status("ds")
    assert (s.epsilon_spent, s.delta_spent, s.releases) == (0.75, 1e-7, 2)
    assert s.epsilon_remaining == pytest.approx(0.25)
    hist = ledger.history("ds")
    assert [(r.key, r.mechanism, r.epsilon) for r in hist] == [("a", "laplace", 0.25), ("b", "exponential", 0.5)]
    # durable: a new Accountant on the same file sees the same ledger
    assert Accountant(ledger.path).status("ds") == s


def test_budget_exceeded_charges_nothing(ledger: Accountant):
    ledger.charge("ds", 0.9, 0.0, "laplace", "a")
    with pytest.raises(BudgetExceeded, match="nothing was charged"):
        ledger.charge("ds", 0.2, 0.0, "laplace", "b")
    with pytest.raises(BudgetExceeded):
        ledger.charge("ds", 0.01, 2e-6, "gaussian", "c")  # delta overspent
    s = ledger.status("ds")
    assert (s.epsilon_spent, s.releases) == (0.9, 1)


def test_ten_charges_of_a_tenth_spend_exactly_one(ledger: Accountant):
    for i in range(10):
        ledger.charge("ds", 0.1, 0.0, "laplace", f"k{i}")
    assert ledger.status("ds").epsilon_spent == 1.0
    with pytest.raises(BudgetExceeded):
        ledger.charge("ds", 0.1, 0.0, "laplace", "k10")


def test_idempotent_per_key(ledger: Accountant):
    first = ledger.charge("ds", 0.3, 0.0, "laplace", "task-1")
    again = ledger.charge("ds", 0.3, 0.0, "laplace", "task-1")
    assert again == first
    assert ledger.status("ds").epsilon_spent == 0.3
    with pytest.raises(ReleaseKeyConflict):
        ledger.charge("ds", 0.4, 0.0, "laplace", "task-1")


def test_unknown_dataset(ledger: Accountant):
    with pytest.raises(UnknownDataset, match="budget init"):
        ledger.charge("other", 0.1, 0.0, "laplace", "a")


def test_budget_never_changes_once_set(ledger: Accountant):
    assert ledger.init_budget("ds", 1.0, 1e-6).epsilon_total == 1.0  # same values: no-op
    with pytest.raises(ParameterError, match="never changed"):
        ledger.init_budget("ds", 2.0, 1e-6)


@pytest.mark.parametrize(
    ("eps", "delta"), [(0.0, 0.0), (-0.1, 0.0), (float("nan"), 0.0), (float("inf"), 0.0), (0.1, 1.0), (0.1, -1e-9),
                       (0.1, float("nan"))]
)
def test_bad_parameters(ledger: Accountant, eps, delta):
    with pytest.raises(ParameterError):
        ledger.charge("ds", eps, delta, "laplace", "bad")
    with pytest.raises(ParameterError):
        ledger.init_budget("new", eps if eps != 0.1 else 1.0, delta)
    assert ledger.status("ds").releases == 0


def test_bad_names(ledger: Accountant):
    for dataset, mech, key in [("", "m", "k"), ("ds", "", "k"), ("ds", "m", ""), ("ds", "m", None)]:
        with pytest.raises(ParameterError):
            ledger.charge(dataset, 0.1, 0.0, mech, key)


def test_default_ledger_path(monkeypatch, tmp_path):
    monkeypatch.setenv("DPDIST_LEDGER", str(tmp_path / "x.sqlite"))
    assert default_ledger_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("DPDIST_LEDGER")
    assert default_ledger_path() == Path.home() / ".dpdist" / "ledger.sqlite"


# ---------------------------------------------------------------------- release()


def test_release_records_and_replays_the_result(ledger: Accountant):
    calls = []

    def compute():
        calls.append(1)
        return {"features": [3, 1, 4], "value": 0.5 * len(calls)}

    r1 = ledger.release("ds", 0.2, 0.0, "exponential", "sel-1", compute)
    r2 = ledger.release("ds", 0.2, 0.0, "exponential", "sel-1", compute)
    assert r1 == r2 == {"features": [3, 1, 4], "value": 0.5}
    assert len(calls) == 1
    assert ledger.status("ds").epsilon_spent == 0.2


def test_release_refused_computes_nothing(ledger: Accountant):
    ledger.charge("ds", 1.0, 0.0, "laplace", "all")

    def compute():
        raise AssertionError("noise must not be drawn when the budget is refused")

    with pytest.raises(BudgetExceeded):
        ledger.release("ds", 0.1, 0.0, "laplace", "more", compute)


def test_release_after_failed_compute(ledger: Accountant):
    def boom():
        raise RuntimeError("worker died")

    with pytest.raises(RuntimeError):
        ledger.release("ds", 0.2, 0.0, "laplace", "r", boom)
    # the charge stands, nothing was released; the retry computes under the same charge
    assert ledger.release("ds", 0.2, 0.0, "laplace", "r", lambda: [1.5]) == [1.5]
    assert ledger.status("ds").epsilon_spent == 0.2


# ------------------------------------------------------------ processes and crashes


def _race_worker(path: str, i: int, start, out) -> None:
    acc = Accountant(path)
    start.wait()
    try:
        acc.charge("ds", 0.1, 0.0, "laplace", f"proc-{i}")
        out.put("ok")
    except BudgetExceeded:
        out.put("refused")
    except Exception as e:  # pragma: no cover - reported to the parent
        out.put(repr(e))


def test_sixteen_processes_race(ledger: Accountant):
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_race_worker, args=(str(ledger.path), i, start, out)) for i in range(16)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # let every process import and open the ledger
    start.set()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert sorted(results) == ["ok"] * 10 + ["refused"] * 6
    s = ledger.status("ds")
    assert s.epsilon_spent == 1.0 and s.releases == 10


_CHILD = r"""
import sys, time
from pathlib import Path
from dpdist.privacy.accountant import Accountant
path, mode, flag = sys.argv[1], sys.argv[2], Path(sys.argv[3])
acc = Accountant(path)
if mode == "pause":
    def hook():
        flag.write_text("inside")
        time.sleep(120)
    acc._before_commit = hook
    acc.charge("ds", 0.3, 1e-7, "laplace", "killed")
else:
    flag.write_text("started")
    i = 0
    while True:
        acc.charge("ds", 1e-6, 0.0, "laplace", f"{mode}-{i}")
        i += 1
"""


def _run_child(tmp_path: Path, ledger: Accountant, mode: str) -> subprocess.Popen:
    flag = tmp_path / f"flag-{mode}"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(ledger.path), mode, str(flag)])
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert proc.poll() is None, "child exited early"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc


def _integrity(path: Path) -> None:
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_sigkill_inside_the_transaction_leaves_no_charge(tmp_path: Path, ledger: Accountant):
    ledger.charge("ds", 0.1, 0.0, "laplace", "before")
    proc = _run_child(tmp_path, ledger, "pause")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _integrity(ledger.path)
    s = ledger.status("ds")
    assert (s.epsilon_spent, s.delta_spent, s.releases) == (0.1, 0.0, 1)
    assert [r.key for r in ledger.history("ds")] == ["before"]
    # the ledger is usable at once: the killed writer's lock is gone
    ledger.charge("ds", 0.3, 1e-7, "laplace", "killed")
    assert ledger.status("ds").epsilon_spent == pytest.approx(0.4)


def test_sigkill_at_random_points_keeps_the_ledger_consistent(tmp_path: Path, ledger: Accountant):
    for delay in (0.05, 0.2, 0.5):
        proc = _run_child(tmp_path, ledger, f"loop-{delay}")
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        (tmp_path / f"flag-loop-{delay}").unlink()
        _integrity(ledger.path)
        hist = ledger.history("ds")
        mine = [r for r in hist if r.key.startswith(f"loop-{delay}-")]
        # every recorded charge is whole, and the child's sequential charges have no hole
        assert mine, "the child recorded no charge before it was killed"
        assert all(r.epsilon == 1e-6 and r.delta == 0.0 and r.mechanism == "laplace" and r.time for r in mine)
        assert [r.key for r in mine] == [f"loop-{delay}-{i}" for i in range(len(mine))]
        s = ledger.status("ds")
        assert s.releases == len(hist)
        assert s.epsilon_spent == pytest.approx(1e-6 * len(hist))
