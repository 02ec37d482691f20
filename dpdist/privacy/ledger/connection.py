"""What the ledger's statements run on: a connection inside one transaction, with ``?`` parameter markers.

``sqlite3.Connection`` is one as it is; the PostgreSQL backend wraps psycopg's (its markers are ``%s``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["Cursor", "LedgerConnection"]


class Cursor(Protocol):
    """The rows of one statement (``sqlite3.Cursor`` and ``psycopg.Cursor`` are both one)."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class LedgerConnection(Protocol):
    """A connection inside one of the ledger's transactions: statements with ``?`` parameter markers."""

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Cursor: ...
