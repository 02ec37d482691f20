"""The ledger's statements on budgets, releases and links: one SQL text that both backends run.

:class:`dpdist.privacy.accountant.Accountant` decides (checks, messages, the budget's filter); these
functions read and write the rows, each inside the caller's transaction (a backend's ``read`` or
``write``), with ``?`` parameter markers (:mod:`.schema`).

Fault injection: the accountant calls every function here through this module
(``queries.insert_release(...)``), so a test replaces one with ``monkeypatch.setattr`` to act at that
point of a transaction -- e.g. to kill a process inside a charge's transaction, after its insert and
before its commit (tests/privacy/test_accountant.py). No hook lives in the accountant.
"""

from __future__ import annotations

from dpdist.privacy.ledger.connection import LedgerConnection
from dpdist.privacy.ledger.records import RELEASE_COLUMNS, Release, release_row

__all__ = [
    "budget_row",
    "dataset_named",
    "datasets",
    "find_release",
    "has_budget",
    "insert_budget",
    "insert_link",
    "insert_release",
    "is_linked",
    "link_target",
    "name_used",
    "record_result",
    "releases",
    "result_of",
    "split_key",
]


def find_release(con: LedgerConnection, dataset: str, key: str) -> Release | None:
    """The release ``key`` of ``dataset``, if it was charged."""
    row = con.execute(
        f"SELECT {RELEASE_COLUMNS} FROM releases WHERE dataset = ? AND key = ?", (dataset, key)
    ).fetchone()
    return None if row is None else release_row(row)


def releases(con: LedgerConnection, dataset: str) -> list[Release]:
    """The releases charged to ``dataset`` and to the budgets linked to it (``links``), oldest first."""
    rows = con.execute(
        f"SELECT {RELEASE_COLUMNS} FROM releases "
        "WHERE dataset = ? OR dataset IN (SELECT alias FROM links WHERE dataset = ?) ORDER BY id",
        (dataset, dataset),
    ).fetchall()
    return [release_row(r) for r in rows]


def budget_row(con: LedgerConnection, dataset: str) -> tuple[float, float, str, str | None] | None:
    """(epsilon_total, delta_total, name, the stored filter's JSON) of ``dataset``'s budget, if it has one."""
    row = con.execute(
        "SELECT epsilon_total, delta_total, name, filter FROM budgets WHERE dataset = ?", (dataset,)
    ).fetchone()
    return None if row is None else (float(row[0]), float(row[1]), str(row[2]), row[3])


def has_budget(con: LedgerConnection, dataset: str) -> bool:
    return con.execute("SELECT 1 FROM budgets WHERE dataset = ?", (dataset,)).fetchone() is not None


def dataset_named(con: LedgerConnection, name_or_dataset: str) -> str | None:
    """The dataset whose public name (or content hash) is ``name_or_dataset``."""
    row = con.execute(
        "SELECT dataset FROM budgets WHERE name = ? OR dataset = ?", (name_or_dataset, name_or_dataset)
    ).fetchone()
    return None if row is None else str(row[0])


def name_used(con: LedgerConnection, name: str) -> bool:
    return con.execute("SELECT 1 FROM budgets WHERE name = ?", (name,)).fetchone() is not None


def datasets(con: LedgerConnection) -> list[str]:
    """Every dataset with a budget, ordered by public name."""
    return [str(r[0]) for r in con.execute("SELECT dataset FROM budgets ORDER BY name").fetchall()]


def split_key(con: LedgerConnection, dataset: str) -> str:
    """The hex text of ``dataset``'s secret split key."""
    return str(con.execute("SELECT split_key FROM budgets WHERE dataset = ?", (dataset,)).fetchone()[0])


def insert_budget(
    con: LedgerConnection,
    dataset: str,
    epsilon: float,
    delta: float,
    created: str,
    name: str,
    split_key: str,
    filter_json: str,
) -> None:
    con.execute(
        "INSERT INTO budgets (dataset, epsilon_total, delta_total, created, name, split_key, filter) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (dataset, epsilon, delta, created, name, split_key, filter_json),
    )


def is_linked(con: LedgerConnection, alias: str) -> bool:
    return con.execute("SELECT 1 FROM links WHERE alias = ?", (alias,)).fetchone() is not None


def insert_link(con: LedgerConnection, alias: str, dataset: str, created: str) -> None:
    con.execute("INSERT INTO links (alias, dataset, created) VALUES (?, ?, ?)", (alias, dataset, created))


def link_target(con: LedgerConnection, alias: str) -> str | None:
    """The budget ``alias``'s releases also count toward (``links``), if it is linked."""
    row = con.execute("SELECT dataset FROM links WHERE alias = ?", (alias,)).fetchone()
    return None if row is None else str(row[0])


def insert_release(con: LedgerConnection, release: Release) -> int:
    """Record a charged release (its outcome not yet: :func:`record_result`); its id."""
    loss = release.privacy_loss
    row = con.execute(
        "INSERT INTO releases (dataset, key, time, mechanism, epsilon, delta, loss, params, covered) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            release.dataset,
            release.key,
            release.time,
            release.mechanism,
            release.epsilon,
            release.delta,
            loss.to_json(),
            release.params,
            int(release.covered),
        ),
    ).fetchone()
    return int(row[0])


def result_of(con: LedgerConnection, dataset: str, key: str) -> str | None:
    """The recorded outcome of the charged release ``key`` (``None``: none recorded yet)."""
    row = con.execute("SELECT result FROM releases WHERE dataset = ? AND key = ?", (dataset, key)).fetchone()
    return None if row[0] is None else str(row[0])


def record_result(con: LedgerConnection, dataset: str, key: str, encoded: str) -> None:
    """Write the outcome of ``key`` (once: the table's guards refuse a second write)."""
    con.execute("UPDATE releases SET result = ? WHERE dataset = ? AND key = ?", (encoded, dataset, key))
