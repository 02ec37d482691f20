"""A move of an SQLite ledger to PostgreSQL, as both ledgers record it, so exactly one takes charges.

A move (:func:`dpdist.privacy.ledger.migrate.migrate`) is three commits: the source *announced*
(table ``moving_to``: the target's URL and a random token), the copy committed on the target with the
token (table ``migrated_from``), the source marked *moved* (table ``moved_to``). An announced source
asks the target for its token at each write and refuses once the target holds it; a moved source
refuses every write.

Claim: a run killed at any point leaves exactly one of the two ledgers taking charges (the source
before the copy's commit, the target after it), and running the same migration again finishes it.
Proof: [docs/proofs/ledger.md][proof-ledger-move].
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from dpdist.exceptions import LedgerUnavailable, ParameterError
from dpdist.privacy.ledger.connection import LedgerConnection
from dpdist.privacy.ledger.postgres import connection_parameters

__all__ = ["announce", "holds_copy", "mark_moved", "record_copy", "refuse_if_moved"]


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


def _has_table(con: LedgerConnection, name: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def _moved(con: LedgerConnection) -> str | None:
    """The URL the source was moved to (step 3), if it was."""
    if not _has_table(con, "moved_to"):
        return None
    row = con.execute("SELECT url FROM moved_to").fetchone()
    return None if row is None else str(row[0])


def _announced(con: LedgerConnection) -> tuple[str, str] | None:
    """(URL, token) of the move the source was announced for (step 1), if any."""
    if not _has_table(con, "moving_to"):
        return None
    row = con.execute("SELECT url, token FROM moving_to").fetchone()
    return None if row is None else (str(row[0]), str(row[1]))


def _moved_error(path: Path, url: str, how: str = "") -> ParameterError:
    return ParameterError(
        f"ledger {path} was moved to {url} (dpdist ledger migrate{how}): it takes no more charges or outcomes, so "
        f"no budget is spent twice; use --ledger {url} (or DPDIST_LEDGER). Its records still read"
    )


def holds_copy(url: str, token: str) -> bool:
    """Whether the PostgreSQL ledger at ``url`` committed the copy of the move ``token`` (step 2);
    ``LedgerUnavailable`` when it cannot be asked."""
    try:
        with psycopg.connect(**connection_parameters(url), autocommit=True) as pg:
            if pg.execute("SELECT to_regclass('migrated_from')").fetchone()[0] is None:  # type: ignore[index]
                return False
            return pg.execute("SELECT 1 FROM migrated_from WHERE token = %s", (token,)).fetchone() is not None
    except psycopg.Error as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise LedgerUnavailable(
            f"this SQLite ledger is being moved to {url} (dpdist ledger migrate did not finish), which could not be "
            f"asked whether it holds the copy ({first}): nothing was charged; run the same dpdist ledger migrate "
            "again to finish the move"
        ) from None


def refuse_if_moved(con: LedgerConnection, path: Path) -> None:
    """Refuse a write to a source the target took over (steps 2 and 3), naming where the ledger went."""
    url = _moved(con)
    if url is not None:
        raise _moved_error(path, url)
    announced = _announced(con)
    if announced is not None and holds_copy(*announced):
        raise _moved_error(path, announced[0], ", interrupted after the copy: run it again to finish")


def announce(con: LedgerConnection, path: Path, target: str) -> str:
    """Step 1 in the caller's (source's) transaction: the token of the move to ``target`` (that of an
    earlier, unfinished run to the same URL, or a new one). Refuses a source moved, or announced for
    another URL."""
    url = _moved(con)
    if url is not None:
        raise _moved_error(path, url)
    announced = _announced(con)
    if announced is not None:
        if announced[0] != target:
            raise ParameterError(
                f"ledger {path} is being moved to {announced[0]} (an unfinished dpdist ledger migrate): finish that "
                f"move (the same command, --to {announced[0]}) before any other"
            )
        return announced[1]
    token = secrets.token_hex(16)
    con.execute("CREATE TABLE IF NOT EXISTS moving_to (url TEXT NOT NULL, token TEXT NOT NULL, time TEXT NOT NULL)")
    con.execute("INSERT INTO moving_to (url, token, time) VALUES (?, ?, ?)", (target, token, _today()))
    return token


def record_copy(con: LedgerConnection, token: str) -> None:
    """Step 2's mark, in the target's copy transaction: it holds the copy of the move ``token``."""
    con.execute("CREATE TABLE IF NOT EXISTS migrated_from (token TEXT PRIMARY KEY, time TEXT NOT NULL)")
    con.execute("INSERT INTO migrated_from (token, time) VALUES (?, ?)", (token, _today()))


def mark_moved(con: LedgerConnection, target: str) -> None:
    """Step 3 in the caller's (source's) transaction."""
    con.execute("CREATE TABLE IF NOT EXISTS moved_to (url TEXT NOT NULL, time TEXT NOT NULL)")
    con.execute("INSERT INTO moved_to (url, time) VALUES (?, ?)", (target, _today()))
