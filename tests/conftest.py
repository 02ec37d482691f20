"""Shared fixtures: the real data sets in ../shared/data (never downloaded at run time)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path | None:
    env = os.environ.get("DPDIST_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(REPO.parent / "shared" / "data")
    for c in candidates:
        if (c / "README.md").is_file():
            return c
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("../shared/data is not beside this checkout (set DPDIST_SHARED_DATA)")
    return path


@pytest.fixture
def file_size_limit():
    """``preexec_fn`` for a child whose kernel refuses every write past ``limit`` bytes of a file
    (RLIMIT_FSIZE: EFBIG, with SIGXFSZ ignored), as a full disk refuses (ENOSPC): the same path
    through dpdist, without a disk to fill."""

    def limited(limit: int):
        def limit_writes() -> None:
            import resource
            import signal

            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        return limit_writes

    return limited


@pytest.fixture(autouse=True)
def _restore_environment():
    """A test that runs the CLI in this process (which sets logging variables for its children)
    leaves os.environ as it found it, so later tests' subprocesses inherit nothing from it."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _experiments_without_a_ledger():
    """The tests fit private estimators on synthetic data with no ledger: an experiment's explicit
    opt-out (dpdist.unaccounted; test_guard.py checks that without it a fit refuses)."""
    from dpdist import unaccounted

    with unaccounted():
        yield
