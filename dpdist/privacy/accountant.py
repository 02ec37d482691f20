"""The central privacy accountant: a durable ledger of (epsilon, delta) budgets and releases.

Every release of a private result is charged to the ledger *before* the result leaves.
The ledger is a SQLite database in WAL mode with ``synchronous=FULL``:

* atomic: a charge is one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``); a process
  killed in the middle leaves it wholly recorded or wholly absent;
* serialised: ``BEGIN IMMEDIATE`` takes the write lock before the spent budget is read,
  so processes charging the same ledger at once can never overspend;
* idempotent: a release is identified by ``(dataset, key)``. Charging the same key again
  with the same parameters returns the recorded charge without spending anything; reusing
  a key with different parameters (a hash of the mechanism, its privacy loss and every
  release parameter the caller names) raises ``ReleaseKeyConflict``;
* tight and adaptive: each release records its privacy loss in the strongest form its
  mechanism has (:class:`dpdist.privacy.loss.PrivacyLoss`: zCDP rho, Laplace/RDP curves, or
  (eps, delta)), and a release is charged only if the dataset's releases with it pass the
  budget's privacy filter (:class:`dpdist.privacy.filter.PrivacyFilter`: Renyi composition at
  an order fixed by the budget, or basic composition with the deltas within a quarter of the
  budget's), checked inside the charge's transaction. The filter holds when each release is
  chosen after seeing the earlier ones.
  Basic composition (the sum of each release's standalone (eps, delta)) is kept beside it.

Datasets are keyed by the content hash of their store (``dataset``), which is private: it
tells two neighbouring datasets apart. What is printed, logged and reported is the
dataset's *name*, chosen by the user or drawn at random when the budget is set, never a
function of the data. Each dataset also has a secret *split key* (random, kept here), from
which :mod:`dpdist.data.split` decides each record's side of the train/test split.

``Accountant.release`` is the one path for a mechanism's output: it charges, computes the
noisy result, records its outcome in the same ledger and only then returns it. The outcome is
the result or, when the computation raises an ``Exception`` other than the machine's own
(a lost connection, memory, a killed worker), the failure -- recorded by its class and a fixed
public message, never the exception's own text. A retried release with the
same key replays the recorded outcome and never draws fresh noise (nor re-runs a solver) for a
charge whose outcome was already recorded.

Schema history: version 1 (dpdist <= commit 5360b17) had no names, split keys, losses or
parameter hashes; it is upgraded in place, in one transaction, when opened (its releases
keep their (eps, delta) as approximate-DP records; its budgets get a random name and key).
Version 2 had no ``links`` table (:meth:`Accountant.budget_of`: a split half's budget of its
own, from before halves were charged to their source, counted toward the source's); version 3
adds it, in the same way. Version 3 had no ``filter`` column; version 4 stores each budget's
privacy filter (:class:`dpdist.privacy.filter.PrivacyFilter`: its Renyi order and delta split,
fixed when the budget is set, or when a version 1-3 ledger is first opened). Version 5 adds each
release's ``covered`` mark (0: run outside the privacy guarantee by the operator's opt-in, e.g. a
wall-clock guard; :class:`dpdist.privacy.loss.Charge`); earlier releases had no such option and
are marked covered. Every row is kept.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import math
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpdist.exceptions import (
    BudgetExceeded,
    DPDistError,
    LedgerUnavailable,
    ParameterError,
    ReleaseKeyConflict,
    ReleaseRefused,
    SolverAborted,
    SolverFailure,
    UnknownDataset,
)
from dpdist.privacy.filter import PrivacyFilter
from dpdist.privacy.guard import charged_by_caller
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.utils.files import private_sqlite
from dpdist.utils.random import random_name
from dpdist.utils.validation import check_delta, check_epsilon

__all__ = [
    "Accountant",
    "BudgetStatus",
    "Release",
    "UNCOVERED_MARK",
    "default_ledger_path",
    "spend_text",
    "status_table",
]

# how a release run outside the privacy guarantee (``covered=False``) is marked wherever it is listed
UNCOVERED_MARK = "NOT COVERED (run outside the privacy guarantee: an operator's opt-in)"

_SCHEMA_VERSION = 5
_LINKS = """
CREATE TABLE IF NOT EXISTS links (
    alias   TEXT PRIMARY KEY REFERENCES budgets(dataset),
    dataset TEXT NOT NULL REFERENCES budgets(dataset),
    created TEXT NOT NULL
)"""
_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS budgets (
    dataset       TEXT PRIMARY KEY,
    epsilon_total REAL NOT NULL CHECK (epsilon_total > 0),
    delta_total   REAL NOT NULL CHECK (delta_total >= 0 AND delta_total < 1),
    created       TEXT NOT NULL,
    name          TEXT,
    split_key     TEXT,
    filter        TEXT
);
CREATE TABLE IF NOT EXISTS releases (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset   TEXT NOT NULL REFERENCES budgets(dataset),
    key       TEXT NOT NULL,
    time      TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    epsilon   REAL NOT NULL CHECK (epsilon > 0),
    delta     REAL NOT NULL CHECK (delta >= 0 AND delta < 1),
    result    TEXT,
    loss      TEXT,
    params    TEXT,
    covered   INTEGER NOT NULL DEFAULT 1,
    UNIQUE (dataset, key)
);
CREATE UNIQUE INDEX IF NOT EXISTS budgets_name ON budgets(name);
"""
    + _LINKS
    + ";"
)
_V1_TO_V2 = (
    "ALTER TABLE budgets ADD COLUMN name TEXT",
    "ALTER TABLE budgets ADD COLUMN split_key TEXT",
    "ALTER TABLE releases ADD COLUMN loss TEXT",
    "ALTER TABLE releases ADD COLUMN params TEXT",
    "CREATE UNIQUE INDEX IF NOT EXISTS budgets_name ON budgets(name)",
)


_RELEASE_COLUMNS = "dataset, key, time, mechanism, epsilon, delta, result, loss, params, covered"


def _release_row(row: tuple[Any, ...]) -> Release:
    """A ``Release`` from a row of ``_RELEASE_COLUMNS``."""
    return Release(
        dataset=row[0], key=row[1], time=row[2], mechanism=row[3], epsilon=row[4], delta=row[5], result=row[6],
        loss=None if row[7] is None else PrivacyLoss.from_json(row[7]), params=row[8], covered=bool(row[9]),
    )


def default_ledger_path() -> Path:
    """``$DPDIST_LEDGER`` if set, else ``~/.dpdist/ledger.sqlite`` (the CLI contract)."""
    env = os.environ.get("DPDIST_LEDGER")
    return Path(env) if env else Path.home() / ".dpdist" / "ledger.sqlite"


@dataclass(frozen=True)
class Release:
    """One charged release: its loss, by which mechanism, under which key (and its result)."""

    dataset: str
    key: str
    time: str
    mechanism: str
    epsilon: float
    delta: float
    result: str | None = None
    loss: PrivacyLoss | None = None
    params: str | None = None
    covered: bool = True

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """The recorded loss; a v1 record is an (epsilon, delta) charge."""
        return self.loss if self.loss is not None else PrivacyLoss.approx(self.epsilon, self.delta)

    def to_dict(self, name: str | None = None) -> dict[str, Any]:
        """The audit-trail record (the dataset shown by its public ``name``, never its content hash).

        ``time`` is the UTC *date* of the charge: the ledger keeps the full time, but two charges'
        times a few seconds apart would publish how long the private computation between them took.
        """
        loss = self.privacy_loss
        return {
            "dataset": name,
            "key": self.key,
            "time": self.time[:10],
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "form": loss.form,
            "rho": loss.rho,
            "loss": loss.describe(),
            "covered": self.covered,
            "result": None if self.result is None else _public_result(self.result),
        }


@dataclass(frozen=True)
class BudgetStatus:
    """A dataset's total budget and what its releases spent.

    ``epsilon_spent`` is the budget's privacy filter's measure of every release (a release is
    charged while it stays at most ``epsilon_total``; :class:`dpdist.privacy.filter.PrivacyFilter`):
    a measure of use, not a guarantee of the releases so far -- the guarantee of all of them is the
    budget's (epsilon_total, delta_total). ``epsilon_remaining`` is in the same measure (on the
    Renyi route a release of epsilon e takes less than e of it). The basic-composition totals (sums
    of each release's standalone epsilon and delta) are beside it.
    """

    dataset: str  # the content hash: private (ledger internals only)
    name: str
    epsilon_total: float
    delta_total: float
    epsilon_spent: float
    delta_spent: float
    epsilon_basic: float
    delta_basic: float
    releases: int
    privacy_filter: PrivacyFilter | None = None
    uncovered: int = 0  # releases run outside the guarantee by an operator's opt-in (``Charge.covered``)

    @property
    def epsilon_remaining(self) -> float:
        return max(0.0, self.epsilon_total - self.epsilon_spent)

    def to_dict(self) -> dict[str, Any]:
        """The public form: the dataset's name, never its content hash."""
        finite = math.isfinite(self.epsilon_spent)  # inf: the releases' deltas do not fit the filter
        return {
            "dataset": self.name,
            "epsilon_total": self.epsilon_total,
            "delta_total": self.delta_total,
            "epsilon_spent": self.epsilon_spent if finite else None,
            "delta_spent": self.delta_spent,
            "epsilon_remaining": self.epsilon_remaining,
            "epsilon_basic": self.epsilon_basic,
            "delta_basic": self.delta_basic,
            "releases": self.releases,
            "uncovered": self.uncovered,
            "filter": None if self.privacy_filter is None else self.privacy_filter.to_dict(),
        }


def spend_text(s: dict[str, Any], mark: str = "") -> str:
    """Two short sentences on what a status (``BudgetStatus.to_dict()``) spent (``mark`` around the spent
    figure, e.g. ``**`` in Markdown): the budget's filter's figure and what is left, then how it counts."""
    f = s["filter"]
    spent = (
        "past the filter (the releases' deltas do not fit it)"
        if s["epsilon_spent"] is None
        else f"epsilon {s['epsilon_spent']:.4g}"
    )
    how = (
        f"Renyi composition at order {f['order']:g}, or the releases' epsilons added when smaller"
        if f and f["order"] is not None
        else "the releases' epsilons added (the budget's delta is 0)"
    )
    text = (
        f"spent {mark}{spent}{mark} of {s['epsilon_total']:g} (delta {s['delta_total']:g}), "
        f"{s['epsilon_remaining']:.4g} left. Counted by the budget's privacy filter ({how}), so a new "
        f"release of epsilon e can take less than e of what is left"
    )
    if s.get("uncovered"):
        text += (
            f"; {s['uncovered']} release(s) ran outside the guarantee (an operator's opt-in, marked in the "
            "history): the guarantee does not cover them"
        )
    return text


def status_table(rows: list[dict[str, Any]]) -> str:
    """Budgets as a compact table (``BudgetStatus.to_dict()`` rows): dataset | budget | spent | left | releases."""
    header = ("dataset", "epsilon", "delta", "spent", "left", "releases", "not covered")
    cells = [
        (
            r["dataset"],
            f"{r['epsilon_total']:g}",
            f"{r['delta_total']:g}",
            "past" if r["epsilon_spent"] is None else f"{r['epsilon_spent']:.4g}",
            f"{r['epsilon_remaining']:.4g}",
            str(r["releases"]),
            str(r.get("uncovered") or 0),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    def line(c: tuple[str, ...]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(c, widths)).rstrip()

    return "\n".join([line(header), *(line(c) for c in cells)])


def _check_name(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ParameterError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def params_hash(charge: Charge, params: dict[str, Any] | None) -> str:
    """SHA-256 of the mechanism, its privacy loss and the release's parameters."""
    doc = {"mechanism": charge.mechanism, "loss": json.loads(charge.loss.to_json()), "params": params or {}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


class Accountant:
    """A durable privacy ledger at ``path`` (default: ``default_ledger_path()``).

    Safe to share between threads and processes: every call opens its own connection.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, timeout: float = 120.0, create: bool = True) -> None:
        """``create=False`` opens an existing ledger only (``UnknownDataset`` if there is none): for
        commands that only read, so a mistyped path creates nothing."""
        self.path = Path(path) if path is not None else default_ledger_path()
        self.timeout = float(timeout)
        # Test hook: called inside a charge's transaction, after the insert and before the
        # commit (used to kill a process mid-charge). Never set in production code.
        self._before_commit: Callable[[], None] | None = None
        if not create and not self.path.is_file():
            raise UnknownDataset(f"there is no ledger at {self.path} (nothing has been charged there yet)")
        private_sqlite(self.path)  # owner-only ledger (and its -wal/-shm), whatever the umask
        with self._transaction() as con:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version == 0 and con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                raise ParameterError(
                    f"ledger {self.path} is another program's SQLite database, not a dpdist ledger "
                    f"(pass a ledger's path, or a new path to start one)"
                )
            if version == 0:
                for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                    con.execute(stmt)
                con.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            elif version in (1, 2, 3, 4):  # each step upgrades by one version
                for step in (self._migrate_v1, self._migrate_v2, self._migrate_v3, self._migrate_v4)[version - 1 :]:
                    step(con)
            elif version != _SCHEMA_VERSION:
                raise ParameterError(
                    f"ledger {self.path} has schema version {version}; this dpdist reads "
                    f"versions 1 to {_SCHEMA_VERSION}"
                )

    @staticmethod
    def _migrate_v1(con: sqlite3.Connection) -> None:
        """v1 -> v2 in the caller's transaction: new columns, a random name and split key per budget."""
        for stmt in _V1_TO_V2:
            con.execute(stmt)
        for (dataset,) in con.execute("SELECT dataset FROM budgets").fetchall():
            con.execute(
                "UPDATE budgets SET name = ?, split_key = ? WHERE dataset = ?",
                (random_name(), secrets.token_hex(32), dataset),
            )
        con.execute("PRAGMA user_version = 2")

    @staticmethod
    def _migrate_v2(con: sqlite3.Connection) -> None:
        """v2 -> v3 in the caller's transaction: the ``links`` table (:meth:`budget_of`); every row kept."""
        con.execute(_LINKS)
        con.execute("PRAGMA user_version = 3")

    @staticmethod
    def _migrate_v3(con: sqlite3.Connection) -> None:
        """v3 -> v4 in the caller's transaction: each budget's privacy filter (its Renyi order and delta
        split, :class:`PrivacyFilter`), fixed now and stored; every row kept."""
        con.execute("ALTER TABLE budgets ADD COLUMN filter TEXT")
        for dataset, eps, delta in con.execute("SELECT dataset, epsilon_total, delta_total FROM budgets").fetchall():
            con.execute(
                "UPDATE budgets SET filter = ? WHERE dataset = ?",
                (PrivacyFilter.for_budget(eps, delta).to_json(), dataset),
            )
        con.execute("PRAGMA user_version = 4")

    @staticmethod
    def _migrate_v4(con: sqlite3.Connection) -> None:
        """v4 -> v5 in the caller's transaction: each release's ``covered`` mark (every earlier
        release was covered: no opt-in outside the guarantee existed); every row kept."""
        con.execute("ALTER TABLE releases ADD COLUMN covered INTEGER NOT NULL DEFAULT 1")
        con.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")

    # ------------------------------------------------------------------ connections

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
        with self._sqlite_errors():
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
    def _reader(self) -> Iterator[sqlite3.Connection]:
        with self._sqlite_errors():
            con = self._connect()
            try:
                yield con
            finally:
                con.close()

    @contextmanager
    def _sqlite_errors(self) -> Iterator[None]:
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
            raise

    # ---------------------------------------------------------------------- budgets

    def init_budget(self, dataset: str, epsilon: float, delta: float, name: str | None = None) -> BudgetStatus:
        """Set ``dataset``'s total budget (``dataset``: the store's content hash).

        ``name`` is the public name shown for the dataset (default: a random one). Re-running
        with the same totals is a no-op and keeps the existing name; a budget, once set, is
        never changed (a different total raises ParameterError).
        """
        dataset = _check_name(dataset, "dataset")
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        if name is not None:
            name = _check_name(name, "name")
        with self._transaction() as con:
            row = con.execute(
                "SELECT epsilon_total, delta_total, name FROM budgets WHERE dataset = ?", (dataset,)
            ).fetchone()
            if row is None:
                name = name or random_name()
                if con.execute("SELECT 1 FROM budgets WHERE name = ?", (name,)).fetchone():
                    raise ParameterError(f"the name {name!r} is already used by another dataset in {self.path}")
                con.execute(
                    "INSERT INTO budgets (dataset, epsilon_total, delta_total, created, name, split_key, filter) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        dataset,
                        epsilon,
                        delta,
                        _now(),
                        name,
                        secrets.token_hex(32),
                        PrivacyFilter.for_budget(epsilon, delta).to_json(),
                    ),
                )
            elif tuple(row[:2]) != (epsilon, delta):
                raise ParameterError(
                    f"dataset {row[2]!r} already has a budget (epsilon={row[0]:g}, delta={row[1]:g}) in "
                    f"{self.path}; a budget is never changed once set"
                )
            return self._status(con, dataset)

    def has_budget(self, dataset: str) -> bool:
        with self._reader() as con:
            return con.execute("SELECT 1 FROM budgets WHERE dataset = ?", (dataset,)).fetchone() is not None

    def resolve(self, name_or_dataset: str) -> str:
        """The dataset (content hash) of a public name (or of the hash itself)."""
        with self._reader() as con:
            row = con.execute(
                "SELECT dataset FROM budgets WHERE name = ? OR dataset = ?", (name_or_dataset, name_or_dataset)
            ).fetchone()
        if row is None:
            raise UnknownDataset(
                f"no dataset named {name_or_dataset!r} in ledger {self.path}; "
                "`dpdist budget show` lists the datasets it has"
            )
        return str(row[0])

    def name(self, dataset: str) -> str:
        """The public name of ``dataset``."""
        with self._reader() as con:
            return self._budget_row(con, dataset)[2]

    def budget_of(self, store: Any) -> str:
        """The dataset a store's releases are charged to (``store.budget_id``: a split half's is
        its source's), after linking a budget the ledger holds for a half's own content.

        Ledgers of dpdist before 4cadcda let a train/test half have a budget of its own (its
        content hash) and charged its releases there. Those records are records of the source:
        the first time the half is used, that budget is linked to the source's (table ``links``,
        schema 3), and from then on the source's status and history include its releases, so
        the source's composition counts everything its records have been charged (nothing is
        moved or lost; the half's own budget still lists its releases). Raises
        ``UnknownDataset`` when there is such a budget and the source has none yet."""
        own, target = _check_name(store.dataset_id, "dataset"), _check_name(store.budget_id, "dataset")
        if own != target:
            with self._transaction() as con:
                legacy = con.execute("SELECT 1 FROM budgets WHERE dataset = ?", (own,)).fetchone()
                linked = con.execute("SELECT 1 FROM links WHERE alias = ?", (own,)).fetchone()
                if legacy and not linked:
                    self._budget_row(con, target)
                    con.execute("INSERT INTO links (alias, dataset, created) VALUES (?, ?, ?)", (own, target, _now()))
        return target

    def split_key(self, dataset: str) -> bytes:
        """The secret key that decides each record's side of the train/test split (never published)."""
        with self._reader() as con:
            self._budget_row(con, dataset)
            return bytes.fromhex(
                con.execute("SELECT split_key FROM budgets WHERE dataset = ?", (dataset,)).fetchone()[0]
            )

    def status(self, dataset: str) -> BudgetStatus:
        """Total, spent and remaining budget of ``dataset``."""
        with self._reader() as con:
            return self._status(con, _check_name(dataset, "dataset"))

    def datasets(self) -> list[BudgetStatus]:
        """The status of every dataset in the ledger (ordered by name)."""
        with self._reader() as con:
            names = [r[0] for r in con.execute("SELECT dataset FROM budgets ORDER BY name")]
            return [self._status(con, n) for n in names]

    def history(self, dataset: str) -> list[Release]:
        """Every release charged to ``dataset``, oldest first (the audit trail)."""
        dataset = _check_name(dataset, "dataset")
        with self._reader() as con:
            self._budget_row(con, dataset)
            return self._releases(con, dataset)

    def _releases(self, con: sqlite3.Connection, dataset: str) -> list[Release]:
        """The releases charged to ``dataset`` and to the budgets linked to it (:meth:`budget_of`)."""
        rows = con.execute(
            f"SELECT {_RELEASE_COLUMNS} FROM releases "
            "WHERE dataset = ? OR dataset IN (SELECT alias FROM links WHERE dataset = ?) ORDER BY id",
            (dataset, dataset),
        ).fetchall()
        return [_release_row(r) for r in rows]

    def _budget_row(self, con: sqlite3.Connection, dataset: str) -> tuple[float, float, str, str | None]:
        """(epsilon_total, delta_total, name, the stored filter's JSON) of ``dataset``'s budget."""
        row = con.execute(
            "SELECT epsilon_total, delta_total, name, filter FROM budgets WHERE dataset = ?", (dataset,)
        ).fetchone()
        if row is None:
            raise UnknownDataset(
                f"no privacy budget for this dataset in ledger {self.path}; set one with: "
                "dpdist budget init STORE --epsilon E --delta D"
            )
        return float(row[0]), float(row[1]), str(row[2]), row[3]

    def _status(self, con: sqlite3.Connection, dataset: str, extra: list[PrivacyLoss] | None = None) -> BudgetStatus:
        eps_total, delta_total, name, text = self._budget_row(con, dataset)
        releases = self._releases(con, dataset)
        losses = [r.privacy_loss for r in releases] + (extra or [])
        eps_basic = math.fsum(loss.epsilon for loss in losses)
        delta_basic = math.fsum(loss.delta for loss in losses)
        pf = PrivacyFilter.from_json(eps_total, delta_total, text)
        eps_spent, delta_spent = pf.spent(losses)
        return BudgetStatus(
            dataset=dataset,
            name=name,
            epsilon_total=eps_total,
            delta_total=delta_total,
            epsilon_spent=eps_spent,
            delta_spent=delta_spent,
            epsilon_basic=eps_basic,
            delta_basic=delta_basic,
            releases=len(losses),
            privacy_filter=pf,
            uncovered=sum(not r.covered for r in releases),
        )

    # ---------------------------------------------------------------------- charges

    def check(self, dataset: str, *charges: Charge) -> BudgetStatus:
        """Raise ``BudgetExceeded`` unless ``charges`` would fit the budget now (reads, charges nothing).

        For a refusal before any work (a pre-flight check); the charge itself checks again.
        Returns the status the dataset would have after them.
        """
        with self._reader() as con:
            before = self._status(con, _check_name(dataset, "dataset"))
            after = self._status(con, dataset, [c.loss for c in charges])
        if charges and not after.epsilon_spent <= after.epsilon_total:
            total = PrivacyLoss.compose(*(c.loss for c in charges))
            raise BudgetExceeded(
                after.name,
                total.epsilon,
                total.delta,
                before.epsilon_spent,
                after.epsilon_spent,
                after.epsilon_total,
                after.delta_total,
            )
        return after

    def charge(self, dataset: str, charge: Charge, key: str, params: dict[str, Any] | None = None) -> Release:
        """Charge ``charge`` to ``dataset`` for the release ``key``, before it is released.

        ``params`` names every parameter of the release (method, lambda, T, columns, ...);
        with the mechanism and the loss they make the release's identity. Returns the
        recorded charge. Raises ``BudgetExceeded`` (and records nothing) when all releases with
        this one would not pass the budget's privacy filter,
        ``UnknownDataset`` when the dataset has no budget, and ``ReleaseKeyConflict`` when
        ``key`` was already used with other parameters. Charging an existing key with the same
        parameters spends nothing more.
        """
        dataset = _check_name(dataset, "dataset")
        key = _check_name(key, "key")
        if not isinstance(charge, Charge):
            raise ParameterError(f"charge must be a dpdist.privacy.loss.Charge, got {type(charge).__name__}")
        mechanism = _check_name(charge.mechanism, "mechanism")
        loss = charge.loss
        digest = params_hash(charge, params)
        with self._transaction() as con:
            existing = self._find(con, dataset, key)
            if existing is not None:
                same = (
                    existing.params == digest
                    if existing.params is not None
                    else (existing.mechanism, existing.epsilon, existing.delta) == (mechanism, loss.epsilon, loss.delta)
                )
                if not same:
                    raise ReleaseKeyConflict(
                        f"release key {key!r} was already charged as {existing.mechanism} "
                        f"(epsilon={existing.epsilon:g}, delta={existing.delta:g}) with other parameters; it cannot "
                        f"be reused for {mechanism} (epsilon={loss.epsilon:g}, delta={loss.delta:g}) with these: "
                        "give the new release its own key"
                    )
                return existing
            status = self._status(con, dataset, [loss])
            if not status.epsilon_spent <= status.epsilon_total:
                before = self._status(con, dataset)
                raise BudgetExceeded(
                    status.name,
                    loss.epsilon,
                    loss.delta,
                    before.epsilon_spent,
                    status.epsilon_spent,
                    before.epsilon_total,
                    before.delta_total,
                )
            release = Release(
                dataset, key, _now(), mechanism, loss.epsilon, loss.delta, None, loss, digest, bool(charge.covered)
            )
            con.execute(
                "INSERT INTO releases (dataset, key, time, mechanism, epsilon, delta, loss, params, covered) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    dataset,
                    key,
                    release.time,
                    mechanism,
                    loss.epsilon,
                    loss.delta,
                    loss.to_json(),
                    digest,
                    int(bool(charge.covered)),
                ),
            )
            if self._before_commit is not None:
                self._before_commit()
            return release

    def recorded(self, dataset: str, key: str) -> bool:
        """Whether ``key`` was released on ``dataset`` with a recorded outcome (a release under it replays)."""
        with self._reader() as con:
            rel = self._find(con, _check_name(dataset, "dataset"), _check_name(key, "key"))
        return rel is not None and rel.result is not None

    def _find(self, con: sqlite3.Connection, dataset: str, key: str) -> Release | None:
        row = con.execute(
            f"SELECT {_RELEASE_COLUMNS} FROM releases WHERE dataset = ? AND key = ?", (dataset, key)
        ).fetchone()
        return None if row is None else _release_row(row)

    def release(
        self,
        dataset: str,
        charge: Charge,
        key: str,
        compute: Callable[[], Any],
        params: dict[str, Any] | None = None,
    ) -> Any:
        """Charge, then compute the private result, record it, and return it.

        ``compute`` draws the noise and returns a JSON-serialisable result. If ``key`` was
        released before, the recorded outcome is returned (or raised) and ``compute`` is not
        called, so one charge never yields two different noisy results. If an earlier attempt
        was charged but interrupted before recording anything (a killed worker or process, a
        ``KeyboardInterrupt``), nothing left it, and ``compute`` runs again under the same charge.

        **Every outcome is recorded.** Whatever ``compute`` ends with -- a result, or any
        ``Exception``: a dpdist error (``SolverFailure``, ``ReleaseRefused``, ``SolverAborted``,
        ``ParameterError``, ...), a ``ValueError``/``LinAlgError`` from numpy or scikit-learn, a
        ``TypeError``, ``ZeroDivisionError``, ``FloatingPointError``, a numba error -- is the release's
        outcome: it is recorded under ``key``, the charge stands, and
        every retry under the key returns or raises the recorded outcome without calling
        ``compute``. A result that cannot be recorded (not JSON-serialisable, or not finite) is
        a failure of the release and is recorded as one; so is a result the ledger's disk
        refuses (``LedgerUnavailable`` on writing it): whether a full disk takes the result
        depends on its size, so on the output, and a retry that drew again would publish the
        draws that fit. The fixed-size failure record is written in its place (if the disk
        refuses that too, the error propagates unrecorded: a refusal of a fixed-size write does
        not depend on the output), and every retry replays it. What propagates unrecorded, as an
        interrupted run, is a ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``,
        ``SystemExit``) and the machine's own failures (:func:`machine_failure`: an ``OSError``
        -- a lost connection or file --, ``MemoryError``, a worker's ``ImportError``, a cancelled
        future, Dask's ``KilledWorker``): these do not depend on the noise drawn, so a retry that follows one
        draws M(D) unconditioned (below: F independent of M's randomness), and a run that re-uses
        the key after fixing the machine is not stuck replaying it.

        Why (the claim and its proof). Let M be the charged mechanism and F(D) in {ok, failed}
        whether an attempt on the dataset D fails; F can depend on D, on a solver's time and on
        noise already drawn. (i) *No resampling.* If a failure were not recorded, a caller
        retrying under the same key until success would publish a draw of M(D) conditioned on
        F = ok, a distribution the charge does not cover (conditioning on an event of
        data-dependent probability p(D) can multiply an outcome's probability by 1/p(D),
        unbounded over neighbours). Because the first outcome is recorded before it is returned
        and every later call under the key replays it, what leaves under one key is one draw of
        the pair (F, M) -- M's output only if F = ok -- never a draw of M selected by retrying.
        (ii) *No re-measurement.* A failure that happens before any noise (``SolverAborted``: a
        MIP time limit) is a function of the data and of the solver's time; replaying it means
        one charge exposes that event once, never a fresh measurement per retry. The failure
        event itself is not made private by the ledger (its only data-dependent content is
        which of a fixed list of outcomes occurred): it is bounded to one observation per
        charge, after the charge. (iii) *Nothing else leaves.* A recorded failure is
        ``{"type", "raised", "message"}``: the public dpdist exception class it is replayed as,
        the name of the exception's class, and a fixed public message chosen by that class
        (:data:`_PUBLIC_MESSAGES`). The exception's own message (``str(e)``), which can hold
        values, counts, shapes or indices of the data (numpy, scikit-learn and solver messages
        do) and times, is neither stored nor shown; the error the caller sees, first time and on
        replay alike, is built from the record alone and carries no chained exception.

        To debug a ``compute`` that fails, call it without an accountant (every estimator runs
        ``compute`` directly when none is given), on data the debugger may see.
        """
        charged = self.charge(dataset, charge, key, params)
        if charged.result is not None:
            return _replay(charged.result)
        failure: str | None = None
        try:
            with charged_by_caller():  # the fits inside run under this charge (dpdist.privacy.guard)
                result = compute()
        except Exception as e:  # noqa: BLE001 -- every failure is the release's outcome (see above)
            if machine_failure(e):  # the machine's, not the release's: as an interrupted run
                raise
            failure = _failure_record(type(e))
        else:
            try:
                encoded = json.dumps(result, sort_keys=True, allow_nan=False)
            except Exception:  # noqa: BLE001 -- not recordable (NaN, inf, a non-JSON type): a failed release
                failure = _failure_record(None)
        # recorded and raised outside the handlers, so no exception of ``compute`` is chained to it
        if failure is not None:
            return _replay(self._record(dataset, key, failure))
        try:
            stored = self._record(dataset, key, encoded)
        except LedgerUnavailable as e:
            cause = getattr(e.__cause__, "sqlite_errorcode", None)
            if cause is None or cause & 0xFF not in (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR):
                raise  # a lock or a permission: not the result's size, a retry may draw anew
            # the disk refused the result: its fixed-size failure in its place (see above)
            stored = self._record(dataset, key, _failure_record(None, _UNWRITTEN))
        return _replay(stored)

    def _record(self, dataset: str, key: str, encoded: str) -> str:
        """Record ``encoded`` as the result of ``key`` unless a concurrent attempt recorded first; the stored one."""
        with self._transaction() as con:
            row = con.execute("SELECT result FROM releases WHERE dataset = ? AND key = ?", (dataset, key)).fetchone()
            if row[0] is not None:  # a concurrent attempt recorded first: its result stands
                return str(row[0])
            con.execute("UPDATE releases SET result = ? WHERE dataset = ? AND key = ?", (encoded, dataset, key))
        return encoded


_FAILURE = "__dpdist_failure__"

# The fixed public message of each failure a release can be replayed as (no value, count, index,
# shape or time of the data: the message depends on the exception's class only). A class not named
# here (or a non-dpdist exception) is replayed as ``SolverFailure`` with the generic message.
_PUBLIC_MESSAGES: dict[type[DPDistError], str] = {
    SolverAborted: "the release's solver work stopped before its certificate (the operator's nonprivate time "
    "limit, or an inner solve that rounding kept from its certificate)",
    ReleaseRefused: "the release was refused by its propose-test-release check: nothing was released",
    ParameterError: "the release's computation refused its input: a parameter, or a bound the data must meet "
    "(the values of X and y within their bounds; bounds='clip', data.bounds = \"clip\" or --clip "
    "clips each record instead)",
    SolverFailure: "the release's computation failed: nothing was released",
}
_UNRECORDABLE = "the release's result cannot be recorded (not JSON-serialisable, or not finite): nothing was released"
_UNWRITTEN = "the release's result could not be written to the ledger (its disk refused it): nothing was released"
_MESSAGES = frozenset(_PUBLIC_MESSAGES.values()) | {_UNRECORDABLE, _UNWRITTEN}


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


def machine_failure(e: BaseException) -> bool:
    """Whether ``e`` is the machine's failure rather than the computation's: an ``OSError`` (lost
    connections, files, Dask's ``CommClosedError``), ``MemoryError``, an ``ImportError`` (a
    worker's environment), a cancelled future, or Dask's ``KilledWorker`` / ``ClosedClientError``
    (named: the privacy core does not import distributed). None depends on the noise drawn."""
    if isinstance(e, (OSError, MemoryError, ImportError, concurrent.futures.CancelledError)):
        return True
    return any(
        c.__name__ in ("KilledWorker", "ClosedClientError") and c.__module__.partition(".")[0] == "distributed"
        for c in type(e).__mro__
    )


def _public_class(raised: type[BaseException] | None) -> type[DPDistError]:
    """The public dpdist class a failure of class ``raised`` is replayed as: its nearest ancestor
    with a public message (``ConfigError`` is a ``ParameterError``), else ``SolverFailure``."""
    for cls in raised.__mro__ if raised is not None else ():
        if cls in _PUBLIC_MESSAGES:
            return cls
    return SolverFailure


def _failure_record(raised: type[BaseException] | None, unrecorded: str = _UNRECORDABLE) -> str:
    """The JSON record of a failed release: built from the exception's *class* only, never its message.

    ``raised=None`` is a result that could not be recorded, for the fixed reason ``unrecorded``.
    """
    cls = _public_class(raised)
    message = _PUBLIC_MESSAGES[cls] if raised is not None else unrecorded
    doc = {"type": cls.__name__, "raised": raised.__name__ if raised is not None else None, "message": message}
    return json.dumps({_FAILURE: doc}, sort_keys=True)


def _public_failure(failure: Any) -> tuple[type[DPDistError], dict[str, Any]]:
    """The class to raise and the public record of a stored failure.

    A record written by an older dpdist may hold the exception's own message (``str(e)``, possibly
    data-derived): only a message from the fixed list is kept, anything else is replaced by the fixed
    message of its class, and the class name is kept only if it is an identifier.
    """
    failure = failure if isinstance(failure, dict) else {}
    by_name = {c.__name__: c for c in _PUBLIC_MESSAGES}
    cls = by_name.get(failure.get("type"), SolverFailure)
    raised = failure.get("raised")
    raised = raised if isinstance(raised, str) and raised.isidentifier() and len(raised) <= 100 else None
    message = failure.get("message")
    message = message if message in _MESSAGES else _PUBLIC_MESSAGES[cls]
    return cls, {"type": cls.__name__, "raised": raised, "message": message}


def _public_result(encoded: str) -> Any:
    """The recorded result as the audit trail shows it (a failure in its public form)."""
    result = json.loads(encoded)
    if isinstance(result, dict) and _FAILURE in result:
        return {_FAILURE: _public_failure(result[_FAILURE])[1]}
    return result


def _replay(encoded: str) -> Any:
    """The recorded result, or the recorded failure raised again (the same class, the same public message)."""
    result = json.loads(encoded)
    if isinstance(result, dict) and _FAILURE in result:
        cls, failure = _public_failure(result[_FAILURE])
        raised = f" ({failure['raised']})" if failure["raised"] else ""
        raise cls(
            f"{failure['message']}{raised} [recorded as this release's outcome: its charge stands, and a "
            "retry raises it again rather than drawing new noise]"
        )
    return result
