"""What keeps a ledger's records from being spent twice: append-only releases, coarse release times,
a moved SQLite ledger that takes no more charges, and a result the ledger refuses recorded as a failure."""

from __future__ import annotations

import re
import secrets
import sqlite3
from datetime import UTC, date, datetime
from pathlib import Path

import psycopg
import pytest
from old_ledgers import migrated, write_as_schema

from dpdist.exceptions import ParameterError, SolverFailure
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.ledger.migrate import migrate
from dpdist.privacy.ledger.postgres import connection_parameters
from dpdist.privacy.ledger.sqlite import SQLiteLedger
from dpdist.privacy.loss import Charge, PrivacyLoss


def C(epsilon: float) -> Charge:
    return Charge(PrivacyLoss.approx(epsilon, 0.0), "laplace")


def never() -> list[float]:
    raise AssertionError("a recorded release is replayed, never computed again")


def test_a_sqlite_release_is_append_only(tmp_path: Path):
    """Clearing a recorded result would let its key draw again under the same charge: refused, as is
    any change of a release but its outcome's first write, and any delete."""
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 1.0, 0.0)
    assert acc.release("ds", C(0.3), "r", lambda: [1.5]) == [1.5]
    acc.charge("ds", C(0.1), "pending")
    con = sqlite3.connect(acc.path)
    for sql in (
        "UPDATE releases SET result = NULL WHERE key = 'r'",
        "UPDATE releases SET result = '[2.0]' WHERE key = 'r'",
        "UPDATE releases SET epsilon = 0.001 WHERE key = 'pending'",
        "UPDATE releases SET result = '[2.0]', time = 'x' WHERE key = 'pending'",
        "DELETE FROM releases WHERE key = 'pending'",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            con.execute(sql)
    con.close()
    assert acc.release("ds", C(0.3), "r", never) == [1.5]
    assert acc.release("ds", C(0.1), "pending", lambda: [0.5]) == [0.5]  # its outcome written once
    assert acc.status("ds").epsilon_spent == pytest.approx(0.4)


def test_a_v5_ledger_gets_the_guards_and_keeps_every_row(tmp_path: Path):
    path = tmp_path / "v5.sqlite"
    acc = Accountant(path)
    acc.init_budget("ds", 1.0, 0.0)
    acc.release("ds", C(0.2), "r", lambda: [1.0])
    before, _ = write_as_schema(path, 5)  # no triggers (nor schema 7's composed state)
    acc, con = migrated(path)
    assert con.execute("SELECT * FROM releases").fetchall() == before
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        con.execute("UPDATE releases SET result = NULL")
    con.close()
    assert acc.release("ds", C(0.2), "r", never) == [1.0]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_release_time_is_its_utc_date_only(backend: str, tmp_path: Path, request):
    """Two charges' exact times would bracket a private fit's duration: a new release keeps its date only."""
    location = request.getfixturevalue("postgres_ledger_url") if backend == "postgresql" else tmp_path / "l.sqlite"
    acc = Accountant(location)
    acc.init_budget("ds", 1.0, 0.0)
    acc.charge("ds", C(0.1), "a")
    acc.release("ds", C(0.1), "b", lambda: [1.0])
    today = datetime.now(UTC).date()
    for r in acc.history("ds"):
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", r.time) and abs((today - date.fromisoformat(r.time)).days) <= 1
    assert [r.key for r in acc.history("ds")] == ["a", "b"]  # ordered by id, never by time


def _another_ledger(url: str) -> str:
    """A ledger URL on the server of ``url``, in a new empty schema."""
    name = f"other_{secrets.token_hex(4)}"
    with psycopg.connect(**connection_parameters(url), autocommit=True) as con:
        con.execute(f'CREATE SCHEMA "{name}"')
    return re.sub(r"search_path%3D[^&%]*", f"search_path%3D{name}", url)


def test_a_migrated_sqlite_ledger_takes_no_more_charges(tmp_path: Path, postgres_ledger_url):
    """After ``dpdist ledger migrate`` the source would let one budget be spent twice: it refuses every
    charge, outcome and budget, naming the target; its records still read."""
    src = Accountant(tmp_path / "l.sqlite")
    src.init_budget("ds", 1.0, 0.0)
    src.release("ds", C(0.2), "r", lambda: [1.0])
    src.charge("ds", C(0.1), "pending")
    assert migrate(src.path, postgres_ledger_url).releases == 2
    for call in (
        lambda: src.charge("ds", C(0.1), "new"),
        lambda: src.release("ds", C(0.1), "new", lambda: [2.0]),
        lambda: src.release("ds", C(0.1), "pending", lambda: [2.0]),
        lambda: src.init_budget("other", 1.0, 0.0),
        lambda: migrate(src.path, _another_ledger(postgres_ledger_url)),  # an empty one: refused all the same
    ):
        with pytest.raises(ParameterError, match="was moved to postgresql://") as err:
            call()
        assert postgres_ledger_url in str(err.value)
    assert [r.key for r in src.history("ds")] == ["r", "pending"]
    assert src.status("ds").epsilon_spent == pytest.approx(0.3)
    assert Accountant(postgres_ledger_url).release("ds", C(0.1), "new", lambda: [2.0]) == [2.0]


def test_the_ledger_command_refuses_a_moved_ledger_with_exit_2(tmp_path: Path, postgres_ledger_url, capsys):
    from dpdist.cli import main

    src = Accountant(tmp_path / "l.sqlite")
    src.init_budget("ds", 1.0, 0.0, name="study")
    assert main(["ledger", "migrate", "--from", str(src.path), "--to", postgres_ledger_url]) == 0
    capsys.readouterr()
    assert main(["ledger", "migrate", "--from", str(src.path), "--to", postgres_ledger_url]) == 2
    assert "was moved to" in capsys.readouterr().err


def test_a_copy_the_target_refuses_names_the_table_only(tmp_path: Path, postgres_ledger_url):
    """A constraint's detail quotes the row (a dataset's content hash, private): only the table is named."""
    src = Accountant(tmp_path / "l.sqlite")
    src.init_budget("ds", 1.0, 0.0)
    orphan = "f" * 64  # a release whose budget is missing (foreign keys off, as a damaged file)
    con = sqlite3.connect(src.path)
    con.execute(
        "INSERT INTO releases (dataset, key, time, mechanism, epsilon, delta) "
        "VALUES (?, 'k', '2020-01-01', 'l', 0.1, 0)",
        (orphan,),
    )
    con.commit()
    con.close()
    with pytest.raises(ParameterError, match="table releases") as err:
        migrate(src.path, postgres_ledger_url)
    assert orphan not in str(err.value) and err.value.__cause__ is None and err.value.__suppress_context__
    src.charge("ds", C(0.1), "still-open")  # nothing was committed: the source is not marked moved
    with psycopg.connect(**connection_parameters(postgres_ledger_url)) as pg:
        assert pg.execute("SELECT count(*) FROM budgets").fetchone()[0] == 0


def _a_large_result_fails_once(acc: Accountant) -> None:
    """A large result (2,000 numbers) released twice under one key on a ledger that refuses to write it:
    a failure each time, the result drawn once (the failure recorded, then replayed)."""
    calls = []

    def compute():
        calls.append(1)
        return [0.5] * 2000

    for _ in range(2):
        with pytest.raises(SolverFailure, match="could not be written"):
            acc.release("ds", C(0.1), "r", compute)
    assert calls == [1]


def test_a_result_sqlite_refuses_as_too_big_is_a_recorded_failure(tmp_path: Path, monkeypatch):
    """SQLITE_TOOBIG (not a full disk) on writing a result also depends on its size: recorded as the
    release's failure, replayed, never drawn again."""
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 1.0, 0.0)
    real = SQLiteLedger._connect

    def limited(self):
        con = real(self)
        con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 4000)
        return con

    monkeypatch.setattr(SQLiteLedger, "_connect", limited)
    _a_large_result_fails_once(acc)
    assert acc.status("ds").releases == 1


def test_a_result_the_server_times_out_on_is_a_recorded_failure(postgres_ledger_url):
    """A statement timeout (SQLSTATE 57014) on writing a large result depends on its size too. The trigger
    cancels the large write as the server's statement_timeout would (the same SQLSTATE), with no clock in
    the test: a real 300 ms timeout also cancelled an ordinary statement on a loaded machine. So this checks
    the handling of the server's timeout error, not that a real timeout fires."""
    acc = Accountant(postgres_ledger_url)
    acc.init_budget("ds", 1.0, 0.0)
    with psycopg.connect(**connection_parameters(postgres_ledger_url), autocommit=True) as con:
        con.execute(
            "CREATE FUNCTION slow_large() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF length(NEW.result) > 1000 THEN RAISE EXCEPTION 'canceling statement due to statement timeout' "
            "USING ERRCODE = 'query_canceled'; END IF; RETURN NEW; END $$"
        )
        con.execute("CREATE TRIGGER slow_large BEFORE UPDATE ON releases FOR EACH ROW EXECUTE FUNCTION slow_large()")
    timed = Accountant(postgres_ledger_url)
    _a_large_result_fails_once(timed)
    assert timed.release("ds", C(0.1), "small", lambda: [1.0]) == [1.0]
