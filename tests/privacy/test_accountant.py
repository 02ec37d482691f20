"""The central accountant: durable, atomic, idempotent, and never overspent under races."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from old_ledgers import migrated, write_as_schema

from dpdist.exceptions import (
    BudgetExceeded,
    ParameterError,
    ReleaseKeyConflict,
    SolverAborted,
    SolverFailure,
    UnknownDataset,
)
from dpdist.privacy.accountant import Accountant, default_ledger_path, spend_text
from dpdist.privacy.filter import PrivacyFilter
from dpdist.privacy.loss import Charge, PrivacyLoss


def C(epsilon: float, delta: float, mechanism: str) -> Charge:
    """An (epsilon, delta) charge: composed by plain addition, so the sums below are exact."""
    return Charge(PrivacyLoss.approx(epsilon, delta), mechanism)


# Every test of the ``ledger`` fixture runs on both backends (the PostgreSQL one on a throwaway
# server: tests/conftest.py), but these, which open the SQLite file itself or limit its disk.
_SQLITE_ONLY = frozenset(
    {
        "test_wal_mode_and_durable_sync",
        "test_a_legacy_failure_record_is_replayed_and_shown_without_its_message",
        "test_a_result_the_ledgers_disk_refuses_is_recorded_as_a_failure_never_drawn_again",
    }
)


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        only = metafunc.definition.originalname in _SQLITE_ONLY
        metafunc.parametrize("backend", ["sqlite"] if only else ["sqlite", "postgresql"])


@pytest.fixture
def ledger(backend: str, tmp_path: Path, request) -> Accountant:
    if backend == "postgresql":
        acc = Accountant(request.getfixturevalue("postgres_ledger_url"))
    else:
        acc = Accountant(tmp_path / "ledger.sqlite")
    acc.init_budget("ds", 1.0, 1e-6)
    return acc


def test_wal_mode_and_durable_sync(ledger: Accountant):
    con = sqlite3.connect(ledger.path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_charge_status_history(ledger: Accountant):
    ledger.charge("ds", C(0.25, 1e-7, "laplace"), "a")
    ledger.charge("ds", C(0.5, 0.0, "exponential"), "b")
    s = ledger.status("ds")
    assert (s.epsilon_spent, s.delta_spent, s.releases) == (0.75, 1e-7, 2)
    assert s.epsilon_remaining == pytest.approx(0.25)
    hist = ledger.history("ds")
    assert [(r.key, r.mechanism, r.epsilon) for r in hist] == [("a", "laplace", 0.25), ("b", "exponential", 0.5)]
    # durable: a new Accountant on the same file sees the same ledger
    assert Accountant(ledger.path).status("ds") == s


def test_budget_exceeded_charges_nothing(ledger: Accountant):
    ledger.charge("ds", C(0.9, 0.0, "laplace"), "a")
    with pytest.raises(BudgetExceeded, match="nothing was charged"):
        ledger.charge("ds", C(0.2, 0.0, "laplace"), "b")
    with pytest.raises(BudgetExceeded):
        ledger.charge("ds", C(0.01, 2e-6, "gaussian"), "c")  # delta overspent
    s = ledger.status("ds")
    assert (s.epsilon_spent, s.releases) == (0.9, 1)


def test_ten_charges_of_a_tenth_spend_exactly_one(ledger: Accountant):
    for i in range(10):
        ledger.charge("ds", C(0.1, 0.0, "laplace"), f"k{i}")
    assert ledger.status("ds").epsilon_spent == 1.0
    with pytest.raises(BudgetExceeded):
        ledger.charge("ds", C(0.1, 0.0, "laplace"), "k10")


def test_idempotent_per_key(ledger: Accountant):
    first = ledger.charge("ds", C(0.3, 0.0, "laplace"), "task-1")
    again = ledger.charge("ds", C(0.3, 0.0, "laplace"), "task-1")
    assert again == first
    assert ledger.status("ds").epsilon_spent == 0.3
    with pytest.raises(ReleaseKeyConflict):
        ledger.charge("ds", C(0.4, 0.0, "laplace"), "task-1")


def test_unknown_dataset(ledger: Accountant):
    with pytest.raises(UnknownDataset, match="budget init"):
        ledger.charge("other", C(0.1, 0.0, "laplace"), "a")


def test_budget_never_changes_once_set(ledger: Accountant):
    assert ledger.init_budget("ds", 1.0, 1e-6).epsilon_total == 1.0  # same values: no-op
    with pytest.raises(ParameterError, match="never changed"):
        ledger.init_budget("ds", 2.0, 1e-6)


@pytest.mark.parametrize(
    ("eps", "delta"),
    [(0.0, 0.0), (-0.1, 0.0), (float("nan"), 0.0), (float("inf"), 0.0), (0.1, 1.0), (0.1, -1e-9), (0.1, float("nan"))],
)
def test_bad_parameters(ledger: Accountant, eps, delta):
    with pytest.raises(ParameterError):
        ledger.charge("ds", C(eps, delta, "laplace"), "bad")
    with pytest.raises(ParameterError):
        ledger.init_budget("new", eps if eps != 0.1 else 1.0, delta)
    assert ledger.status("ds").releases == 0


def test_bad_names(ledger: Accountant):
    for dataset, mech, key in [("", "m", "k"), ("ds", "", "k"), ("ds", "m", ""), ("ds", "m", None)]:
        with pytest.raises(ParameterError):
            ledger.charge(dataset, C(0.1, 0.0, mech), key)


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

    r1 = ledger.release("ds", C(0.2, 0.0, "exponential"), "sel-1", compute)
    r2 = ledger.release("ds", C(0.2, 0.0, "exponential"), "sel-1", compute)
    assert r1 == r2 == {"features": [3, 1, 4], "value": 0.5}
    assert len(calls) == 1
    assert ledger.status("ds").epsilon_spent == 0.2


def test_release_refused_computes_nothing(ledger: Accountant):
    ledger.charge("ds", C(1.0, 0.0, "laplace"), "all")

    def compute():
        raise AssertionError("noise must not be drawn when the budget is refused")

    with pytest.raises(BudgetExceeded):
        ledger.release("ds", C(0.1, 0.0, "laplace"), "more", compute)


def test_release_after_interrupted_compute(ledger: Accountant):
    """An interrupt (a BaseException that is not an Exception) is an interrupted run, not an outcome:
    the charge stands, nothing is recorded, and the retry computes under the same charge."""

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ledger.release("ds", C(0.2, 0.0, "laplace"), "r", interrupted)
    (rel,) = ledger.history("ds")
    assert rel.result is None
    assert ledger.release("ds", C(0.2, 0.0, "laplace"), "r", lambda: [1.5]) == [1.5]
    assert ledger.status("ds").epsilon_spent == 0.2


class KilledWorker(Exception):
    """Stands for distributed.scheduler.KilledWorker (matched by module and name)."""


KilledWorker.__module__ = "distributed.scheduler"


@pytest.mark.parametrize(
    "exc",
    [
        OSError("connection lost"),
        ConnectionResetError(),
        MemoryError(),
        KilledWorker("w"),
        __import__("concurrent.futures").futures.CancelledError(),
    ],
)
def test_the_machines_failures_are_interruptions_not_outcomes(ledger: Accountant, exc: Exception):
    """A lost connection, a killed worker, memory: not the release's outcome (they do not depend on
    the noise), so nothing is recorded and the retry computes under the same charge."""
    with pytest.raises(type(exc)):
        ledger.release("ds", C(0.2, 0.0, "laplace"), "r", FailingCompute(exc))
    (rel,) = ledger.history("ds")
    assert rel.result is None
    assert ledger.release("ds", C(0.2, 0.0, "laplace"), "r", lambda: [1.5]) == [1.5]
    assert ledger.status("ds").epsilon_spent == 0.2


# What a failing ``compute`` could say about the data: a value, a count, an index, a solver's time.
SECRET = "Found array with 3 sample(s) (shape=(3, 17)); entry 42 is 0.8137; solved in 12.75 s"


class FailingCompute:
    """A ``compute`` that counts its calls and raises ``exc`` (with a data-looking message)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc, self.calls = exc, 0

    def __call__(self):
        self.calls += 1
        raise self.exc


def _assert_public(text: str) -> None:
    """No fragment of the exception's own message, and no digit at all (no value, count, index or time)."""
    for fragment in ("Found array", "sample", "shape", "entry", "0.8137", "12.75", "42", "17", "solved"):
        assert fragment not in text, (fragment, text)
    assert not any(ch.isdigit() for ch in text), text


@pytest.mark.parametrize(
    ("exc", "shown"),
    [
        (ValueError(SECRET), SolverFailure),  # numpy LinAlgError, scikit-learn messages, ...
        (TypeError(SECRET), SolverFailure),
        (ZeroDivisionError(SECRET), SolverFailure),
        (SolverAborted(SECRET), SolverAborted),  # a MIP time limit, before any noise
        (SolverFailure(SECRET), SolverFailure),
        (ParameterError(SECRET), ParameterError),
    ],
    ids=["ValueError", "TypeError", "ZeroDivisionError", "SolverAborted", "SolverFailure", "ParameterError"],
)
def test_a_failed_compute_is_recorded_once_without_its_message_and_replayed(ledger: Accountant, exc, shown):
    """Every Exception from ``compute`` is the release's outcome: recorded once, charged once, stored
    and shown without the exception's own text, and replayed on a retry without calling ``compute``."""
    compute = FailingCompute(exc)
    with pytest.raises(shown) as first:
        ledger.release("ds", C(0.2, 0.0, "em"), "r", compute)
    assert compute.calls == 1
    assert first.value.__cause__ is None and first.value.__context__ is None  # the original is not chained
    (rel,) = ledger.history("ds")
    assert rel.result is not None and ledger.status("ds").epsilon_spent == 0.2
    stored = json.loads(rel.result)["__dpdist_failure__"]
    assert stored["type"] == shown.__name__ and stored["raised"] == type(exc).__name__
    _assert_public(rel.result)
    _assert_public(json.dumps(rel.to_dict("public-name")["result"]))
    _assert_public(str(first.value))

    retry = FailingCompute(AssertionError("a retry must replay, not compute"))
    with pytest.raises(shown, match="recorded as this release.s outcome") as again:
        ledger.release("ds", C(0.2, 0.0, "em"), "r", retry)
    assert retry.calls == 0 and str(again.value) == str(first.value)
    assert ledger.status("ds").epsilon_spent == 0.2 and ledger.status("ds").releases == 1


def test_an_unrecordable_result_is_a_recorded_failure(ledger: Accountant):
    """A result that is not finite or not JSON: a failure recorded with a fixed message (no value of it)."""
    for key, value in (("nan", [0.8137, float("nan")]), ("object", {"coef": object()})):
        with pytest.raises(SolverFailure, match="cannot be recorded") as err:
            ledger.release("ds", C(0.1, 0.0, "laplace"), key, lambda value=value: value)
        _assert_public(str(err.value))
        with pytest.raises(SolverFailure, match="cannot be recorded"):
            ledger.release("ds", C(0.1, 0.0, "laplace"), key, FailingCompute(AssertionError("replay")))
    assert ledger.status("ds").releases == 2


def test_a_legacy_failure_record_is_replayed_and_shown_without_its_message(ledger: Accountant, tmp_path: Path):
    """A failure recorded by an older dpdist kept ``str(e)``: replay and the audit trail drop it."""
    ledger.charge("ds", C(0.2, 0.0, "em"), "old")
    legacy = json.dumps(
        {"__dpdist_failure__": {"type": "SolverFailure", "message": f"the result cannot be recorded ({SECRET})"}}
    )
    with sqlite3.connect(ledger.path) as con:
        con.execute("UPDATE releases SET result = ? WHERE key = 'old'", (legacy,))
    with pytest.raises(SolverFailure) as err:
        ledger.release("ds", C(0.2, 0.0, "em"), "old", FailingCompute(AssertionError("replay")))
    _assert_public(str(err.value))
    (rel,) = ledger.history("ds")
    _assert_public(json.dumps(rel.to_dict("public-name")["result"]))


# ------------------------------------------------------------ processes and crashes


def _race_worker(path: str, i: int, ready, start, out) -> None:
    try:
        acc = Accountant(path)
        acc.status("ds")  # the ledger opened and read before the start signal
    except Exception as e:  # pragma: no cover - reported to the parent
        out.put(f"open failed: {e!r}")
        ready.put(i)
        return
    ready.put(i)
    start.wait()
    try:
        acc.charge("ds", C(0.1, 0.0, "laplace"), f"proc-{i}")
        out.put("ok")
    except BudgetExceeded:
        out.put("refused")
    except Exception as e:  # pragma: no cover - reported to the parent
        out.put(repr(e))


def test_sixteen_processes_race(ledger: Accountant):
    ctx = mp.get_context("spawn")
    ready, start, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_race_worker, args=(str(ledger.path), i, ready, start, out)) for i in range(16)]
    for p in procs:
        p.start()
    # every process has imported dpdist and opened the ledger (16 spawned interpreters on 2 loaded
    # cores can take a minute), then all charge at once
    for _ in procs:
        ready.get(timeout=600)
    start.set()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert sorted(results) == ["ok"] * 10 + ["refused"] * 6, results
    s = ledger.status("ds")
    assert s.epsilon_spent == pytest.approx(1.0) and s.releases == 10


_CHILD = r"""
import sys, time
from pathlib import Path
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss
C = lambda e, d, m: Charge(PrivacyLoss.approx(e, d), m)
path, mode, flag = sys.argv[1], sys.argv[2], Path(sys.argv[3])
acc = Accountant(path)
if mode == "pause":
    def hook():
        flag.write_text("inside")
        time.sleep(120)
    from dpdist.privacy.ledger import queries
    real = queries.insert_release
    def paused(con, release):
        real(con, release)
        hook()
    queries.insert_release = paused  # the fault-injection seam: inside the transaction, after the insert
    acc.charge("ds", C(0.3, 1e-7, "laplace"), "killed")
elif mode == "compute":  # killed while the release computes, after its charge committed
    def compute():
        flag.write_text("computing")
        time.sleep(120)
        return "never"
    acc.release("ds", C(0.3, 1e-7, "laplace"), "computing", compute, {"what": "a test"})
else:
    flag.write_text("started")
    i = 0
    while True:
        acc.charge("ds", C(1e-6, 0.0, "laplace"), f"{mode}-{i}")
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


def _integrity(path: Path | str) -> None:
    if isinstance(path, str):  # PostgreSQL: every release whole and charged to a budget
        import psycopg

        with psycopg.connect(path) as con:
            orphans = con.execute(
                "SELECT count(*) FROM releases r LEFT JOIN budgets b ON b.dataset = r.dataset "
                "WHERE b.dataset IS NULL OR r.loss IS NULL OR r.params IS NULL"
            ).fetchone()[0]
        assert orphans == 0
        return
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_sigkill_inside_the_transaction_leaves_no_charge(tmp_path: Path, ledger: Accountant):
    ledger.charge("ds", C(0.1, 0.0, "laplace"), "before")
    proc = _run_child(tmp_path, ledger, "pause")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _integrity(ledger.path)
    s = ledger.status("ds")
    assert (s.epsilon_spent, s.delta_spent, s.releases) == (0.1, 0.0, 1)
    assert [r.key for r in ledger.history("ds")] == ["before"]
    # the ledger is usable at once: the killed writer's lock is gone
    ledger.charge("ds", C(0.3, 1e-7, "laplace"), "killed")
    assert ledger.status("ds").epsilon_spent == pytest.approx(0.4)


def test_sigkill_while_a_release_computes_leaves_its_charge_and_a_retry_finishes_it_once(
    tmp_path: Path, ledger: Accountant
):
    """Killed between the charge's commit and the result's: the charge is there, whole, with no result
    (nothing left the process); a retry under the key computes under that same charge -- not a second
    one -- and records the result, which every later call replays."""
    proc = _run_child(tmp_path, ledger, "compute")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _integrity(ledger.path)
    s = ledger.status("ds")
    assert (s.epsilon_spent, s.releases) == (pytest.approx(0.3), 1) and not ledger.recorded("ds", "computing")
    calls = []
    out = ledger.release(
        "ds", C(0.3, 1e-7, "laplace"), "computing", lambda: calls.append(1) or "done", {"what": "a test"}
    )
    assert out == "done" and calls == [1] and ledger.recorded("ds", "computing")
    assert ledger.release("ds", C(0.3, 1e-7, "laplace"), "computing", lambda: "again", {"what": "a test"}) == "done"
    s = ledger.status("ds")
    assert (s.epsilon_spent, s.releases) == (pytest.approx(0.3), 1)


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


# ------------------------------------------------------------------ v2: tight, names, keys


def test_release_first_charges_its_follower_in_its_own_transaction(ledger: Accountant):
    """A release and the charge of the one that follows it, computed from its result, as one plan: refused
    whole if the first with the planned follower does not fit; else the follower's charge is made with the
    first's result (its own release then finds it and spends nothing more); a follower that does not fit at
    its actual charge is left to its own release to refuse; a first charged before replays."""
    drawn: list[int] = []

    def count() -> int:
        drawn.append(1)
        return 41

    def follower(epsilon: float):
        return lambda result: (C(epsilon + result / 1e6, 0.0, "model"), {"n": result})

    with pytest.raises(BudgetExceeded):  # 0.3 + the planned 0.8 > 1: nothing charged, nothing drawn
        ledger.release_first(
            "ds", (C(0.3, 0.0, "count"), "a/count", count, {}), C(0.8, 0.0, "model"), ("a", follower(0.5))
        )
    assert ledger.history("ds") == [] and drawn == []
    first = (C(0.3, 0.0, "count"), "b/count", count, {})
    assert ledger.release_first("ds", first, C(0.5, 0.0, "model"), ("b", follower(0.5))) == 41
    assert [(r.key, r.epsilon) for r in ledger.history("ds")] == [("b/count", 0.3), ("b", 0.5 + 41 / 1e6)]
    charge, params = follower(0.5)(41)
    assert ledger.release("ds", charge, "b", lambda: 7, params) == 7  # its charge was made: nothing more spent
    assert ledger.status("ds").releases == 2
    assert ledger.release_first("ds", first, C(0.5, 0.0, "model"), ("b", follower(0.5))) == 41 and drawn == [1]
    # planned 0.05 + 0.1 fits, the actual 0.3 does not: the first is released, the follower left uncharged
    assert (
        ledger.release_first(
            "ds", (C(0.05, 0.0, "count"), "c/count", count, {}), C(0.1, 0.0, "model"), ("c", follower(0.3))
        )
        == 41
    )
    assert [r.key for r in ledger.history("ds")] == ["b/count", "b", "c/count"]

    def fails() -> int:
        raise ValueError("secret 41")

    # a first that fails is recorded as its failure (its charge stands), its follower not charged
    with pytest.raises(SolverFailure, match="computation failed") as raised:
        ledger.release_first(
            "ds", (C(0.01, 0.0, "count"), "d/count", fails, {}), C(0.01, 0.0, "model"), ("d", follower(0))
        )
    assert "secret" not in str(raised.value)
    assert [r.key for r in ledger.history("ds")] == ["b/count", "b", "c/count", "d/count"]


def test_key_reused_with_other_parameters_is_a_conflict(ledger: Accountant):
    charge = C(0.2, 0.0, "frank_wolfe/fast-dp-fw")
    ledger.release("ds", charge, "model", lambda: [1], {"lam": 50, "iters": 100})
    assert ledger.release("ds", charge, "model", lambda: [2], {"lam": 50, "iters": 100}) == [1]  # a replay
    with pytest.raises(ReleaseKeyConflict, match="other parameters"):
        ledger.release("ds", charge, "model", lambda: [3], {"lam": 10, "iters": 100})  # same epsilon, other lambda
    assert ledger.status("ds").releases == 1


def test_status_composes_tightly_and_keeps_the_basic_total(tmp_path: Path):
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 3.0, 1e-6)
    step = PrivacyLoss.bounded_range(0.05, 100, delta=1e-6)  # 100 exponential mechanisms at 0.05
    for i in range(4):
        acc.charge("ds", Charge(step, "em"), f"fit-{i}")
    s = acc.status("ds")
    assert s.epsilon_basic == pytest.approx(4 * step.epsilon)
    assert s.epsilon_spent < s.epsilon_basic  # rho adds up: 4 fits cost far less than 4 times one
    # Renyi composition at the order the budget fixes, converted at half its delta (dpdist.privacy.filter)
    alpha = PrivacyFilter.for_budget(3.0, 1e-6).order
    rho = 400 * 0.05**2 / 8
    assert s.epsilon_spent == pytest.approx(
        rho * alpha + math.log(1 - 1 / alpha) - math.log(5e-7 * alpha) / (alpha - 1)
    )
    assert s.epsilon_spent >= PrivacyLoss.bounded_range(0.05, 400, delta=1e-6).epsilon  # not the best order's figure
    # charges are refused on the tight total, not the basic one
    assert s.epsilon_basic > 3.0 > s.epsilon_spent
    hist = acc.history("ds")
    assert hist[0].privacy_loss.rho == pytest.approx(100 * 0.05**2 / 8)
    d = hist[0].to_dict("name")
    assert d["form"] == "zcdp" and d["dataset"] == "name" and "ds" not in str(d)


def test_names_are_public_and_random_and_split_keys_secret(tmp_path: Path):
    acc = Accountant(tmp_path / "l.sqlite")
    a = acc.init_budget("hash-a", 1.0, 0.0)
    b = acc.init_budget("hash-b", 1.0, 0.0, name="my-study")
    assert a.name.startswith("ds-") and b.name == "my-study"
    assert "hash-a" not in str(a.to_dict()) and a.to_dict()["dataset"] == a.name
    assert acc.resolve("my-study") == "hash-b" and acc.resolve(a.name) == "hash-a"
    assert len(acc.split_key("hash-a")) == 32 and acc.split_key("hash-a") != acc.split_key("hash-b")
    assert acc.init_budget("hash-a", 1.0, 0.0).name == a.name  # idempotent, same name
    with pytest.raises(ParameterError, match="already used"):
        acc.init_budget("hash-c", 1.0, 0.0, name="my-study")
    with pytest.raises(UnknownDataset):
        acc.resolve("ds-00000000")


def test_check_refuses_before_any_work_and_charges_nothing(ledger: Accountant):
    ledger.check("ds", C(0.5, 0.0, "a"), C(0.5, 0.0, "b"))
    with pytest.raises(BudgetExceeded):
        ledger.check("ds", C(0.6, 0.0, "a"), C(0.5, 0.0, "b"))
    assert ledger.status("ds").releases == 0


def test_a_v1_ledger_is_migrated_in_place_and_loses_nothing(tmp_path: Path):
    import shutil

    src = Path(__file__).resolve().parents[1] / "fixtures" / "v1" / "ledger.sqlite"
    path = tmp_path / "old.sqlite"
    shutil.copy(src, path)
    con = sqlite3.connect(path)
    before_budgets = con.execute(
        "SELECT dataset, epsilon_total, delta_total, created FROM budgets ORDER BY dataset"
    ).fetchall()
    before = con.execute(
        "SELECT dataset, key, time, mechanism, epsilon, delta, result FROM releases ORDER BY id"
    ).fetchall()
    assert con.execute("PRAGMA user_version").fetchone()[0] == 1
    con.close()
    acc, con = migrated(path)
    assert (
        con.execute("SELECT dataset, epsilon_total, delta_total, created FROM budgets ORDER BY dataset").fetchall()
        == before_budgets
    )
    assert (
        con.execute("SELECT dataset, key, time, mechanism, epsilon, delta, result FROM releases ORDER BY id").fetchall()
        == before
    )
    con.close()
    ds = "985f982fd027394973c67cc158c911c75f6c854db32ee05f95afb7c6e01896b1"
    s = acc.status(ds)
    assert (s.epsilon_spent, s.epsilon_basic, s.releases) == (1.75, 1.75, 3)  # old charges keep their (eps, delta)
    assert [r.result is not None for r in acc.history(ds)] == [True, True, False]
    assert json.loads(acc.history(ds)[0].result) == [1, 4, 7]
    assert len({st.name for st in acc.datasets()}) == 2 and len(acc.split_key(ds)) == 32
    # a replay of an old key with its old (eps, delta) works; other parameters conflict as before
    assert acc.release(ds, C(0.5, 0.0, "dp_sis/canonical_topk"), "select-1", lambda: [0]) == [1, 4, 7]
    with pytest.raises(ReleaseKeyConflict):
        acc.charge(ds, C(0.6, 0.0, "dp_sis/canonical_topk"), "select-1")
    # and new releases compose with the old ones
    acc.charge(ds, Charge(PrivacyLoss.pure(0.25), "new"), "new-1")
    assert acc.status(ds).epsilon_spent == pytest.approx(2.0)
    Accountant(path)  # opening again is a no-op


def test_an_interrupted_migration_changes_nothing(tmp_path: Path, monkeypatch):
    import shutil

    src = Path(__file__).resolve().parents[1] / "fixtures" / "v1" / "ledger.sqlite"
    path = tmp_path / "old.sqlite"
    shutil.copy(src, path)

    def boom(con):
        con.execute("ALTER TABLE budgets ADD COLUMN name TEXT")
        raise RuntimeError("killed mid-migration")

    monkeypatch.setattr("dpdist.privacy.ledger.schema.migrate_v1", boom)
    with pytest.raises(RuntimeError):
        Accountant(path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 1
    assert "name" not in [r[1] for r in con.execute("PRAGMA table_info(budgets)")]
    con.close()
    monkeypatch.undo()
    assert Accountant(path).status("legacy-name").epsilon_spent == 0.5


def test_a_v2_ledger_is_upgraded_to_v5_keeping_every_row(tmp_path: Path):

    path = tmp_path / "v2.sqlite"
    Accountant(path).init_budget("ds", 1.0, 1e-6)
    Accountant(path).release("ds", C(0.2, 0.0, "laplace"), "r", lambda: [1.0])
    before = write_as_schema(path, 2)  # no links table, no filter or covered column
    acc, con = migrated(path)
    after = con.execute("SELECT * FROM releases").fetchall(), con.execute("SELECT * FROM budgets").fetchall()
    assert [row[:-1] for row in after[0]] == before[0] and [row[-1] for row in after[0]] == [1]
    assert [row[:-1] for row in after[1]] == before[1]
    assert [row[-1] for row in after[1]] == [PrivacyFilter.for_budget(1.0, 1e-6).to_json()]
    con.close()
    assert acc.status("ds").epsilon_spent == pytest.approx(0.2)


def test_a_v3_ledger_gets_its_filters_and_the_stored_filter_is_the_one_used(tmp_path: Path):
    path = tmp_path / "v3.sqlite"
    Accountant(path).init_budget("ds", 2.0, 1e-6)
    Accountant(path).init_budget("pure", 1.0, 0.0)
    write_as_schema(path, 3)  # no filter column (nor covered)
    acc, con = migrated(path)
    stored = dict(con.execute("SELECT dataset, filter FROM budgets").fetchall())
    assert stored == {
        "ds": PrivacyFilter.for_budget(2.0, 1e-6).to_json(),
        "pure": PrivacyFilter.for_budget(1.0, 0).to_json(),
    }
    assert json.loads(stored["pure"])["order"] is None
    con.close()
    loss = [PrivacyLoss.gaussian(8.0, 1e-7)] * 3  # deltas 3e-7 > 1e-6 / 4: Renyi composition at the order
    for i, one in enumerate(loss):
        acc.charge("ds", Charge(one, "g"), f"g{i}")
    assert acc.status("ds").epsilon_spent == pytest.approx(PrivacyFilter.for_budget(2.0, 1e-6).spent(loss)[0])
    # the order is read from the ledger, not recomputed: a budget keeps its filter whatever a later grid says
    con = sqlite3.connect(path)
    con.execute("UPDATE budgets SET filter = ? WHERE dataset = 'ds'", (PrivacyFilter(2.0, 1e-6, 64.0).to_json(),))
    con.commit()
    con.close()
    assert acc.status("ds").epsilon_spent == pytest.approx(PrivacyFilter(2.0, 1e-6, 64.0).spent(loss)[0])
    assert PrivacyFilter(2.0, 1e-6, 64.0).spent(loss)[0] > 1.05 * PrivacyFilter.for_budget(2.0, 1e-6).spent(loss)[0]


def test_a_split_halfs_legacy_budget_is_linked_to_its_source(tmp_path: Path):
    """Before 4cadcda a half could have a budget of its own content: its releases are the source's
    records' and count toward the source's budget once the half is used."""
    from types import SimpleNamespace

    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("half-own", 1.0, 1e-6)
    acc.release("half-own", C(0.7, 0.0, "laplace"), "old", lambda: [1.0])  # charged to the half's own content
    half = SimpleNamespace(dataset_id="half-own", budget_id="source")
    with pytest.raises(UnknownDataset):  # the source needs a budget of its own first
        acc.budget_of(half)
    acc.init_budget("source", 1.0, 1e-6)
    assert acc.status("source").epsilon_spent == 0
    assert acc.budget_of(half) == "source" and acc.budget_of(half) == "source"  # linked once
    assert acc.status("source").epsilon_spent == pytest.approx(0.7)
    assert [r.key for r in acc.history("source")] == ["old"]
    with pytest.raises(BudgetExceeded):  # 0.7 + 0.5 > 1: the half's old spend counts
        acc.release("source", C(0.5, 0.0, "laplace"), "new", lambda: [2.0])
    assert acc.status("half-own").epsilon_spent == pytest.approx(0.7)  # nothing moved or lost
    whole = SimpleNamespace(dataset_id="source", budget_id="source")
    assert acc.budget_of(whole) == "source"


def test_an_interrupted_v3_migration_changes_nothing_and_later_schemas_are_refused(tmp_path: Path, monkeypatch):
    path = tmp_path / "v3.sqlite"
    Accountant(path).init_budget("a", 1.0, 1e-6)
    Accountant(path).init_budget("b", 2.0, 1e-6)
    _, before = write_as_schema(path, 3)
    calls = []

    def for_budget(eps, delta):  # killed at the second budget
        calls.append(eps)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return PrivacyFilter(eps, delta, 16.0)

    monkeypatch.setattr(PrivacyFilter, "for_budget", staticmethod(for_budget))
    with pytest.raises(KeyboardInterrupt):
        Accountant(path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 3
    assert con.execute("SELECT * FROM budgets").fetchall() == before
    con.execute("PRAGMA user_version = 9")  # a later dpdist's ledger: refused, not misread
    con.commit()
    con.close()
    with pytest.raises(ParameterError, match="schema version 9"):
        Accountant(path)


def test_a_v6_ledger_is_upgraded_with_each_budgets_state_and_keeps_every_row(tmp_path: Path):
    path = tmp_path / "v6.sqlite"
    acc = Accountant(path)
    acc.init_budget("ds", 3.0, 1e-6, name="study")
    acc.init_budget("half-own", 1.0, 1e-6)
    acc.release("half-own", Charge(PrivacyLoss.pure(0.2), "l"), "old", lambda: [1.0])
    acc.budget_of(SimpleNamespace(dataset_id="half-own", budget_id="ds"))
    for i in range(12):
        acc.charge("ds", Charge(PrivacyLoss.gaussian(8.0, 1e-8), "g", covered=i != 3), f"g{i}")
    before = {s.dataset: s for s in acc.datasets()}
    rows = write_as_schema(path, 6)  # no composed state, no index on (dataset, id)
    acc, con = migrated(path)
    assert (
        con.execute("SELECT * FROM releases ORDER BY id").fetchall(),
        con.execute("SELECT * FROM budgets").fetchall(),
    ) == rows
    assert con.execute("SELECT count(*) FROM composed").fetchone()[0] == 2
    con.close()
    assert {s.dataset: s for s in acc.datasets()} == before
    assert all(v.equal for v in acc.verify()) and acc.status("ds").uncovered == 1


def test_a_v4_ledger_gets_the_covered_mark_and_uncovered_releases_are_shown(tmp_path: Path):
    path = tmp_path / "v4.sqlite"
    Accountant(path).init_budget("ds", 2.0, 1e-6)
    Accountant(path).release("ds", C(0.2, 0.0, "laplace"), "old", lambda: [1.0])
    before, _ = write_as_schema(path, 4)  # no covered column
    acc, con = migrated(path)
    assert [row[:-1] for row in con.execute("SELECT * FROM releases").fetchall()] == before
    con.close()
    assert [r.covered for r in acc.history("ds")] == [True] and acc.status("ds").uncovered == 0
    outside = Charge(PrivacyLoss.pure(0.3), "bss/top-r", covered=False)
    acc.release("ds", outside, "guarded", lambda: [2])
    assert [r.to_dict("n")["covered"] for r in acc.history("ds")] == [True, False]
    status = acc.status("ds").to_dict()
    assert status["uncovered"] == 1 and "1 release(s) ran outside the guarantee" in spend_text(status)
    assert acc.release("ds", outside, "guarded", lambda: [3]) == [2]  # replayed under its key, mark kept


def test_a_budget_past_its_filter_shows_null_and_says_why(tmp_path: Path):
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 1.0, 1e-5)
    con = sqlite3.connect(acc.path)  # an approximate release an earlier rule admitted: 5e-6 > 1e-5 / 4
    con.execute(
        "INSERT INTO releases (dataset, key, time, mechanism, epsilon, delta, loss) VALUES "
        "('ds', 'old', '2026-01-01', 'op', 0.1, 5e-6, ?)",
        (PrivacyLoss.approx(0.1, 5e-6).to_json(),),
    )
    con.commit()
    con.close()
    d = acc.status("ds").to_dict()
    assert d["epsilon_spent"] is None and d["filter"]["delta_basic"] == 2.5e-6
    json.dumps(d, allow_nan=False)  # valid JSON
    with pytest.raises(BudgetExceeded, match="deltas do not fit the filter"):
        acc.charge("ds", C(0.1, 0.0, "laplace"), "new")
    con = sqlite3.connect(acc.path)
    con.execute("UPDATE budgets SET filter = NULL")
    con.commit()
    con.close()
    with pytest.raises(ParameterError, match="no privacy filter recorded"):
        acc.status("ds")


def test_a_ledger_on_a_disk_that_refuses_is_unavailable_at_once_and_a_machine_failure(tmp_path, monkeypatch) -> None:
    """SQLite's disk errors (here SQLITE_IOERR from the WAL switch, as on a full disk) are not
    waited out like a lock, and come as ``LedgerUnavailable`` naming the ledger: an ``OSError``,
    the machine's failure (a release's ``compute`` meeting one is not recorded as its outcome)."""
    import sqlite3

    from dpdist.exceptions import LedgerUnavailable
    from dpdist.privacy.accountant import machine_failure

    acc = Accountant(tmp_path / "l.sqlite", timeout=30)
    real_connect = sqlite3.connect

    class Refusing:
        def __init__(self, con):
            self.con = con

        def execute(self, sql, *args):
            if sql.startswith("PRAGMA journal_mode"):
                e = sqlite3.OperationalError("disk I/O error")
                e.sqlite_errorcode, e.sqlite_errorname = sqlite3.SQLITE_IOERR, "SQLITE_IOERR"
                raise e
            return self.con.execute(sql, *args)

        def close(self):
            self.con.close()

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: Refusing(real_connect(*a, **k)))
    start = time.monotonic()
    with pytest.raises(
        LedgerUnavailable, match=f"ledger {tmp_path / 'l.sqlite'} could not be read or written: disk I/O error"
    ) as info:
        acc.datasets()
    assert time.monotonic() - start < 5  # not the 30 s a held lock is waited for
    assert machine_failure(info.value) and isinstance(info.value, OSError)


_REFUSED_RESULT = r"""
import json, resource, sys
from dpdist.exceptions import SolverFailure
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss

acc, size = Accountant(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]),) * 2)  # (SIGXFSZ: Python ignores it)
calls, out = [], {}
def compute():  # a result whose size is the output's: here the first draw is large
    calls.append(1)
    return {"values": [0.5] * (size if len(calls) == 1 else 1)}
for attempt in range(2):
    try:
        out[attempt] = acc.release("ds", Charge(PrivacyLoss.approx(0.1, 0.0), "laplace"), "r", compute)
    except SolverFailure as e:
        out[attempt] = str(e).split(" [")[0]  # (the rest says the outcome is recorded)
print(json.dumps({"calls": len(calls), "out": out}))
"""


def test_a_result_the_ledgers_disk_refuses_is_recorded_as_a_failure_never_drawn_again(ledger: Accountant) -> None:
    """Whether a full disk takes a release's result depends on its size, so on the output: a retry
    that drew again would publish the draws that fit. The disk refusing the result (here a file-size
    limit past the ledger's WAL: a 10 MB result refused, SQLite rolling the transaction back by
    itself, the fixed-size failure record taken) makes the release's outcome a recorded failure,
    replayed by every retry without calling ``compute``."""
    wal = Path(str(ledger.path) + "-wal")
    limit = max(wal.stat().st_size if wal.exists() else 0, ledger.path.stat().st_size) + (256 << 10)
    res = subprocess.run(
        [sys.executable, "-c", _REFUSED_RESULT, str(ledger.path), "2000000", str(limit)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    message = "the release's result could not be written to the ledger (its disk refused it): nothing was released"
    assert got == {"calls": 1, "out": {"0": message, "1": message}}
    (record,) = ledger.history("ds")
    assert record.key == "r" and record.epsilon == 0.1  # the charge stands
    # the same release with room on the disk is drawn once and recorded (the refusal was the limit's)
    res = subprocess.run(
        [sys.executable, "-c", _REFUSED_RESULT, str(ledger.path), "10", str(1 << 30)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert json.loads(res.stdout) == {"calls": 0, "out": {"0": message, "1": message}}  # replayed: never drawn again


def test_a_refusal_caused_by_delta_says_so(tmp_path):
    """Issue 56: a model at the budget's whole delta after a count was refused, and the message did not say
    that delta was the cause (its epsilons alone fit: 0.1 + 0.9 <= 1)."""
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("a" * 64, 1.0, 1e-6, name="x")
    acc.release("a" * 64, Charge(PrivacyLoss.laplace(0.1), "count/laplace"), "c", lambda: 1)
    with pytest.raises(BudgetExceeded, match="delta is the cause: with it the releases' deltas add to 1e-06"):
        acc.check("a" * 64, Charge(PrivacyLoss.zcdp(0.02, 1e-6), "m"))
    with pytest.raises(BudgetExceeded) as refused:  # the epsilons alone pass the total: not delta's doing
        acc.check("a" * 64, Charge(PrivacyLoss.zcdp(0.03, 1e-6), "m"))
    assert "delta is the cause" not in str(refused.value)
    acc.check("a" * 64, Charge(PrivacyLoss.zcdp(0.012, 2e-7), "m"))  # within a quarter of the delta: the sum fits
