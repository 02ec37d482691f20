"""``dpdist.flows.runtime.prefect_api``: a temporary Prefect server that cannot start is one line (exit 1); its
database is the run's own and goes with it; later runs start from an empty, migrated template."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_HOME, temporary_settings

from dpdist.flows import runtime


@pytest.fixture
def no_server(monkeypatch, tmp_path):
    """No server configured; the system's temporary directory is ``tmp_path / "tmp"`` (returned)."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_API_DATABASE_CONNECTION_URL", raising=False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(runtime.tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(SubprocessASGIServer, "_instances", {})  # Prefect's one server per port: a test's own
    with temporary_settings({PREFECT_HOME: tmp_path / "home"}):
        yield tmp_path / "tmp"


def test_a_full_disk_is_said_before_the_server_is_started(no_server: Path, monkeypatch) -> None:
    started = []
    monkeypatch.setattr(SubprocessASGIServer, "start", lambda self, timeout=None: started.append(1))
    real = shutil.disk_usage
    monkeypatch.setattr(runtime.shutil, "disk_usage", lambda p: real(p)._replace(free=3 << 20))
    with pytest.raises(
        runtime.PrefectServerUnavailable,
        match=rf"keeps its database in a directory under {no_server}, whose disk has 3 MiB free \(it needs 64 MiB\)",
    ):
        with runtime.prefect_api():
            pass
    assert started == []  # not 120 s of waiting for a server whose database cannot be written


def test_a_server_that_does_not_start_is_its_last_exception_in_one_line(
    no_server: Path, fake_migration, monkeypatch
) -> None:
    said = (
        "Timed out while attempting to connect to ephemeral Prefect API server. Ephemeral server process exited "
        'with code 1. stderr: Traceback (most recent call last):\n  File "x.py", line 1, in commit\n'
        "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) disk I/O error\n"
        "(Background on this error at: https://sqlalche.me/e/21/e3q8)\n"
        "10:18:11.718 | ERROR   | uvicorn.error - Application startup failed. Exiting.\n"
    )

    def fail(self, timeout=None):
        raise RuntimeError(said)

    monkeypatch.setattr(SubprocessASGIServer, "start", fail)
    with pytest.raises(runtime.PrefectServerUnavailable) as info:
        with runtime.prefect_api():
            pass
    assert str(info.value).startswith(
        "the temporary Prefect server did not start (sqlalchemy.exc.OperationalError: "
        "(sqlite3.OperationalError) disk I/O error); its database: " + str(no_server)
    )
    assert "\n" not in str(info.value)


def test_the_temporary_servers_database_is_the_runs_own_and_goes_with_it(
    no_server: Path, fake_migration, monkeypatch
) -> None:
    """Prefect stores task runs' start and end times (how long each private computation took): with the
    default run they are in a database of the run's own, in an owner-only directory, deleted at its end
    -- never in PREFECT_HOME's database, where a later server would show them."""
    monkeypatch.delenv("PREFECT_SERVER_ANALYTICS_ENABLED", raising=False)
    monkeypatch.delenv("DO_NOT_TRACK", raising=False)
    seen = {}

    def start(self, timeout=None):
        url = os.environ["PREFECT_API_DATABASE_CONNECTION_URL"]
        db = Path(url.removeprefix("sqlite+aiosqlite:///"))
        seen.update(
            db=db,
            mode=db.parent.stat().st_mode & 0o777,
            analytics=os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"],
            track=os.environ["DO_NOT_TRACK"],
        )
        with contextlib.closing(sqlite3.connect(db)) as con:  # what the server would store
            con.execute("INSERT INTO task_run VALUES ('1')")
            con.commit()
        self.running = True

    monkeypatch.setattr(SubprocessASGIServer, "start", start)
    monkeypatch.setattr(SubprocessASGIServer, "api_url", "http://127.0.0.1:1/api", raising=False)
    monkeypatch.setattr(SubprocessASGIServer, "stop", lambda self: None)
    with runtime.prefect_api():
        assert seen["db"].exists() and seen["db"].parent.parent == no_server and seen["mode"] == 0o700
        assert seen["analytics"] == "false" and seen["track"] == "1"  # no telemetry to Prefect, server or client
    assert not seen["db"].parent.exists()  # gone with the run
    for name in (
        "PREFECT_API_DATABASE_CONNECTION_URL",
        "PREFECT_API_URL",
        "PREFECT_SERVER_ANALYTICS_ENABLED",
        "DO_NOT_TRACK",
    ):
        assert name not in os.environ


def test_a_database_the_operator_names_is_kept(no_server: Path, monkeypatch) -> None:
    monkeypatch.setenv("PREFECT_API_DATABASE_CONNECTION_URL", "postgresql+asyncpg://prefect@db/prefect")
    used = []
    monkeypatch.setattr(
        SubprocessASGIServer,
        "start",
        lambda self, timeout=None: used.append(os.environ["PREFECT_API_DATABASE_CONNECTION_URL"]),
    )
    monkeypatch.setattr(SubprocessASGIServer, "api_url", "http://127.0.0.1:1/api", raising=False)
    monkeypatch.setattr(SubprocessASGIServer, "stop", lambda self: None)
    with runtime.prefect_api():
        pass
    assert used == ["postgresql+asyncpg://prefect@db/prefect"]
    assert os.environ["PREFECT_API_DATABASE_CONNECTION_URL"] == used[0]
    assert not runtime._template_path().exists()  # neither made nor used


def test_a_database_named_by_prefects_newer_setting_gets_no_template(no_server: Path, monkeypatch) -> None:
    monkeypatch.setenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", "postgresql+asyncpg://prefect@db/prefect")
    monkeypatch.setattr(SubprocessASGIServer, "start", lambda self, timeout=None: None)
    monkeypatch.setattr(SubprocessASGIServer, "api_url", "http://127.0.0.1:1/api", raising=False)
    monkeypatch.setattr(SubprocessASGIServer, "stop", lambda self: None)
    migrations = []
    monkeypatch.setattr(runtime.subprocess, "run", lambda *a, **kw: migrations.append(1))
    with runtime.prefect_api():
        pass
    assert migrations == [] and not runtime._template_path().exists()


def _fake_prefect_db(path: Path, table: str = "flow_run", rows: int = 0) -> None:
    """A stand-in for a migrated Prefect database, with ``rows`` rows in ``table``."""
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.executescript(
            "CREATE TABLE alembic_version (version_num TEXT); CREATE TABLE flow_run (id TEXT);"
            "CREATE TABLE task_run (id TEXT); CREATE TABLE log (message TEXT); CREATE TABLE events (id TEXT);"
        )
        con.execute("INSERT INTO alembic_version VALUES ('head')")
        con.executemany(f"INSERT INTO {table} VALUES (?)", [(str(i),) for i in range(rows)])
        con.commit()


@pytest.fixture
def fake_migration(monkeypatch) -> list[Path]:
    """Prefect's migrations replaced by a stand-in database; returns the databases they made."""
    made = []

    def run(cmd, env, **kw):
        db = Path(env["PREFECT_API_DATABASE_CONNECTION_URL"].removeprefix("sqlite+aiosqlite:///"))
        _fake_prefect_db(db)
        made.append(db)

    monkeypatch.setattr(runtime.subprocess, "run", run)
    return made


def test_a_later_run_starts_from_the_empty_template_and_no_run_reaches_it(no_server: Path, monkeypatch) -> None:
    """The first run migrates its database before its server starts (no server, nothing of the run) and
    keeps a copy in PREFECT_HOME; a later run starts from that copy; the template never holds a run."""
    from prefect import flow

    @flow
    def one() -> int:
        return 1

    template = runtime._template_path()
    migrations = []
    real_run = runtime.subprocess.run
    monkeypatch.setattr(runtime.subprocess, "run", lambda *a, **kw: migrations.append(1) or real_run(*a, **kw))
    kept = None
    for i in range(2):
        with runtime.prefect_api():
            db = Path(os.environ["PREFECT_API_DATABASE_CONNECTION_URL"].removeprefix("sqlite+aiosqlite:///"))
            assert runtime._is_empty_database(template)
            kept = template.stat().st_mtime_ns if i == 0 else kept
            assert one() == 1
            with contextlib.closing(sqlite3.connect(db)) as con:  # the run is in the run's own database
                assert con.execute("SELECT count(*) FROM flow_run").fetchone()[0] == 1
        assert runtime._is_empty_database(template) and template.stat().st_mode & 0o777 == 0o600
        assert not db.exists()
    assert migrations == [1]  # the second run copied the template
    assert template.stat().st_mtime_ns == kept  # and did not write it


@pytest.mark.parametrize(("table", "rows"), [("flow_run", 1), ("task_run", 1), ("log", 2), ("events", 1)])
def test_a_template_with_anything_of_a_run_is_replaced(no_server, fake_migration, tmp_path, table, rows) -> None:
    template = runtime._template_path()
    template.parent.mkdir(parents=True)
    _fake_prefect_db(template, table, rows)
    runtime._migrated_database(tmp_path / "run.db")
    assert fake_migration == [tmp_path / "run.db"]  # migrated afresh, not copied
    assert runtime._is_empty_database(tmp_path / "run.db") and runtime._is_empty_database(template)


def test_a_template_that_is_not_a_database_is_replaced(no_server, fake_migration, tmp_path) -> None:
    template = runtime._template_path()
    template.parent.mkdir(parents=True)
    template.write_bytes(b"not sqlite")
    runtime._migrated_database(tmp_path / "run.db")
    assert fake_migration and runtime._is_empty_database(template)


def test_without_a_writable_home_the_run_migrates_its_own_database(no_server, fake_migration, tmp_path) -> None:
    (tmp_path / "file").write_text("")
    with temporary_settings({PREFECT_HOME: tmp_path / "file" / "home"}):  # under a file: cannot be made
        runtime._migrated_database(tmp_path / "run.db")
        assert not runtime._template_path().exists()
    assert runtime._is_empty_database(tmp_path / "run.db")


def test_a_failed_migration_leaves_the_database_to_the_server(no_server, monkeypatch, tmp_path) -> None:
    def fail(cmd, env, **kw):
        Path(env["PREFECT_API_DATABASE_CONNECTION_URL"].removeprefix("sqlite+aiosqlite:///")).write_bytes(b"half")
        raise runtime.subprocess.CalledProcessError(1, cmd)

    monkeypatch.setattr(runtime.subprocess, "run", fail)
    runtime._migrated_database(tmp_path / "run.db")
    assert not (tmp_path / "run.db").exists() and not runtime._template_path().exists()
