"""``dpdist.flows.runtime.prefect_api``: a temporary Prefect server that cannot start is one line (exit 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import PREFECT_HOME, temporary_settings

from dpdist.flows import runtime


@pytest.fixture
def no_server(monkeypatch, tmp_path):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with temporary_settings({PREFECT_HOME: tmp_path / "home"}):
        yield tmp_path / "home"


def test_a_home_on_a_full_disk_is_said_before_the_server_is_started(no_server: Path, monkeypatch) -> None:
    started = []
    monkeypatch.setattr(SubprocessASGIServer, "start", lambda self, timeout=None: started.append(1))
    real = shutil.disk_usage
    monkeypatch.setattr(runtime.shutil, "disk_usage", lambda p: real(p)._replace(free=3 << 20))
    with pytest.raises(
        runtime.PrefectServerUnavailable,
        match=rf"under PREFECT_HOME={no_server}, whose disk has 3 MiB free \(it needs 64 MiB\)",
    ):
        with runtime.prefect_api():
            pass
    assert started == []  # not 120 s of waiting for a server whose database cannot be written


def test_a_server_that_does_not_start_is_its_last_exception_in_one_line(no_server: Path, monkeypatch) -> None:
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
        "(sqlite3.OperationalError) disk I/O error); its home: PREFECT_HOME="
    )
    assert "\n" not in str(info.value)
