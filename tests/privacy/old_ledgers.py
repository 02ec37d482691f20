"""SQLite ledgers as earlier dpdist versions wrote them (made from a current one), and opened again by
this dpdist, which migrates them in place."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from dpdist.privacy.accountant import Accountant

SCHEMA = 8  # the schema version this dpdist writes

# what each schema version added to the one before, undone (newest first: a trigger names its columns)
_ADDED = {
    7: ("DROP TABLE composed", "DROP INDEX releases_by_dataset"),  # each budget's composed state
    6: ("DROP TRIGGER releases_append_only", "DROP TRIGGER releases_never_deleted"),  # the release guards
    5: ("ALTER TABLE releases DROP COLUMN covered",),
    4: ("ALTER TABLE budgets DROP COLUMN filter",),
    3: ("DROP TABLE links",),  # a split half's legacy budget linked to its source's
}


def write_as_schema(path: Path, version: int) -> tuple[list, list]:
    """Rewrite the ledger at ``path`` as dpdist's schema ``version`` wrote it: what each later version
    added dropped, its ``user_version`` set. Returns its rows then: (releases by id, budgets)."""
    with contextlib.closing(sqlite3.connect(path)) as con:
        for added, statements in _ADDED.items():
            if added > version:
                for statement in statements:
                    con.execute(statement)
        con.execute(f"PRAGMA user_version = {version}")
        con.commit()
        return con.execute("SELECT * FROM releases ORDER BY id").fetchall(), con.execute(
            "SELECT * FROM budgets"
        ).fetchall()


def migrated(path: Path) -> tuple[Accountant, sqlite3.Connection]:
    """The old ledger at ``path`` opened by this dpdist (its migration runs), and a connection to the
    file it left, checked to be at :data:`SCHEMA` (the caller closes it)."""
    acc = Accountant(path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA
    return acc, con
