"""The central privacy accountant: a durable ledger of (epsilon, delta) budgets and releases.

Every release of a private result is charged to the ledger *before* the result leaves.
The ledger is a SQLite database in WAL mode with ``synchronous=FULL``:

* atomic: a charge is one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``); a process
  killed in the middle leaves it wholly recorded or wholly absent;
* serialised: ``BEGIN IMMEDIATE`` takes the write lock before the spent budget is read,
  so processes charging the same ledger at once can never overspend;
* idempotent: a release is identified by ``(dataset, key)``. Charging the same key again
  with the same parameters returns the recorded charge without spending anything; reusing
  a key for a different charge raises ``ReleaseKeyConflict``;
* exact: spent budgets are summed with ``math.fsum`` (correctly rounded), so ten charges
  of 0.1 spend exactly 1.0.

``Accountant.release`` is the one path for a mechanism's output: it charges, computes the
noisy result, records it in the same ledger and only then returns it. A retried release
with the same key returns the recorded result and never draws fresh noise for a charge
whose result was already released.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpdist.exceptions import BudgetExceeded, ParameterError, ReleaseKeyConflict, UnknownDataset
from dpdist.utils.files import private_sqlite
from dpdist.utils.validation import check_delta, check_epsilon

__all__ = ["Accountant", "BudgetStatus", "Release", "default_ledger_path"]

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS budgets (
    dataset       TEXT PRIMARY KEY,
    epsilon_total REAL NOT NULL CHECK (epsilon_total > 0),
    delta_total   REAL NOT NULL CHECK (delta_total >= 0 AND delta_total < 1),
    created       TEXT NOT NULL
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
    UNIQUE (dataset, key)
);
"""


def default_ledger_path() -> Path:
    """``$DPDIST_LEDGER`` if set, else ``~/.dpdist/ledger.sqlite`` (the CLI contract)."""
    env = os.environ.get("DPDIST_LEDGER")
    return Path(env) if env else Path.home() / ".dpdist" / "ledger.sqlite"


@dataclass(frozen=True)
class Release:
    """One charged release: what was spent, by which mechanism, under which key."""

    dataset: str
    key: str
    time: str
    mechanism: str
    epsilon: float
    delta: float
    result: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("result")
        return d


@dataclass(frozen=True)
class BudgetStatus:
    """A dataset's total, spent and remaining budget."""

    dataset: str
    epsilon_total: float
    delta_total: float
    epsilon_spent: float
    delta_spent: float
    releases: int

    @property
    def epsilon_remaining(self) -> float:
        return max(0.0, self.epsilon_total - self.epsilon_spent)

    @property
    def delta_remaining(self) -> float:
        return max(0.0, self.delta_total - self.delta_spent)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["epsilon_remaining"] = self.epsilon_remaining
        d["delta_remaining"] = self.delta_remaining
        return d


def _check_name(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ParameterError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class Accountant:
    """A durable privacy ledger at ``path`` (default: ``default_ledger_path()``).

    Safe to share between threads and processes: every call opens its own connection.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, timeout: float = 120.0) -> None:
        self.path = Path(path) if path is not None else default_ledger_path()
        self.timeout = float(timeout)
        # Test hook: called inside a charge's transaction, after the insert and before the
        # commit (used to kill a process mid-charge). Never set in production code.
        self._before_commit: Callable[[], None] | None = None
        private_sqlite(self.path)  # owner-only ledger (and its -wal/-shm), whatever the umask
        with self._transaction() as con:
            for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                con.execute(stmt)
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                con.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            elif version != _SCHEMA_VERSION:
                raise ParameterError(f"ledger {self.path} has schema version {version}, expected {_SCHEMA_VERSION}")

    # ------------------------------------------------------------------ connections

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        con.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        deadline = time.monotonic() + self.timeout
        while True:  # switching to WAL needs a moment without other writers
            try:
                mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                break
            except sqlite3.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        if mode.lower() != "wal":
            raise ParameterError(f"ledger {self.path} could not be put in WAL mode (got {mode!r})")
        con.execute("PRAGMA synchronous = FULL")
        con.execute("PRAGMA foreign_keys = ON")
        return con

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        con = self._connect()
        try:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        finally:
            con.close()

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        con = self._connect()
        try:
            yield con
        finally:
            con.close()

    # ---------------------------------------------------------------------- budgets

    def init_budget(self, dataset: str, epsilon: float, delta: float) -> BudgetStatus:
        """Set ``dataset``'s total budget. Re-running with the same totals is a no-op;
        a budget, once set, is never changed (a different total raises ParameterError)."""
        dataset = _check_name(dataset, "dataset")
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        with self._transaction() as con:
            row = con.execute(
                "SELECT epsilon_total, delta_total FROM budgets WHERE dataset = ?", (dataset,)
            ).fetchone()
            if row is None:
                con.execute(
                    "INSERT INTO budgets (dataset, epsilon_total, delta_total, created) VALUES (?, ?, ?, ?)",
                    (dataset, epsilon, delta, _now()),
                )
            elif tuple(row) != (epsilon, delta):
                raise ParameterError(
                    f"dataset {dataset!r} already has a budget (epsilon={row[0]:g}, delta={row[1]:g}) in "
                    f"{self.path}; a budget is never changed once set"
                )
            return self._status(con, dataset)

    def status(self, dataset: str) -> BudgetStatus:
        """Total, spent and remaining budget of ``dataset``."""
        with self._reader() as con:
            return self._status(con, _check_name(dataset, "dataset"))

    def datasets(self) -> list[BudgetStatus]:
        """The status of every dataset in the ledger."""
        with self._reader() as con:
            names = [r[0] for r in con.execute("SELECT dataset FROM budgets ORDER BY dataset")]
            return [self._status(con, n) for n in names]

    def history(self, dataset: str) -> list[Release]:
        """Every release charged to ``dataset``, oldest first (the audit trail)."""
        dataset = _check_name(dataset, "dataset")
        with self._reader() as con:
            self._budget_row(con, dataset)
            rows = con.execute(
                "SELECT dataset, key, time, mechanism, epsilon, delta, result FROM releases "
                "WHERE dataset = ? ORDER BY id",
                (dataset,),
            ).fetchall()
        return [Release(*r) for r in rows]

    def _budget_row(self, con: sqlite3.Connection, dataset: str) -> tuple[float, float]:
        row = con.execute("SELECT epsilon_total, delta_total FROM budgets WHERE dataset = ?", (dataset,)).fetchone()
        if row is None:
            raise UnknownDataset(
                f"no privacy budget for dataset {dataset!r} in ledger {self.path}; "
                f"set one with: dpdist budget init --dataset {dataset} --epsilon E --delta D"
            )
        return float(row[0]), float(row[1])

    def _status(self, con: sqlite3.Connection, dataset: str) -> BudgetStatus:
        eps_total, delta_total = self._budget_row(con, dataset)
        rows = con.execute("SELECT epsilon, delta FROM releases WHERE dataset = ?", (dataset,)).fetchall()
        return BudgetStatus(
            dataset=dataset,
            epsilon_total=eps_total,
            delta_total=delta_total,
            epsilon_spent=math.fsum(r[0] for r in rows),
            delta_spent=math.fsum(r[1] for r in rows),
            releases=len(rows),
        )

    # ---------------------------------------------------------------------- charges

    def charge(self, dataset: str, epsilon: float, delta: float, mechanism: str, key: str) -> Release:
        """Charge (epsilon, delta) to ``dataset`` for the release ``key``, before it is released.

        Returns the recorded charge. Raises ``BudgetExceeded`` (and records nothing) when
        the charge would overspend the total, ``UnknownDataset`` when the dataset has no
        budget, and ``ReleaseKeyConflict`` when ``key`` was already used for a different
        charge. Charging an existing key with the same parameters spends nothing more.
        """
        dataset = _check_name(dataset, "dataset")
        key = _check_name(key, "key")
        mechanism = _check_name(mechanism, "mechanism")
        epsilon = check_epsilon(epsilon)
        delta = check_delta(delta)
        with self._transaction() as con:
            existing = self._find(con, dataset, key)
            if existing is not None:
                if (existing.mechanism, existing.epsilon, existing.delta) != (mechanism, epsilon, delta):
                    raise ReleaseKeyConflict(
                        f"release key {key!r} of dataset {dataset!r} was charged as {existing.mechanism} "
                        f"(epsilon={existing.epsilon:g}, delta={existing.delta:g}); it cannot be reused for "
                        f"{mechanism} (epsilon={epsilon:g}, delta={delta:g})"
                    )
                return existing
            eps_total, delta_total = self._budget_row(con, dataset)
            rows = con.execute("SELECT epsilon, delta FROM releases WHERE dataset = ?", (dataset,)).fetchall()
            eps_after = math.fsum([*(r[0] for r in rows), epsilon])
            delta_after = math.fsum([*(r[1] for r in rows), delta])
            if eps_after > eps_total or delta_after > delta_total:
                raise BudgetExceeded(
                    dataset,
                    epsilon,
                    delta,
                    math.fsum(r[0] for r in rows),
                    math.fsum(r[1] for r in rows),
                    eps_total,
                    delta_total,
                )
            release = Release(dataset, key, _now(), mechanism, epsilon, delta)
            con.execute(
                "INSERT INTO releases (dataset, key, time, mechanism, epsilon, delta) VALUES (?, ?, ?, ?, ?, ?)",
                (dataset, key, release.time, mechanism, epsilon, delta),
            )
            if self._before_commit is not None:
                self._before_commit()
            return release

    def _find(self, con: sqlite3.Connection, dataset: str, key: str) -> Release | None:
        row = con.execute(
            "SELECT dataset, key, time, mechanism, epsilon, delta, result FROM releases WHERE dataset = ? AND key = ?",
            (dataset, key),
        ).fetchone()
        return None if row is None else Release(*row)

    def release(
        self,
        dataset: str,
        epsilon: float,
        delta: float,
        mechanism: str,
        key: str,
        compute: Callable[[], Any],
    ) -> Any:
        """Charge, then compute the private result, record it, and return it.

        ``compute`` draws the noise and returns a JSON-serialisable result. If ``key`` was
        released before, the recorded result is returned and ``compute`` is not called, so
        one charge never yields two different noisy results. If an earlier attempt was
        charged but died before recording its result, that result never left this method,
        and ``compute`` runs again under the same charge.
        """
        charged = self.charge(dataset, epsilon, delta, mechanism, key)
        if charged.result is not None:
            return json.loads(charged.result)
        result = compute()
        encoded = json.dumps(result, sort_keys=True, allow_nan=False)
        with self._transaction() as con:
            row = con.execute(
                "SELECT result FROM releases WHERE dataset = ? AND key = ?", (dataset, key)
            ).fetchone()
            if row[0] is not None:  # a concurrent attempt recorded first: its result stands
                return json.loads(row[0])
            con.execute("UPDATE releases SET result = ? WHERE dataset = ? AND key = ?", (encoded, dataset, key))
        return json.loads(encoded)
