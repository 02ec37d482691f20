"""What only the PostgreSQL ledger has: its URL and credentials, TLS, retries, a server that is down,
and the copy of an SQLite ledger into it (tests/privacy/test_accountant.py runs the rest on both)."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from dpdist.exceptions import BudgetExceeded, LedgerUnavailable, ParameterError, SolverFailure, UnknownDataset
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.ledger.migrate import migrate
from dpdist.privacy.ledger.postgres import connection_parameters
from dpdist.privacy.loss import Charge, PrivacyLoss


def C(epsilon: float, mechanism: str = "laplace") -> Charge:
    return Charge(PrivacyLoss.approx(epsilon, 0.0), mechanism)


def test_a_password_in_the_url_is_refused_and_tls_is_preferred():
    with pytest.raises(ParameterError, match="pgpass") as err:
        Accountant("postgresql://alice:s3cret@db.example/ledger")
    assert "s3cret" not in str(err.value)
    params = connection_parameters("postgresql://alice@db.example/ledger?passfile=/home/alice/.pgpass")
    assert params["sslmode"] == "prefer" and params["passfile"] == "/home/alice/.pgpass"
    assert connection_parameters("postgresql://alice@db/l?sslmode=verify-full")["sslmode"] == "verify-full"
    assert connection_parameters("postgresql:///ledger?service=team")["service"] == "team"


def test_a_tls_key_password_in_the_url_is_refused_and_never_shown():
    for url in ("postgresql://alice@db.example/ledger?sslpassword=k3ysecret", "host=db sslpassword=k3ysecret"):
        with pytest.raises(ParameterError, match="holds a password") as err:
            connection_parameters(url)
        assert "k3ysecret" not in str(err.value)


_DOCS = Path(__file__).resolve().parents[2] / "docs" / "team-ledger.md"


@pytest.fixture
def analyst_url(postgres_ledger_url):
    """The ledger as a role with exactly the analysts' grants of docs/team-ledger.md (the owner made the tables)."""
    import re
    import secrets
    from urllib.parse import parse_qs, urlsplit

    Accountant(postgres_ledger_url)  # the owner: `dpdist ledger init`
    schema = parse_qs(urlsplit(postgres_ledger_url).query)["options"][0].split("=", 1)[1]
    role = f"analysts_{secrets.token_hex(4)}"
    grants = re.findall(r"^(GRANT [^;]+ TO analysts);", _DOCS.read_text(), flags=re.M)
    assert any("ON SCHEMA" in g for g in grants) and any("ON budgets" in g for g in grants)
    with psycopg.connect(**connection_parameters(postgres_ledger_url), autocommit=True) as con:
        try:
            con.execute(f"CREATE ROLE {role} NOLOGIN")
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("the test server's role may not create roles (scripts/postgres-throwaway.sh grants it)")
        con.execute(f"GRANT {role} TO current_user")
        for grant in grants:
            con.execute(grant.replace("SCHEMA public", f'SCHEMA "{schema}"').replace("TO analysts", f"TO {role}"))
    try:
        yield f"{postgres_ledger_url}%20-crole%3D{role}"
    finally:
        with psycopg.connect(**connection_parameters(postgres_ledger_url), autocommit=True) as con:
            con.execute(f"DROP OWNED BY {role}")
            con.execute(f"DROP ROLE {role}")


def test_the_documented_analysts_role_charges_and_cannot_change_a_budget_or_a_release(analyst_url):
    from types import SimpleNamespace

    acc = Accountant(analyst_url)
    acc.init_budget("ds", 1.0, 0.0)
    acc.init_budget("half-own", 1.0, 0.0)
    acc.charge("half-own", C(0.2), "old")
    assert acc.budget_of(SimpleNamespace(dataset_id="half-own", budget_id="ds")) == "ds"
    assert acc.release("ds", C(0.3), "r", lambda: [1.5]) == [1.5]
    acc.charge("ds", C(0.1), "pending")
    with pytest.raises(BudgetExceeded):
        acc.charge("ds", C(0.5), "too-much")  # 0.2 (linked) + 0.3 + 0.1 spent
    with psycopg.connect(**connection_parameters(analyst_url), autocommit=True) as con:
        for sql in (
            "UPDATE budgets SET epsilon_total = 100",
            "UPDATE releases SET result = NULL WHERE key = 'r'",  # cleared, to draw again under its charge
            "UPDATE releases SET result = '[2.0]' WHERE key = 'r'",
            "UPDATE releases SET epsilon = 0.001 WHERE key = 'pending'",
            "DELETE FROM releases",
            "DELETE FROM links",
            "UPDATE composed SET epsilon = '0'",  # a budget's composed state lowered: spent again
            "UPDATE composed SET releases = 0, last_id = 0",
            "UPDATE composed SET filter = 'x'",
            "DELETE FROM composed",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                con.execute(sql)
    assert acc.release("ds", C(0.3), "r", FailingCompute()) == [1.5]
    assert acc.status("ds").epsilon_spent == pytest.approx(0.6)


class FailingCompute:
    def __call__(self):
        raise AssertionError("a recorded release is replayed, never computed again")


def test_the_connection_takes_tls_when_the_server_offers_it(postgres_ledger_url):
    Accountant(postgres_ledger_url)
    with psycopg.connect(**connection_parameters(postgres_ledger_url)) as con:
        offered = con.execute("SHOW ssl").fetchone()[0] == "on"
        used = con.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()[0]
    assert used == offered


def test_a_server_that_is_down_releases_nothing(postgres_ledger_url, monkeypatch):
    acc = Accountant(postgres_ledger_url, timeout=5)
    acc.init_budget("ds", 1.0, 0.0)
    with pytest.raises(LedgerUnavailable, match="could not be read or written") as err:
        Accountant("postgresql://dpdist@127.0.0.1:1/dpdist", timeout=5)
    assert isinstance(err.value, OSError)
    # the accountant's server gone (its address now a closed port): the release computes nothing
    monkeypatch.setattr(acc._ledger, "conninfo", "host=127.0.0.1 port=1 dbname=dpdist user=dpdist connect_timeout=2")
    calls = []
    with pytest.raises(LedgerUnavailable):
        acc.release("ds", C(0.1), "r", lambda: calls.append(1))
    assert calls == []
    monkeypatch.undo()
    assert acc.status("ds").releases == 0


def test_a_serialization_failure_is_retried_and_never_draws_twice(postgres_ledger_url, monkeypatch):
    acc = Accountant(postgres_ledger_url)
    acc.init_budget("ds", 1.0, 0.0)
    real, aborted = Accountant._charge, []

    def abort_once(self, con, *args):
        out = real(self, con, *args)  # the insert made, then the server aborts the transaction
        if not aborted:
            aborted.append(1)
            raise psycopg.errors.SerializationFailure("could not serialize access")
        return out

    monkeypatch.setattr(Accountant, "_charge", abort_once)
    draws = []
    assert acc.release("ds", C(0.3), "r", lambda: draws.append(1) or [len(draws)]) == [1]
    assert aborted == [1] and draws == [1]
    assert acc.status("ds").releases == 1 and acc.status("ds").epsilon_spent == pytest.approx(0.3)


def test_another_programs_database_and_a_missing_ledger(postgres_ledger_url):
    with pytest.raises(UnknownDataset, match="no ledger"):
        Accountant(postgres_ledger_url, create=False)
    with psycopg.connect(**connection_parameters(postgres_ledger_url)) as con:
        con.execute("CREATE TABLE budgets (x INTEGER)")
    with pytest.raises(ParameterError, match="another program's PostgreSQL database"):
        Accountant(postgres_ledger_url)


def _sqlite_ledger(path: Path) -> Accountant:
    from types import SimpleNamespace

    acc = Accountant(path)
    acc.init_budget("ds", 10.0, 1e-6, name="study")
    acc.init_budget("half-own", 1.0, 0.0)
    acc.release("half-own", C(0.2), "old", lambda: [1.0])
    acc.budget_of(SimpleNamespace(dataset_id="half-own", budget_id="ds"))
    acc.release("ds", Charge(PrivacyLoss.gaussian(4.0, 1e-7), "gaussian"), "g", lambda: {"coef": [0.1, 1 / 3]})
    acc.charge("ds", C(0.05, "em"), "interrupted")  # charged, no outcome recorded
    acc.release("ds", Charge(PrivacyLoss.pure(0.3), "bss/top-r", covered=False), "guarded", lambda: [2])
    return acc


def test_migrate_copies_every_record_and_refuses_a_nonempty_target(tmp_path: Path, postgres_ledger_url):
    src = _sqlite_ledger(tmp_path / "l.sqlite")
    with pytest.raises(SolverFailure):  # a failure is recorded as the release's outcome
        src.release("ds", C(0.1), "failed", lambda: 1 / 0)
    copied = migrate(src.path, postgres_ledger_url)
    assert copied.to_dict() == {"budgets": 2, "links": 1, "releases": 5, "verified": True}
    dst = Accountant(postgres_ledger_url)
    assert [s.to_dict() for s in dst.datasets()] == [s.to_dict() for s in src.datasets()]
    for ds in ("ds", "half-own"):
        assert dst.history(ds) == src.history(ds) and dst.split_key(ds) == src.split_key(ds)
        assert dst.status(ds) == src.status(ds)
    # the copy is a ledger: replays, conflicts and new charges behave as on the source
    assert dst.release("ds", Charge(PrivacyLoss.gaussian(4.0, 1e-7), "gaussian"), "g", lambda: 0) == {
        "coef": [0.1, 1 / 3]
    }
    dst.charge("ds", C(0.1), "new")
    assert dst.history("ds")[-1].key == "new"
    with pytest.raises(ParameterError, match="was moved to"):  # the source is marked moved
        migrate(src.path, postgres_ledger_url)
    with pytest.raises(ParameterError, match="already holds records"):
        migrate(_sqlite_ledger(tmp_path / "other.sqlite").path, postgres_ledger_url)
    with pytest.raises(ParameterError, match="PostgreSQL URL"):
        migrate(src.path, str(tmp_path / "other.sqlite"))
    with pytest.raises(BudgetExceeded):
        dst.charge("ds", C(50.0), "too-much")


def test_migrate_rolls_back_a_copy_that_reads_back_differently(tmp_path: Path, postgres_ledger_url, monkeypatch):
    src = _sqlite_ledger(tmp_path / "l.sqlite")
    import dpdist.privacy.ledger.migrate as m

    real = m._copy

    def lossy(con, rows):
        real(con, {**rows, "releases": rows["releases"][:-1]})  # one release lost on the way

    monkeypatch.setattr(m, "_copy", lossy)
    with pytest.raises(ParameterError, match="nothing was committed"):
        migrate(src.path, postgres_ledger_url)
    monkeypatch.undo()
    with sqlite3.connect(src.path) as con:
        assert con.execute("SELECT count(*) FROM releases").fetchone()[0] == 4
    assert migrate(src.path, postgres_ledger_url).releases == 4  # the target was left empty


def test_the_ledger_command_inits_and_migrates(tmp_path: Path, postgres_ledger_url, capsys):
    import json

    from dpdist.cli import main

    src = _sqlite_ledger(tmp_path / "l.sqlite")
    assert main(["ledger", "init", "--ledger", postgres_ledger_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ledger": postgres_ledger_url, "backend": "postgresql", "budgets": 0}
    assert main(["budget", "show", "--ledger", postgres_ledger_url, "--json"]) == 0  # a URL: the server's ledger
    assert json.loads(capsys.readouterr().out)["datasets"] == []
    code = main(["ledger", "migrate", "--from", str(src.path), "--to", postgres_ledger_url])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "2 budget(s), 1 link(s), 4 release(s)" in out.out and "read back identical" in out.out
    assert main(["budget", "show", "--ledger", postgres_ledger_url, "--json"]) == 0
    assert {d["dataset"] for d in json.loads(capsys.readouterr().out)["datasets"]} == {"study", src.name("half-own")}
    other = _sqlite_ledger(tmp_path / "other.sqlite")
    assert main(["ledger", "migrate", "--from", str(other.path), "--to", postgres_ledger_url]) == 2  # not empty
    assert "already holds records" in capsys.readouterr().err
    assert main(["ledger", "migrate", "--from", str(src.path), "--to", "postgresql://u:pw@127.0.0.1/x"]) == 2
    err = capsys.readouterr().err
    assert "holds a password" in err and "pw@" not in err


def test_dpdist_ledger_may_name_the_server(postgres_ledger_url, monkeypatch, capsys):
    """``$DPDIST_LEDGER`` set to a PostgreSQL URL is the ledger every command uses when none is named."""
    import json

    from dpdist.cli import main
    from dpdist.privacy.accountant import default_ledger

    monkeypatch.setenv("DPDIST_LEDGER", postgres_ledger_url)
    assert default_ledger() == postgres_ledger_url
    assert main(["ledger", "init", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ledger"] == postgres_ledger_url and out["backend"] == "postgresql"


_RACER = r"""
import socket, sys, time
from pathlib import Path
from dpdist.exceptions import BudgetExceeded
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss
url, i, start, server_port = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
try:  # in a network namespace of its own the server's loopback port is out of reach
    socket.create_connection(("127.0.0.1", server_port), timeout=2).close()
    print("reach tcp", flush=True)
except OSError:
    print("reach none", flush=True)
acc = Accountant(url)
acc.status("ds")
print("ready", flush=True)
while not start.exists():
    time.sleep(0.005)
try:
    acc.charge("ds", Charge(PrivacyLoss.approx(0.1, 0.0), "laplace"), f"proc-{i}")
    print("ok", flush=True)
except BudgetExceeded:
    print("refused", flush=True)
"""


def test_sixteen_processes_in_two_network_namespaces_never_overspend(postgres_ledger_url, tmp_path: Path):
    """Half the racers in this network namespace (TCP on loopback), half each in a new one (``unshare
    --net``: no route to the server's port; they reach it through its Unix socket only): exactly
    floor(budget / charge) = 10 charges succeed, whatever the machine each client comes from."""
    import os
    import shutil
    import subprocess
    import sys
    from urllib.parse import urlsplit

    sockets = os.environ.get("DPDIST_TEST_POSTGRES_DIR")
    if not sockets or shutil.which("unshare") is None or subprocess.run(["unshare", "--net", "true"]).returncode:
        pytest.skip("needs unshare --net (root) and the test server's Unix socket directory")
    parts = urlsplit(postgres_ledger_url)
    port = parts.port
    # the same database and schema through the socket (local connections: the server's own trust rule)
    socket_url = f"postgresql://dpdist@/{parts.path.lstrip('/')}?host={sockets}&port={port}&" + "&".join(
        q for q in parts.query.split("&") if not q.startswith("passfile=")
    )
    Accountant(postgres_ledger_url).init_budget("ds", 1.0, 1e-6)
    start = tmp_path / "start"
    procs = []
    for i in range(16):
        isolated = i % 2 == 1
        argv = [sys.executable, "-c", _RACER, socket_url if isolated else postgres_ledger_url, str(i), str(start)]
        argv.append(str(port))
        argv = (["unshare", "--net"] if isolated else []) + argv
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        reach = [(p.stdout.readline().split() or ["crashed"])[-1] for p in procs]  # type: ignore[union-attr]
        assert reach == ["tcp", "none"] * 8  # two network namespaces: only the first can reach the TCP port
        for p in procs:  # every client has opened the ledger (16 interpreters on 2 cores can take a while)
            assert p.stdout.readline().strip() == "ready", p.stderr.read()  # type: ignore[union-attr]
        start.touch()
        results = [p.communicate(timeout=300)[0].strip() for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert sorted(results) == ["ok"] * 10 + ["refused"] * 6, results
    s = Accountant(postgres_ledger_url).status("ds")
    assert s.epsilon_spent == pytest.approx(1.0) and s.releases == 10


# ------------------------------------------------------------ a server that cannot be reached


def _connection_attempts(monkeypatch) -> list[str]:
    """Every connection attempt psycopg makes from here on (the pool's too), by its conninfo."""
    attempts: list[str] = []
    real = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]

    def counted(cls, conninfo="", **kwargs):
        attempts.append(conninfo)
        return real(cls, conninfo, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(counted))
    monkeypatch.setattr(psycopg, "connect", psycopg.Connection.connect)  # (its module-level alias)
    return attempts


@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("postgresql://dpdist@127.0.0.1:1/dpdist", "Connection refused"),
        ("postgresql://dpdist@no-such-host.invalid/dpdist", "no-such-host.invalid"),
    ],
)
def test_a_server_that_cannot_be_reached_is_named_at_once(url: str, cause: str, monkeypatch):
    import time

    attempts = _connection_attempts(monkeypatch)
    start = time.monotonic()
    with pytest.raises(LedgerUnavailable) as err:
        Accountant(url)
    assert time.monotonic() - start < 15
    assert cause in str(err.value) and "pool" not in str(err.value)
    assert len(attempts) == 1  # one attempt, not the pool's retries


def test_a_wrong_password_is_tried_once_and_named(postgres_ledger_url, tmp_path: Path, monkeypatch):
    import re
    import time

    wrong = tmp_path / "pgpass"
    wrong.write_text("*:*:*:*:not-the-password\n")
    wrong.chmod(0o600)
    url = re.sub(r"passfile=[^&]*", f"passfile={wrong}", postgres_ledger_url)
    attempts = _connection_attempts(monkeypatch)
    start = time.monotonic()
    with pytest.raises(LedgerUnavailable, match="password authentication failed") as err:
        Accountant(url)
    assert time.monotonic() - start < 15 and len(attempts) == 1
    assert "not-the-password" not in str(err.value)


def test_a_bad_sslmode_is_bad_input_naming_it(postgres_ledger_url, capsys):
    from dpdist.cli import main

    url = f"{postgres_ledger_url}&sslmode=requir"
    with pytest.raises(ParameterError, match="sslmode='requir'"):
        Accountant(url)
    assert main(["budget", "show", "--ledger", url]) == 2
    assert "sslmode='requir' is none libpq reads" in capsys.readouterr().err


@pytest.fixture
def own_server():
    """A PostgreSQL server of this test's own (scripts/postgres-throwaway.sh), to be stopped while used."""
    import subprocess

    script = Path(__file__).resolve().parents[2] / "scripts" / "postgres-throwaway.sh"
    res = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True, check=False)
    env = dict(line.removeprefix("export ").split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    if res.returncode != 0 or "DPDIST_TEST_POSTGRES" not in env:
        pytest.skip(f"no throwaway PostgreSQL server: {(res.stderr.strip().splitlines() or ['?'])[-1]}")
    directory = env["DPDIST_TEST_POSTGRES_DIR"].strip("'")

    def stop() -> None:
        subprocess.run(["bash", str(script), "stop", directory], capture_output=True, check=False)

    try:
        yield env["DPDIST_TEST_POSTGRES"].strip("'"), stop
    finally:
        stop()


def test_a_server_that_goes_down_fails_each_call_in_seconds_naming_the_cause(own_server):
    """A running client's server stops: each call raises ``LedgerUnavailable`` within seconds (not
    after the ledger's 120 s timeout), naming why, and computes nothing."""
    import time

    url, stop = own_server
    acc = Accountant(url)  # the default timeout, 120 s
    acc.init_budget("ds", 1.0, 0.0)
    acc.charge("ds", C(0.1), "before")
    stop()
    calls: list[int] = []
    for call in (lambda: acc.status("ds"), lambda: acc.release("ds", C(0.1), "r", lambda: calls.append(1))):
        start = time.monotonic()
        with pytest.raises(LedgerUnavailable) as err:
            call()
        assert time.monotonic() - start < 20, "blocked on the pool"
        assert "Connection refused" in str(err.value) or "terminating connection" in str(err.value), str(err.value)
    assert calls == []


# ---------------------------------------------- a migration killed at any point (dpdist.privacy.ledger.moves)

# the child: a migration that SIGKILLs itself right after POINT
_KILLED = r"""
import os, signal, sys
import psycopg
import dpdist.privacy.ledger.migrate as m
from dpdist.privacy.ledger.postgres import PostgresLedger, connection_parameters
source, target, point = sys.argv[1:4]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if point == "the target's commit":  # however the code is arranged: the first write that leaves releases there
    real_write = PostgresLedger.write
    def write(self, body):
        out = real_write(self, body)
        with psycopg.connect(**connection_parameters(target)) as pg:
            if pg.execute("SELECT count(*) FROM releases").fetchone()[0]:
                die()
        return out
    PostgresLedger.write = write
else:  # a step of dpdist.privacy.ledger.migrate (its seams)
    real = getattr(m, point)
    def step(*args, **kwargs):
        out = real(*args, **kwargs)
        die()
        return out
    setattr(m, point, step)
m.migrate(source, target)
print("finished")
"""

# where the child dies, and which ledger takes charges then
POINTS = {
    "announce": "source",  # the source announced, nothing copied
    "_copy": "source",  # inside the target's copy transaction, before its commit
    "the target's commit": "target",  # the copy committed, the source not yet marked
    "copy_into": "target",  # (the same, at the step's seam)
    "mark_moved": "target",  # the source's mark written, its transaction not committed
}


def _takes_charges(location: Path | str, key: str) -> bool:
    try:
        Accountant(location).charge("ds", C(0.01), key)
    except (ParameterError, UnknownDataset):
        return False
    return True


@pytest.mark.parametrize("point", list(POINTS))
def test_a_migration_killed_at_any_point_leaves_one_ledger_taking_charges_and_a_rerun_finishes_it(
    point: str, tmp_path: Path, postgres_ledger_url: str
):
    src = _sqlite_ledger(tmp_path / "l.sqlite")
    res = subprocess.run(
        [sys.executable, "-c", _KILLED, str(src.path), postgres_ledger_url, point],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert res.returncode == -signal.SIGKILL, res.stderr
    taking = [
        name
        for name, location in (("source", src.path), ("target", postgres_ledger_url))
        if _takes_charges(location, f"after the kill, on the {name}")
    ]
    assert taking == [POINTS[point]]  # exactly one, never both

    copied = migrate(src.path, postgres_ledger_url)  # the same command again finishes the move
    assert (copied.budgets, copied.links, copied.releases) == (2, 1, 4 + taking.count("source"))
    with pytest.raises(ParameterError, match="was moved to"):
        Accountant(src.path).charge("ds", C(0.01), "after the rerun, on the source")
    dst = Accountant(postgres_ledger_url)
    dst.charge("ds", C(0.01), "after the rerun")
    on_target = [r.key for r in dst.history("ds")]
    on_source = [r.key for r in src.history("ds")]
    assert on_target[: len(on_source)] == on_source  # every record of the source, in its order
    assert on_target[len(on_source) :] == (["after the kill, on the target"] if taking == ["target"] else []) + [
        "after the rerun"
    ]
    assert dst.status("half-own") == src.status("half-own") and dst.split_key("ds") == src.split_key("ds")


def _another_schema(url: str) -> str:
    """A ledger URL on the server of ``url``, in a new empty schema."""
    import re
    import secrets

    import psycopg

    from dpdist.privacy.ledger.postgres import connection_parameters

    name = f"other_{secrets.token_hex(4)}"
    with psycopg.connect(**connection_parameters(url), autocommit=True) as con:
        con.execute(f'CREATE SCHEMA "{name}"')
    return re.sub(r"search_path%3D[^&%]*", f"search_path%3D{name}", url)


def test_a_source_announced_for_one_target_refuses_another(tmp_path: Path, postgres_ledger_url: str, monkeypatch):
    import dpdist.privacy.ledger.migrate as m

    src = _sqlite_ledger(tmp_path / "l.sqlite")

    def broken(*args, **kwargs):
        raise ParameterError("the target went away")

    monkeypatch.setattr(m, "copy_into", broken)
    with pytest.raises(ParameterError, match="went away"):
        migrate(src.path, postgres_ledger_url)
    monkeypatch.undo()
    other = _another_schema(postgres_ledger_url)
    with pytest.raises(ParameterError, match="is being moved to"):
        migrate(src.path, other)
    assert _takes_charges(src.path, "still the source's")  # nothing copied: the source keeps the budget
    assert migrate(src.path, postgres_ledger_url).releases == 5
