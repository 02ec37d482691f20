"""The SQLite ledger: one file on a local disk, for one person on one machine (the default).

The file is in WAL mode with ``synchronous=FULL``:

* atomic: a transaction is ``BEGIN IMMEDIATE`` ... ``COMMIT``; a process killed in the middle
  leaves it wholly recorded or wholly absent;
* serialised: ``BEGIN IMMEDIATE`` takes the write lock before anything is read, so processes
  charging the same ledger at once can never overspend (the budget check and the charge are
  one transaction, :meth:`dpdist.privacy.accountant.Accountant.charge`);
* owner-only: the file (and its ``-wal``/``-shm``) is made readable by its owner alone;
* read-only for reading commands: a ledger opened to read only (``create=False``: ``budget show``,
  ``budget history``, ``models``) is opened with SQLite's ``mode=ro``, never made or re-moded, so a
  read-only ledger (a ``0444`` file, a read-only mount) reads and keeps its mode. A file no one can
  write with no WAL content left is read as ``immutable`` (no ``-shm`` is needed, none is made).

A file that is not an SQLite database, or a damaged one, is refused in one line naming it
(``ParameterError``: exit 2).

SQLite's own documentation says WAL mode does not work over a network filesystem (its index is
shared memory on one host) and that POSIX locks over NFS are unreliable: two processes on two hosts
could both pass the budget check, or corrupt the file. A ledger path on a network filesystem
(:mod:`dpdist.privacy.ledger.netfs`) is therefore refused, naming the filesystem and the two ways
out: a path on a local disk, or a PostgreSQL ledger (:mod:`dpdist.privacy.ledger.postgres`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from dpdist.exceptions import LedgerUnavailable, ParameterError, UnknownDataset
from dpdist.privacy.ledger import moves
from dpdist.privacy.ledger.connection import LedgerConnection
from dpdist.privacy.ledger.netfs import network_mount
from dpdist.privacy.ledger.schema import SCHEMA_VERSION, prepare
from dpdist.utils.files import private_sqlite

__all__ = ["SQLiteLedger", "network_filesystem_refusal"]

T = TypeVar("T")

# SQLite's primary codes for a disk, file or lock that refuses (not an error of the SQL)
_UNAVAILABLE = frozenset(
    {
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PERM,
        sqlite3.SQLITE_NOLFS,
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_PROTOCOL,
    }
)


def _busy(e: sqlite3.OperationalError) -> bool:
    """Whether ``e`` is another connection holding the lock (SQLITE_BUSY / SQLITE_LOCKED, or the WAL
    race SQLITE_PROTOCOL), which waiting clears -- not a full disk or an I/O error, which it does not."""
    code = getattr(e, "sqlite_errorcode", None)
    return (
        (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL)
        if code is not None
        else "locked" in str(e)
    )


def network_filesystem_refusal(path: Path) -> ParameterError | None:
    """The error refusing an SQLite ledger at ``path`` on a network filesystem (``None`` on a local one)."""
    mount = network_mount(path)
    if mount is None:
        return None
    return ParameterError(
        f"ledger {path} is on a network filesystem ({mount.fstype}, {mount.source or 'a remote share'} mounted "
        f"at {mount.point}): SQLite's locks and WAL mode are not safe there -- two processes on two hosts could "
        "both pass the budget check, or corrupt the file. Either keep the SQLite ledger on a local disk "
        "(--ledger /local/disk/ledger.sqlite, or DPDIST_LEDGER), or share one PostgreSQL ledger "
        "(--ledger postgresql://user@host/db; docs/team-ledger.md)"
    )


def _unwritable_without_wal(path: Path) -> bool:
    """Whether no process can write ``path`` (no write bit, or a read-only location) and no ``-wal``
    content is left beside it: then the file alone holds the ledger and reads as ``immutable``."""
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return False
    try:
        read_only_mount = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only_mount = False
    no_write_bit = not path.stat().st_mode & 0o222
    return read_only_mount or no_write_bit or not os.access(path.parent, os.W_OK)


class SQLiteLedger:
    """The SQLite backend of :class:`dpdist.privacy.accountant.Accountant` (a file at ``path``).

    Every call opens its own connection, so one ledger is safe to share between threads and
    processes. ``create=False`` opens an existing ledger only (``UnknownDataset`` if there is none), to
    read: its reads use read-only connections and nothing changes the file or its mode (an older
    dpdist's ledger is still upgraded, which needs it writable).
    """

    dialect = "sqlite"

    def __init__(self, path: Path, timeout: float, create: bool = True) -> None:
        self.path = path
        self.location = str(path)
        self.timeout = timeout
        self.read_only = not create
        refusal = network_filesystem_refusal(path)
        if refusal is not None:
            raise refusal
        if create:
            private_sqlite(path)  # owner-only ledger (and its -wal/-shm), whatever the umask
        elif not path.is_file():
            raise UnknownDataset(f"there is no ledger at {path} (nothing has been charged there yet)")
        self._immutable = self.read_only and _unwritable_without_wal(path)
        if not create and self.read(self.version) == SCHEMA_VERSION:
            return  # nothing to make or upgrade: the file is left as it is
        if not create and self.read(self.version) == 0 and not self.read(self.has_tables):
            raise UnknownDataset(f"there is no ledger at {path} (an empty file: nothing has been charged there)")
        self.write(lambda con: prepare(con, self))

    # ---------------------------------------------------------------- schema version

    def version(self, con: LedgerConnection) -> int:
        """The ledger's schema version (0: a new database)."""
        return int(con.execute("PRAGMA user_version").fetchone()[0])

    def set_version(self, con: LedgerConnection, version: int) -> None:
        con.execute(f"PRAGMA user_version = {int(version)}")

    def has_tables(self, con: LedgerConnection) -> bool:
        """Whether the database holds any table (a version-0 database with tables is another program's)."""
        return bool(con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])

    def lock_budget(self, con: LedgerConnection, dataset: str, *also: str) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` took the ledger's write lock before the transaction read anything."""

    def refuse_if_moved(self, con: LedgerConnection) -> None:
        """Refuse a write to a ledger copied to PostgreSQL (:mod:`dpdist.privacy.ledger.moves`: marked moved,
        or announced and its copy committed): a charge here would spend again a budget the copy also
        holds. ``ParameterError`` naming where the ledger went."""
        moves.refuse_if_moved(con, self.path)

    # ------------------------------------------------------------------ transactions

    def write(self, body: Callable[[LedgerConnection], T]) -> T:
        """``body`` in one ``BEGIN IMMEDIATE`` transaction (the write lock taken before any read)."""
        with self._transaction() as con:
            return body(con)

    def read(self, body: Callable[[LedgerConnection], T]) -> T:
        """``body`` on a connection of its own, outside a write transaction (a read-only one for a ledger
        opened to read)."""
        with self._errors():
            con = self._connect_read_only() if self.read_only else self._connect()
            try:
                return body(con)
            finally:
                con.close()

    def refused_by_size(self, e: BaseException) -> bool:
        """Whether ``e`` is the disk refusing what was written (full, or an I/O error): a refusal that
        can depend on the size of a release's result -- not a lock or a permission."""
        cause = getattr(e.__cause__, "sqlite_errorcode", None)
        return cause is not None and cause & 0xFF in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)

    def _connect_read_only(self) -> sqlite3.Connection:
        """A reading command's connection: SQLite's read-only mode, nothing written (module doc)."""
        flags = "mode=ro&immutable=1" if self._immutable else "mode=ro"
        con = sqlite3.connect(
            f"file:{quote(str(self.path))}?{flags}", uri=True, timeout=self.timeout, isolation_level=None
        )
        con.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        return con

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        try:
            con.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            deadline = time.monotonic() + self.timeout
            while True:  # switching to WAL needs a moment without other writers
                try:
                    mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                    break
                except sqlite3.OperationalError as e:
                    if not _busy(e) or time.monotonic() > deadline:  # a full disk does not clear by waiting
                        raise
                    time.sleep(0.01)
            if mode.lower() != "wal":
                raise ParameterError(f"ledger {self.path} could not be put in WAL mode (got {mode!r})")
            con.execute("PRAGMA synchronous = FULL")
            con.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            con.close()
            raise
        return con

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._errors():
            con = self._connect()
            try:
                con.execute("BEGIN IMMEDIATE")
                try:
                    yield con
                except BaseException:
                    if con.in_transaction:  # SQLite rolls back by itself on a full disk or an I/O error
                        con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")
            finally:
                con.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's errors as dpdist's, with the ledger's path: a disk or file that refuses (or a lock
        held past ``timeout``), ``LedgerUnavailable``; a file that is not a ledger is bad input
        (``ParameterError``)."""
        try:
            yield
        except sqlite3.DatabaseError as e:  # any other code (SQLITE_ERROR: an SQL bug of ours) keeps its traceback
            code = (getattr(e, "sqlite_errorcode", None) or 0) & 0xFF
            if code in _UNAVAILABLE:
                raise LedgerUnavailable(
                    f"ledger {self.path} could not be read or written: {e} (is its disk full or "
                    f"read-only, the file not permitted, or another process holding it?); this "
                    f"call released nothing, a charge it made stands"
                ) from e
            if code == sqlite3.SQLITE_NOTADB:
                raise ParameterError(
                    f"ledger {self.path} is not an SQLite database (a ledger is written by "
                    f"dpdist: pass its path, or a new path to start one)"
                ) from e
            if code == sqlite3.SQLITE_CORRUPT:
                raise ParameterError(
                    f"ledger {self.path} is damaged ({e}): dpdist changed nothing in it; restore it from a "
                    "backup (a ledger's records are what has been spent: never start a new one in its place)"
                ) from e
            raise
