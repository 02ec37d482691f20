"""Shared fixtures: the real data sets in ../shared/data (never downloaded at run time)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# numba's on-disk cache is not safe when several processes compile different signatures of one kernel at
# the same time (their cache files overwrite each other's: a later load ran another signature's code and
# the fast Frank-Wolfe kernel crashed, exit -11, in a parallel run). Each test process -- an xdist worker,
# and the commands and flows it starts, which inherit it -- keeps a cache of its own, set before numba loads.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # set by xdist before a worker reads this file
if _WORKER or "NUMBA_CACHE_DIR" not in os.environ:  # a worker's own, not the one it inherited
    _CACHE = f"dpdist-numba-{_WORKER or 'main'}-{os.getpid()}"
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), _CACHE)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The process's numba cache goes with it (a fresh one per run, as a fresh checkout has)."""
    import shutil

    cache = os.environ.get("NUMBA_CACHE_DIR", "")
    if os.path.basename(cache).startswith("dpdist-numba-") and cache.endswith(f"-{os.getpid()}"):
        shutil.rmtree(cache, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--dist loadgroup`` under pytest 9: pytest-xdist (3.8) marks a test of an ``xdist_group`` by
    appending ``@<group>`` to ``item._nodeid``, which pytest 9 no longer reads (a node id is built from
    ``item._id``), so the groups were spread over the test processes as single tests. The suffix is
    set where pytest 9 reads it; the tests of one group then run in one process, as README says."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        names = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")
        }
        if names and not item.nodeid.endswith("@" + "_".join(sorted(names))):
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(sorted(names))}")


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


def _postgres_schema(url: str, name: str) -> str:
    """``url`` with its own new schema ``name`` first on the search path (a fresh ledger per test)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f'CREATE SCHEMA "{name}"')
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{name}"


@pytest.fixture(scope="session")
def postgres_server():
    """The URL of a PostgreSQL server for the ledger's tests: ``$DPDIST_TEST_POSTGRES`` when one was
    started (``.ci/run``), else a throwaway cluster this session starts (scripts/postgres-throwaway.sh,
    Debian's binaries) and stops. Skips, saying why, where neither is possible."""
    import subprocess

    url = os.environ.get("DPDIST_TEST_POSTGRES")
    if url:
        yield url
        return
    res = subprocess.run(
        ["bash", str(REPO / "scripts" / "postgres-throwaway.sh"), "start"], capture_output=True, text=True, check=False
    )
    exports = dict(
        line.removeprefix("export ").split("=", 1) for line in res.stdout.splitlines() if line.startswith("export ")
    )
    if res.returncode != 0 or "DPDIST_TEST_POSTGRES" not in exports:
        why = (res.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"no PostgreSQL server for the ledger's PostgreSQL tests: {why}")
    directory = exports["DPDIST_TEST_POSTGRES_DIR"].strip("'")
    os.environ["DPDIST_TEST_POSTGRES_DIR"] = directory  # its Unix socket (tests from another network namespace)
    try:
        yield exports["DPDIST_TEST_POSTGRES"].strip("'")
    finally:
        os.environ.pop("DPDIST_TEST_POSTGRES_DIR", None)
        subprocess.run(["bash", str(REPO / "scripts" / "postgres-throwaway.sh"), "stop", directory], check=False)


@pytest.fixture
def postgres_ledger_url(postgres_server, request) -> str:
    """A ledger URL of its own on the test server (a new schema: nothing shared with other tests)."""
    import re
    import secrets

    stem = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40]
    # a PostgreSQL ledger's model artefacts: in the test's own directory, not ~/.dpdist/artefacts
    os.environ.setdefault("DPDIST_ARTEFACTS", str(request.getfixturevalue("tmp_path") / "artefacts"))
    return _postgres_schema(postgres_server, f"t_{stem}_{secrets.token_hex(4)}")
