"""Each budget's composed state kept in the ledger (dpdist.privacy.ledger.composed): a charge reads it
instead of the history, it equals a full recomposition bit for bit, and the filter admits and refuses
exactly what a recomposition -- and the rule as it was before the state was kept -- would."""

from __future__ import annotations

import json
import math
import random
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from dpdist.exceptions import BudgetExceeded, ReleaseKeyConflict, SolverFailure
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.filter import PrivacyFilter, _conversion_offset, _rdp_at
from dpdist.privacy.loss import Charge, PrivacyLoss


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, tmp_path: Path) -> Path | str:
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_ledger_url")
    return tmp_path / "ledger.sqlite"


def _old_rule(pf: PrivacyFilter, losses: list[PrivacyLoss]) -> float:
    """The filter's figure as dpdist computed it before the state was kept: every release's parts
    composed at once in floating point, the sums by ``math.fsum``."""
    if not losses:
        return 0.0
    basic_delta = math.fsum(loss.delta for loss in losses)
    basic = math.fsum(loss.epsilon for loss in losses) if basic_delta <= pf.delta_basic else math.inf
    approx = [p for loss in losses for p in loss.parts if p[0] == "approx"]
    renyi = math.inf
    if pf.order is not None and math.fsum(p[2] for p in approx) <= pf.delta_approx:
        s = _rdp_at(losses, pf.order) + math.fsum(p[1] for p in approx)
        s = s if math.isfinite(s) else math.inf
        renyi = max(0.0, s + _conversion_offset(pf.order, pf.delta_conversion)) * (1.0 + 1e-12)
    return min(basic, renyi)


def _random_loss(rng: random.Random) -> PrivacyLoss:
    kind = rng.randrange(7)
    if kind == 0:
        return PrivacyLoss.pure(rng.uniform(0.02, 0.3))
    if kind == 1:
        return PrivacyLoss.bounded_range(rng.uniform(0.01, 0.1), count=rng.randint(1, 30), delta=1e-7)
    if kind == 2:
        return PrivacyLoss.laplace(rng.uniform(0.02, 0.2), count=rng.randint(1, 4))
    if kind == 3:
        return PrivacyLoss.gaussian(rng.uniform(2.0, 20.0), 1e-8, count=rng.randint(1, 3))
    if kind == 4:
        return PrivacyLoss.approx(rng.uniform(0.02, 0.3), rng.choice([0.0, 0.0, 1e-9, 4e-8]))
    if kind == 5:
        return PrivacyLoss.subsampled_gaussian(
            rng.uniform(1.0, 3.0), rng.choice([0.01, 0.05]), rng.randint(10, 60), 1e-8
        )
    return PrivacyLoss.compose(PrivacyLoss.pure(rng.uniform(0.01, 0.1)), PrivacyLoss.gaussian(rng.uniform(5, 20), 1e-8))


def _expect(acc: Accountant, dataset: str, losses: list[PrivacyLoss]) -> tuple[bool, float]:
    """Whether the filter admits ``losses`` after ``dataset``'s history, recomposed from scratch (and the
    old rule's figure)."""
    status = acc.status(dataset)
    pf = status.privacy_filter
    assert pf is not None
    history = [r.privacy_loss for r in acc.history(dataset)]
    return pf.admits(history + losses), _old_rule(pf, history + losses)


def test_the_kept_state_equals_a_recomposition_after_many_random_charges(location: Path | str):
    """Random charges to a Renyi budget, a pure one (delta 0: basic composition only) and a legacy
    split half's budget linked to the first (then charged directly too), with replays, key conflicts,
    failed and refused releases: every decision is the recomposition's and the old rule's, and after
    each step every budget's kept state equals its full recomposition."""
    rng = random.Random(20261128)
    acc = Accountant(location)
    acc.init_budget("renyi", 4.0, 1e-6, name="renyi")
    acc.init_budget("pure", 2.0, 0.0, name="pure")
    acc.init_budget("half-own", 1.5, 1e-6, name="half")
    keys: dict[str, list[tuple[str, PrivacyLoss]]] = {"renyi": [], "pure": [], "half-own": []}
    admitted = refused = 0
    for step in range(150):
        if step == 30:  # the half's legacy budget is linked: the source's state counts its releases from now on
            assert acc.budget_of(SimpleNamespace(dataset_id="half-own", budget_id="renyi")) == "renyi"
        dataset = rng.choice(["renyi", "renyi", "pure", "half-own"])
        action = rng.random()
        if action < 0.12 and keys[dataset]:  # a replay: the same key, the same loss -- nothing more spent
            key, loss = rng.choice(keys[dataset])
            before = acc.status(dataset)
            acc.charge(dataset, Charge(loss, "m"), key)
            assert acc.status(dataset) == before
        elif action < 0.18 and keys[dataset]:  # a key reused with another loss: refused, nothing spent
            key, _ = rng.choice(keys[dataset])
            with pytest.raises(ReleaseKeyConflict):
                acc.charge(dataset, Charge(PrivacyLoss.pure(0.011), "other"), key)
        else:
            loss = _random_loss(rng)
            key = f"{dataset}-{step}"
            admits, old = _expect(acc, dataset, [loss])
            assert admits == (old <= acc.status(dataset).epsilon_total)  # the old rule decides the same
            try:
                if action < 0.3:  # a release whose computation fails: its failure is its outcome, the charge stands
                    with pytest.raises(SolverFailure):
                        acc.release(dataset, Charge(loss, "m"), key, lambda: 1 / 0)
                else:
                    acc.release(dataset, Charge(loss, "m", covered=rng.random() > 0.1), key, lambda: [1.0])
            except BudgetExceeded:
                assert not admits
                refused += 1
            else:
                assert admits
                admitted += 1
                keys[dataset].append((key, loss))
        verdicts = acc.verify()
        assert [v.differences() for v in verdicts] == [[], [], []]
        for v in verdicts:  # the kept figure is the recomposed one, bit for bit
            s = acc.status(v.dataset)
            history = [r.privacy_loss for r in acc.history(v.dataset)]
            assert s.privacy_filter is not None
            assert (s.epsilon_spent, s.delta_spent) == s.privacy_filter.spent(history)
            assert s.epsilon_basic == math.fsum(loss.epsilon for loss in history) and s.releases == len(history)
            assert s.epsilon_spent == pytest.approx(_old_rule(s.privacy_filter, history), rel=1e-12, abs=1e-15)
    assert admitted > 30 and refused > 5  # both outcomes were exercised
    assert acc.status("renyi").epsilon_spent < acc.status("renyi").epsilon_basic  # the Renyi route was used


def test_a_charge_and_a_status_read_no_earlier_release(location: Path | str, monkeypatch):
    """The check of a charge reads its budget's kept state (one row, and the largest release id from an
    index), never the releases: its cost does not grow with the history."""
    acc = Accountant(location)
    acc.init_budget("ds", 100.0, 1e-6)
    for i in range(20):
        acc.charge("ds", Charge(PrivacyLoss.gaussian(10.0, 1e-8), "g"), f"k{i}")
    statements = _record_statements(location, monkeypatch)
    acc.charge("ds", Charge(PrivacyLoss.gaussian(10.0, 1e-8), "g"), "new")
    acc.status("ds")
    acc.check("ds", Charge(PrivacyLoss.pure(0.1), "l"))
    acc.datasets()
    reads = [s for s in statements if "from releases" in " ".join(s.lower().split())]
    assert reads, "nothing recorded"
    history_reads = [s for s in reads if "key =" not in s and "max(id)" not in s]
    assert history_reads == []


def _record_statements(location: Path | str, monkeypatch) -> list[str]:
    """Every SQL statement the ledger runs from here on."""
    statements: list[str] = []
    if isinstance(location, str):
        from dpdist.privacy.ledger import postgres

        real = postgres._Statements.execute

        def execute(self, sql, params=(), /):
            statements.append(sql)
            return real(self, sql, params)

        monkeypatch.setattr(postgres._Statements, "execute", execute)
    else:
        from dpdist.privacy.ledger.sqlite import SQLiteLedger

        connect = SQLiteLedger._connect

        def traced(self):
            con = connect(self)
            con.set_trace_callback(statements.append)
            return con

        monkeypatch.setattr(SQLiteLedger, "_connect", traced)
    return statements


def test_the_largest_release_id_is_read_from_an_index(tmp_path: Path):
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 1.0, 0.0)
    con = sqlite3.connect(acc.path)
    plan = " ".join(r[-1] for r in con.execute("EXPLAIN QUERY PLAN SELECT max(id) FROM releases WHERE dataset = 'ds'"))
    con.close()
    assert "releases_by_dataset" in plan and "SCAN" not in plan


def test_a_state_is_never_lowered_or_deleted_in_sqlite(tmp_path: Path):
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 1.0, 0.0)
    acc.charge("ds", Charge(PrivacyLoss.pure(0.5), "l"), "a")
    con = sqlite3.connect(acc.path)
    for sql in (
        "UPDATE composed SET releases = 0, last_id = 0",
        "UPDATE composed SET filter = 'x'",
        "DELETE FROM composed",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="only grows"):
            con.execute(sql)
    con.close()
    with pytest.raises(BudgetExceeded):
        acc.charge("ds", Charge(PrivacyLoss.pure(0.6), "l"), "b")


def test_releases_written_around_dpdist_are_counted_and_the_next_charge_stores_them(location: Path | str):
    """A release inserted without the state (an older dpdist still running against an upgraded ledger,
    or by hand) makes the state not current: it is recomposed, counted, and stored by the next charge."""
    acc = Accountant(location)
    acc.init_budget("ds", 1.0, 0.0)
    acc.charge("ds", Charge(PrivacyLoss.pure(0.3), "l"), "a")
    _insert_by_hand(location, "ds", "older-dpdist", PrivacyLoss.pure(0.4))
    assert acc.status("ds").epsilon_spent == pytest.approx(0.7) and acc.status("ds").releases == 2
    assert not acc.verify()[0].equal and acc.verify()[0].differences() == ["last_id", "releases", "epsilon"]
    with pytest.raises(BudgetExceeded):
        acc.charge("ds", Charge(PrivacyLoss.pure(0.4), "l"), "too-much")
    acc.charge("ds", Charge(PrivacyLoss.pure(0.2), "l"), "b")
    assert acc.verify()[0].equal and acc.status("ds").epsilon_spent == pytest.approx(0.9)


def _insert_by_hand(location: Path | str, dataset: str, key: str, loss: PrivacyLoss) -> None:
    sql = (
        "INSERT INTO releases (dataset, key, time, mechanism, epsilon, delta, loss, params) "
        "VALUES ({0}, {0}, '2026-01-01', 'by hand', {0}, {0}, {0}, 'x')"
    )
    values = (dataset, key, loss.epsilon, loss.delta, loss.to_json())
    if isinstance(location, str):
        import psycopg

        from dpdist.privacy.ledger.postgres import connection_parameters

        with psycopg.connect(**connection_parameters(location)) as con:
            con.execute(sql.format("%s"), values)
    else:
        con = sqlite3.connect(location)
        con.execute(sql.format("?"), values)
        con.commit()
        con.close()


def test_budget_verify_says_when_a_state_was_edited_by_hand(tmp_path: Path, capsys):
    from dpdist.cli import main

    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 1.0, 0.0, name="study")
    acc.charge("ds", Charge(PrivacyLoss.pure(0.5), "l"), "a")
    assert main(["budget", "verify", "--ledger", str(acc.path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["equal"] and out["budgets"] == [{"dataset": "study", "releases": 1, "equal": True, "differences": []}]
    con = sqlite3.connect(acc.path)  # the owner of the file drops the guard and lowers the state
    con.execute("DROP TRIGGER composed_only_grows")
    con.execute("UPDATE composed SET epsilon = '0.1'")
    con.commit()
    con.close()
    assert main(["budget", "verify", "--ledger", str(acc.path)]) == 1
    text = capsys.readouterr().out
    assert "study: 1 release(s); DIFFERS (epsilon)" in text and "edited by hand" in text
