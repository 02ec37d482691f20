"""Copying an SQLite ledger to a PostgreSQL one, every record kept and verified.

A team moving from one person's SQLite ledger to a shared PostgreSQL ledger must not lose a record:
a release forgotten in the copy is budget spent twice. :func:`migrate` copies every budget, link and
release (with its id, so the order of the history is kept) in one transaction on the target, reads
the copy back inside that transaction and commits only if the target holds the same number of rows
of each table and the same SHA-256 digest of every release (every column); it then reads the
committed copy back once more. The target must hold no ledger records yet. The digests are compared,
never shown: a release's row holds the dataset's content hash, which is private (so is an error of
the copy: it names the table, never the server's detail, which can quote a row).

The source's write lock is held from before its rows are read until after the committed copy was
verified, and in that same transaction the source is marked moved (table ``moved_to``: the target's
URL, which holds no password -- one is refused): from then on the SQLite ledger refuses every charge
and outcome, naming the target (:meth:`SQLiteLedger.refuse_if_moved`), so no budget is spent in both.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from dpdist.exceptions import ParameterError
from dpdist.privacy.ledger.backend import parse_location
from dpdist.privacy.ledger.postgres import PostgresLedger
from dpdist.privacy.ledger.schema import LedgerConnection
from dpdist.privacy.ledger.sqlite import SQLiteLedger

__all__ = ["Copied", "digest", "migrate"]

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
}
_ORDER = {"budgets": "dataset", "links": "alias", "releases": "id"}


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
    out = {}
    for table in _COLUMNS:
        rows = _rows(con, table)
        h = hashlib.sha256()
        for row in rows:
            h.update(
                hashlib.sha256(json.dumps([repr(v) if isinstance(v, float) else v for v in row]).encode()).digest()
            )
        out[table] = (len(rows), h.hexdigest())
    return out


def _copy(con: LedgerConnection, rows: dict[str, list[tuple[Any, ...]]]) -> None:
    """Insert every row (the releases with their ids; the id sequence set past them)."""
    for table in ("budgets", "links", "releases"):  # links and releases refer to budgets
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


def migrate(source: str | Path, target: str, timeout: float = 120.0) -> Copied:
    """Copy the SQLite ledger at ``source`` into the PostgreSQL ledger at ``target`` (a URL).

    The source is opened as a ledger (upgraded in place first if an older dpdist wrote it), read under
    its write lock, and marked moved in the same transaction once the copy is committed and verified.
    Raises ``ParameterError`` when ``target`` is not a PostgreSQL URL or already holds records,
    and when the copy read back differs (then nothing was committed).
    """
    if not parse_location(target).is_url:
        raise ParameterError(f"--to must be a PostgreSQL URL (postgresql://user@host/db), got {target!r}")
    if parse_location(source).is_url:
        raise ParameterError(f"--from must be an SQLite ledger's path, got the URL {source!r}")
    src = SQLiteLedger(Path(source), timeout, create=False)
    dst = PostgresLedger(target, timeout, create=True)

    def copy(con: LedgerConnection) -> None:
        held = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _COLUMNS}
        if any(held.values()):
            raise ParameterError(
                f"ledger {target} already holds records ({held['budgets']} budget(s), {held['releases']} "
                "release(s)): a ledger is copied into an empty one only, so no record is merged or lost"
            )
        _copy(con, rows)
        if digest(con) != expected:
            raise ParameterError(f"the copy of {source} in {target} read back differently: nothing was committed")

    def move(con: LedgerConnection) -> None:
        src.refuse_if_moved(con)  # copied once already: its records are the target's
        rows.update({t: _rows(con, t) for t in _COLUMNS})
        expected.update(digest(con))
        dst.write(copy)
        if dst.read(digest) != expected:
            raise ParameterError(f"the committed copy of {source} in {target} reads back differently from the source")
        con.execute("CREATE TABLE IF NOT EXISTS moved_to (url TEXT NOT NULL, time TEXT NOT NULL)")
        con.execute("INSERT INTO moved_to (url, time) VALUES (?, ?)", (target, datetime.now(UTC).date().isoformat()))

    rows: dict[str, list[tuple[Any, ...]]] = {}
    expected: dict[str, tuple[int, str]] = {}
    src.write(move)  # one transaction holding the write lock: no charge lands in the source mid-copy or after
    return Copied(expected["budgets"][0], expected["links"][0], expected["releases"][0])
