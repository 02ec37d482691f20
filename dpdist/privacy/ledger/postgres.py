"""The PostgreSQL ledger: one ledger a team shares, from any number of machines.

A privacy budget belongs to a dataset, not to a person: several analysts and scheduled deployments
spend the same budget from different hosts, where an SQLite file on a shared filesystem is not safe
(:mod:`dpdist.privacy.ledger.sqlite`). The same tables and the same SQL as the SQLite ledger
(:mod:`dpdist.privacy.ledger.schema`), on a PostgreSQL server named by a URL
(``postgresql://user@host:port/db?...``: ``--ledger``, ``DPDIST_LEDGER``, ``ledger =`` in a run config).

* Serialised: the budget check and the charge are one transaction
  (:meth:`dpdist.privacy.accountant.Accountant.charge`) that first takes the advisory locks of the
  budget and of the budgets linked to it (:meth:`PostgresLedger.lock_budget`: no right on any table is
  needed), in read-committed mode; every other transaction is ``SERIALIZABLE``, and one the server
  aborts as a serialisation failure (or a deadlock) changed nothing and is run again, after a random
  back-off, until the ledger's ``timeout``. Claim: the charges of one budget run one after another,
  from any number of machines, and a retry never draws noise twice. Proof:
  [docs/proofs/ledger.md][proof-ledger-serialised].
* Atomic: a client killed in the middle of a transaction leaves it wholly absent (the server rolls
  back the transaction of a connection that drops); a committed charge is durable on the server.
* Credentials never in argv or logs: a password in the URL is refused; the password comes from a
  ``pgpass`` file (``?passfile=PATH``, else ``~/.pgpass``), a service file (``?service=NAME``) or the
  environment (``PGPASSWORD``), as libpq reads them. The connection uses TLS when the server offers
  it (``sslmode=prefer``, libpq's default, stated; ``?sslmode=verify-full`` and the other modes are
  honoured).
* Server down: a call that cannot reach the server raises ``LedgerUnavailable`` (an ``OSError``,
  the machine's failure) and releases nothing, because a release is computed only after its
  charge has committed. It fails fast and names the cause: the first use of a ledger in a process
  makes one connection attempt of its own (a refused port, an unknown host, a wrong password:
  libpq's own message, at once, the password tried once), and a call that finds no working
  connection within a few seconds (:data:`_WAIT`) asks the server once more, directly, instead of
  waiting out the pool's timeout.

Each process keeps one connection pool (:mod:`psycopg_pool`) per ledger URL.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
import psycopg_pool
from psycopg import IsolationLevel, errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dpdist.exceptions import LedgerUnavailable, ParameterError, UnknownDataset
from dpdist.privacy.ledger.connection import Cursor, LedgerConnection
from dpdist.privacy.ledger.schema import prepare

__all__ = ["PostgresLedger", "connection_parameters"]

T = TypeVar("T")

# serialises the schema's creation and upgrades between clients (any number the same on all of them)
_SETUP_LOCK = 0x6470646973740001
# what the server's SQLSTATE says when a write is refused for its size: a full disk, memory, a limit,
# a statement timeout (a larger result takes longer to write)
_SIZE_REFUSALS = frozenset({"53100", "53200", "54000", "57014"})
# libpq's keys whose value is a secret: never in a URL
_SECRETS = ("password", "sslpassword")
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# how long a call waits for a working pooled connection before it asks the server directly (a server
# that went down is then named at once; a pool that is only busy is waited for, up to the timeout)
_WAIT = 5.0

_pools: dict[tuple[int, str], psycopg_pool.ConnectionPool] = {}
_prepared: set[tuple[int, str]] = set()
_lock = threading.Lock()


def connection_parameters(url: str) -> dict[str, Any]:
    """libpq's parameters of a ledger URL, with ``sslmode=prefer`` unless the URL sets it.

    A password in the URL (``password``, or ``sslpassword``, the TLS key's) is refused, its value never
    shown: a URL is passed on command lines and written to configs and
    logs. The password comes from a pgpass file, a service file or ``PGPASSWORD`` instead.
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as e:
        raise ParameterError(f"the ledger URL is not a PostgreSQL connection URL: {str(e).splitlines()[0]}") from None
    secret = next((k for k in _SECRETS if params.get(k)), None)
    if secret is not None:
        raise ParameterError(
            f"the ledger URL holds a password ({secret}=), which would show in process lists, configs and logs: "
            "remove it and give it in a pgpass file (?passfile=PATH, or ~/.pgpass), a service file (?service=NAME), or "
            "PGPASSWORD in the ledger process's environment"
        )
    params.setdefault("sslmode", "prefer")
    if params["sslmode"] not in _SSLMODES:
        raise ParameterError(
            f"the ledger URL's sslmode={params['sslmode']!r} is none libpq reads: one of {', '.join(_SSLMODES)}"
        )
    params.setdefault("connect_timeout", "10")
    params.setdefault("application_name", "dpdist-ledger")
    return params


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.isolation_level = IsolationLevel.SERIALIZABLE


def _close_pools() -> None:
    for (pid, _), pool in list(_pools.items()):
        if pid == os.getpid():
            pool.close(timeout=5)


atexit.register(_close_pools)


def _budget_lock(dataset: str) -> int:
    """The advisory lock key of a dataset's budget: 64 bits of its SHA-256, signed as the server's
    ``bigint`` (two datasets sharing a key only wait on each other)."""
    return int.from_bytes(hashlib.sha256(b"dpdist-budget:" + dataset.encode()).digest()[:8], "big", signed=True)


class _Statements:
    """A psycopg connection that takes the ledger's statements (``?`` parameter markers, as SQLite's)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Cursor:
        return self._conn.execute(sql.replace("?", "%s"), tuple(params))


class PostgresLedger:
    """The PostgreSQL backend of :class:`dpdist.privacy.accountant.Accountant` (a server at ``url``).

    ``create=False`` opens an existing ledger only (``UnknownDataset`` if the database has none).
    """

    dialect = "postgresql"

    def __init__(self, url: str, timeout: float, create: bool = True) -> None:
        self.location = url
        self.timeout = timeout
        self.conninfo = make_conninfo("", **connection_parameters(url))
        key = (os.getpid(), self.conninfo)
        if key in _prepared:
            return
        self._setup(create)
        _prepared.add(key)

    def _setup(self, create: bool) -> None:
        """Create or upgrade the tables, one client at a time (an advisory lock; read committed, so the
        tables a client that held the lock first made are seen)."""

        def body(con: LedgerConnection) -> None:
            con.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            con.execute("SELECT pg_advisory_xact_lock(?)", (_SETUP_LOCK,))
            if not create and self.version(con) == 0:
                raise UnknownDataset(f"there is no ledger at {self.location} (nothing has been charged there yet)")
            prepare(con, self)

        self.write(body)

    # ---------------------------------------------------------------- schema version

    def version(self, con: LedgerConnection) -> int:
        """The ledger's schema version, kept in its table ``dpdist_ledger`` (0: none yet)."""
        if con.execute("SELECT to_regclass('dpdist_ledger')").fetchone()[0] is None:
            return 0
        return int(con.execute("SELECT max(version) FROM dpdist_ledger").fetchone()[0] or 0)

    def set_version(self, con: LedgerConnection, version: int) -> None:
        con.execute("CREATE TABLE IF NOT EXISTS dpdist_ledger (version INTEGER NOT NULL)")
        con.execute("DELETE FROM dpdist_ledger")
        con.execute("INSERT INTO dpdist_ledger (version) VALUES (?)", (int(version),))

    def has_tables(self, con: LedgerConnection) -> bool:
        """Whether the schema the connection uses holds any table (then, without a version, another program's)."""
        row = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchone()
        return bool(row[0])

    def lock_budget(self, con: LedgerConnection, dataset: str, *also: str) -> None:
        """Lock the budget of ``dataset`` (and of ``also``), the budgets linked to it and the budget it is
        linked to (whose composed state its charges change too) for this transaction (its first
        statement: the transaction is read committed from here, each later statement reading what was
        committed when it starts).

        Each budget's lock is a transaction-level advisory lock on a 64-bit key of its dataset
        (:func:`_budget_lock`), taken in sorted order: no right on any table is needed (``SELECT ...
        FOR UPDATE`` would need ``UPDATE`` on ``budgets``, which would let an analyst raise a total).
        After the locks are held the links are read again, and any budget linked meanwhile is locked
        too, until the set is stable: a link committed while this waited is never missed."""
        con.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        locked: set[str] = set()
        wanted = {dataset, *also}
        while wanted - locked:
            for name in sorted(wanted - locked):
                con.execute("SELECT pg_advisory_xact_lock(?)", (_budget_lock(name),))
                locked.add(name)
            marks = ", ".join("?" * len(locked))
            rows = con.execute(
                f"SELECT alias FROM links WHERE dataset IN ({marks}) "
                f"UNION SELECT dataset FROM links WHERE alias IN ({marks})",
                [*sorted(locked), *sorted(locked)],
            ).fetchall()
            wanted = locked | {str(r[0]) for r in rows}

    def refuse_if_moved(self, con: LedgerConnection) -> None:
        """Nothing to do: a PostgreSQL ledger is a migration's target, never its source."""

    # ------------------------------------------------------------------ transactions

    def write(self, body: Callable[[LedgerConnection], T]) -> T:
        """``body`` in one serializable transaction, run again after a serialisation failure."""
        deadline = time.monotonic() + self.timeout
        for attempt in range(1 << 30):
            try:
                with self._errors(), self._connection() as conn, conn.transaction():
                    return body(_Statements(conn))
            except (errors.SerializationFailure, errors.DeadlockDetected):
                if time.monotonic() > deadline:
                    raise LedgerUnavailable(
                        f"ledger {self.location}: the server kept aborting this call's transaction for "
                        f"concurrent ones past {self.timeout:g} s; this call released nothing, a charge it made stands"
                    ) from None
                time.sleep(random.uniform(0, min(0.25, 0.002 * 2 ** min(attempt, 8))))
        raise AssertionError("unreachable")

    def read(self, body: Callable[[LedgerConnection], T]) -> T:
        """``body`` in one serializable transaction (a consistent view of the budgets and releases)."""
        return self.write(body)

    def refused_by_size(self, e: BaseException) -> bool:
        """Whether ``e`` is the server refusing what was written for its size (a full disk, memory, a
        limit): a refusal that can depend on the size of a release's result."""
        return getattr(e.__cause__, "sqlstate", None) in _SIZE_REFUSALS

    def _pool(self) -> psycopg_pool.ConnectionPool:
        key = (os.getpid(), self.conninfo)  # a forked child makes its own pool
        with _lock:
            pool = _pools.get(key)
            if pool is None:
                self._reach()  # one attempt, its cause named (the pool would retry in the background)
                pool = psycopg_pool.ConnectionPool(
                    self.conninfo,
                    min_size=1,
                    max_size=4,
                    timeout=self.timeout,
                    configure=_configure,
                    check=psycopg_pool.ConnectionPool.check_connection,
                    name="dpdist-ledger",
                    open=False,
                )
                try:
                    pool.open(wait=True, timeout=min(self.timeout, 30.0))
                except psycopg_pool.PoolTimeout:
                    pool.close(timeout=0)
                    self._reach()  # gone since: its cause
                    raise LedgerUnavailable(
                        f"ledger {self.location}: no connection to the server opened within "
                        f"{min(self.timeout, 30.0):g} s; nothing was charged or released"
                    ) from None
                _pools[key] = pool
        return pool

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A working connection of the pool; the server asked directly (:meth:`_reach`) each time none
        comes within :data:`_WAIT`, so a server that went down is named in seconds, not at the timeout."""
        pool = self._pool()
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                conn = pool.getconn(timeout=max(0.1, min(_WAIT, deadline - time.monotonic())))
                break
            except psycopg_pool.PoolTimeout:
                self._reach()
                if time.monotonic() >= deadline:
                    raise LedgerUnavailable(
                        f"ledger {self.location}: no connection of this process's pool came free within "
                        f"{self.timeout:g} s; this call released nothing, a charge it made stands"
                    ) from None
        try:
            yield conn
        finally:
            pool.putconn(conn)

    def _reach(self) -> None:
        """Open and close one connection; ``LedgerUnavailable`` naming libpq's reason when it fails."""
        try:
            psycopg.connect(self.conninfo).close()
        except psycopg.Error as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise LedgerUnavailable(
                f"ledger {self.location} could not be read or written: {first} (the server could not be reached); "
                "this call released nothing, a charge it made stands"
            ) from None

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """The server's refusals as ``LedgerUnavailable`` (an ``OSError``: the machine's failure), naming
        the ledger; an error of the SQL (a bug of ours) keeps its traceback. Only the first line of the
        driver's message is shown (connection errors; the URL holds no password)."""
        try:
            yield
        except (errors.SerializationFailure, errors.DeadlockDetected):
            raise
        except (psycopg.OperationalError, errors.InsufficientPrivilege, errors.ReadOnlySqlTransaction) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise LedgerUnavailable(
                f"ledger {self.location} could not be read or written: {first} (is the server down or "
                f"unreachable, its disk full, or this role not permitted?); this call released nothing, "
                f"a charge it made stands"
            ) from e
