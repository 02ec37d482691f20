"""dpdist.flows.console: a run's console handler prints a full disk's failure in one line."""

from __future__ import annotations

import errno
import importlib
import io
import logging
import os
import sys

import pytest
from prefect.logging.configuration import DEFAULT_LOGGING_SETTINGS_PATH, load_logging_config

from dpdist.cli.run import _CONSOLE_HANDLER
from dpdist.exceptions import LedgerUnavailable, file_failure
from dpdist.flows.console import RunConsoleHandler


def _printed(exc: BaseException) -> str:
    handler = RunConsoleHandler(stream=io.StringIO())
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    try:
        raise exc
    except BaseException:
        record = logging.LogRecord(
            "prefect.task_runs",
            logging.ERROR,
            __file__,
            1,
            "Task run failed with exception: %r",
            (exc,),
            sys.exc_info(),
        )
    handler.emit(record)
    return handler.stream.getvalue()


def test_the_run_names_this_handler_as_prefects_console_handler(monkeypatch) -> None:
    monkeypatch.setenv(*_CONSOLE_HANDLER)
    config = load_logging_config(DEFAULT_LOGGING_SETTINGS_PATH)  # as Prefect loads it in each process
    module, _, name = config["handlers"]["console"]["class"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is RunConsoleHandler  # what dictConfig will build


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/o/stores/.s.tmp-1/_csc_buckets/17.bin"),
        OSError(errno.EROFS, os.strerror(errno.EROFS), "/data/stores/x"),
        OSError(errno.EROFS, os.strerror(errno.EROFS), "/o/stores/.s.tmp-1/_csc_buckets/3.bin"),
        LedgerUnavailable("ledger /l.sqlite could not be read or written: disk I/O error"),
    ],
)
def test_a_failure_of_the_machines_files_is_printed_without_its_traceback(exc) -> None:
    printed = _printed(exc)
    assert printed == f"ERROR Task run failed with exception: {type(exc).__name__}({file_failure(exc)!r})\n"
    assert "_csc_buckets" not in printed  # a file that ran out of space is not named: its name follows the data


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("a bug"),
        OSError(errno.ECONNRESET, "reset"),
        KeyError("k"),
        PermissionError(errno.EPERM, "Operation not permitted"),
    ],
)  # no file: a socket's, a kill's
def test_any_other_failure_keeps_its_traceback(exc) -> None:
    assert "Traceback (most recent call last)" in _printed(exc)


def test_a_refused_path_inside_a_store_is_named_up_to_the_store(tmp_path) -> None:
    """A file inside a store is named after the data (a chunk's number counts entries): the line names
    the store that holds it, or the store's temporary being written, and any other path whole."""
    import numpy as np

    from dpdist.data.store import write_store

    write_store(tmp_path / "s", np.eye(3), np.array([1.0, -1.0, 1.0]))
    chunk = next(p for p in (tmp_path / "s").rglob("*") if p.is_file() and p.name != "zarr.json")
    refused = [
        OSError(errno.EACCES, "Permission denied", str(chunk)),
        OSError(errno.EROFS, "Read-only file system", str(tmp_path / ".t.tmp-9f" / "X" / "c" / "17")),
        OSError(errno.EACCES, "Permission denied", str(tmp_path / "data.svm")),
    ]
    assert [file_failure(e) for e in refused] == [
        f"Permission denied: {tmp_path / 's'}",
        f"Read-only file system: {tmp_path / '.t.tmp-9f'}",
        f"Permission denied: {tmp_path / 'data.svm'}",
    ]
