"""Copying an SQLite ledger to a PostgreSQL one, every record kept and verified.

A team moving from one person's SQLite ledger to a shared PostgreSQL ledger must not lose a record:
a release forgotten in the copy is budget spent twice. :func:`migrate` copies every budget, link,
release (with its id, so the order of the history is kept) and budget's composed state in one
transaction on the target, reads the copy back inside that transaction and commits only if the
target holds the same number of rows of each table and the same SHA-256 digest of every row (every
column); it then reads the committed copy back once more. The target must hold no ledger records
yet. The digests are compared, never shown: a release's row holds the dataset's content hash, which
is private (so is an error of the copy: it names the table, never the server's detail, which can
quote a row).

The move is three commits (:mod:`.moves`): the source announced (:func:`announce`), the copy with the
move's token on the target (:func:`copy_into`), the source marked moved (:func:`mark_moved`, in the
transaction that holds the source's write lock from before its rows are read). At every point between
them exactly one of the two ledgers takes charges, and a run killed anywhere is finished by running it
again. The URLs hold no password (one is refused). These three functions are the points a test kills
a migration at.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from dpdist.exceptions import ParameterError
from dpdist.privacy.ledger import composed, moves
from dpdist.privacy.ledger.backend import parse_location
from dpdist.privacy.ledger.connection import LedgerConnection
from dpdist.privacy.ledger.postgres import PostgresLedger
from dpdist.privacy.ledger.sqlite import SQLiteLedger

__all__ = ["Copied", "announce", "copy_into", "digest", "mark_moved", "migrate"]

# every column of each table, in the order they are copied and digested
_COLUMNS = {
    "budgets": ("dataset", "epsilon_total", "delta_total", "created", "name", "split_key", "filter"),
    "links": ("alias", "dataset", "created"),
    "releases": (
        "id",
        "dataset",
        "key",
        "time",
        "mechanism",
        "epsilon",
        "delta",
        "result",
        "loss",
        "params",
        "covered",
    ),
    "composed": composed.COLUMNS,  # each budget's composed state (its sums' exact text)
}
_ORDER = {"budgets": "dataset", "links": "alias", "releases": "id", "composed": "dataset"}


@dataclass(frozen=True)
class Copied:
    """What a migration copied: the rows of each table (the digests matched, or nothing was committed)."""

    budgets: int
    links: int
    releases: int

    def to_dict(self) -> dict[str, Any]:
        return {"budgets": self.budgets, "links": self.links, "releases": self.releases, "verified": True}


def _rows(con: LedgerConnection, table: str) -> list[tuple[Any, ...]]:
    columns = ", ".join(_COLUMNS[table])
    return [tuple(r) for r in con.execute(f"SELECT {columns} FROM {table} ORDER BY {_ORDER[table]}").fetchall()]


def digest(con: LedgerConnection) -> dict[str, tuple[int, str]]:
    """Per table, its row count and the SHA-256 of its rows in order (each row's every column, as JSON:
    a float by its shortest exact text, so a copy that changed a bit of an epsilon differs)."""
    return _digest_rows({table: _rows(con, table) for table in _COLUMNS})


def _digest_rows(tables: dict[str, list[tuple[Any, ...]]]) -> dict[str, tuple[int, str]]:
    out = {}
    for table in _COLUMNS:
        rows = tables[table]
        h = hashlib.sha256()
        for row in rows:
            h.update(
                hashlib.sha256(json.dumps([repr(v) if isinstance(v, float) else v for v in row]).encode()).digest()
            )
        out[table] = (len(rows), h.hexdigest())
    return out


def _copy(con: LedgerConnection, rows: dict[str, list[tuple[Any, ...]]]) -> None:
    """Insert every row (the releases with their ids; the id sequence set past them)."""
    for table in ("budgets", "links", "releases", "composed"):  # the others refer to budgets
        columns = _COLUMNS[table]
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        try:
            for row in rows[table]:
                con.execute(sql, row)
        except psycopg.errors.IntegrityError:  # its detail can quote a row (a dataset's content hash): not shown
            raise ParameterError(
                f"the source's table {table} holds a row the target's constraints refuse (a reference to a "
                "missing budget, a duplicate or a bad value): nothing was committed"
            ) from None
    con.execute(
        "SELECT setval(pg_get_serial_sequence('releases', 'id'), "
        "(SELECT coalesce(max(id), 0) + 1 FROM releases), false)"
    )


def announce(src: SQLiteLedger, target: str) -> str:
    """Step 1 (:mod:`.moves`), committed on the source: the move's token."""
    return src.write(lambda con: moves.announce(con, src.path, target))


def copy_into(dst: PostgresLedger, target: str, rows: dict[str, list[tuple[Any, ...]]], token: str) -> None:
    """Step 2, committed on the target: every row, and the move's token, in one transaction that commits
    only if the copy reads back with the source's counts and digests."""
    expected = _digest_rows(rows)

    def copy(con: LedgerConnection) -> None:
        held = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _COLUMNS}
        if any(held.values()):
            raise ParameterError(
                f"ledger {target} already holds records ({held['budgets']} budget(s), {held['releases']} "
                "release(s)): a ledger is copied into an empty one only, so no record is merged or lost"
            )
        _copy(con, rows)
        if digest(con) != expected:
            raise ParameterError(f"the copy in {target} read back differently: nothing was committed")
        moves.record_copy(con, token)

    dst.write(copy)


def mark_moved(con: LedgerConnection, target: str) -> None:
    """Step 3, in the source's transaction (committed when :func:`migrate`'s returns)."""
    moves.mark_moved(con, target)


def migrate(source: str | Path, target: str, timeout: float = 120.0) -> Copied:
    """Copy the SQLite ledger at ``source`` into the PostgreSQL ledger at ``target`` (a URL).

    The source is opened as a ledger (upgraded in place first if an older dpdist wrote it) and
    announced; then, holding its write lock from before its rows are read until it is marked moved,
    its rows are copied and verified in one transaction on the target, and it is marked moved
    (:mod:`.moves`: at every point exactly one of the two takes charges). Raises ``ParameterError``
    when ``target`` is not a PostgreSQL URL or already holds records, and when the copy read back
    differs (then nothing was committed on the target). A run killed at any point is finished by
    running it again.
    """
    if not parse_location(target).is_url:
        raise ParameterError(f"--to must be a PostgreSQL URL (postgresql://user@host/db), got {target!r}")
    if parse_location(source).is_url:
        raise ParameterError(f"--from must be an SQLite ledger's path, got the URL {source!r}")
    src = SQLiteLedger(Path(source), timeout, create=False)
    dst = PostgresLedger(target, timeout, create=True)
    announce(src, target)

    def move(con: LedgerConnection) -> Copied:
        token = moves.announce(con, src.path, target)  # step 1's (refuses a source another run finished meanwhile)
        rows = {t: _rows(con, t) for t in _COLUMNS}
        expected = _digest_rows(rows)
        if not moves.holds_copy(target, token):  # else a killed run's copy committed: only the mark is left
            copy_into(dst, target, rows, token)
            if dst.read(digest) != expected:
                raise ParameterError(
                    f"the committed copy of {source} in {target} reads back differently from the source"
                )
        mark_moved(con, target)
        return Copied(expected["budgets"][0], expected["links"][0], expected["releases"][0])

    return src.write(move)  # one transaction holding the source's write lock: no charge lands mid-copy
