"""The central privacy accountant: a durable ledger of (epsilon, delta) budgets and releases.

Every release of a private result is charged to the ledger *before* the result leaves. The ledger
is an SQLite file on a local disk (:mod:`dpdist.privacy.ledger.sqlite`: the default, for one person
on one machine) or a PostgreSQL database a team shares (:mod:`dpdist.privacy.ledger.postgres`),
chosen by its location: a path, or a ``postgresql://`` URL (read once, a mistyped URL refused:
:mod:`dpdist.privacy.ledger.backend`). Both hold the same tables
(:mod:`dpdist.privacy.ledger.schema`) and answer the same SQL, and on both a charge is:

* atomic: one transaction; a process killed in the middle leaves it wholly recorded or wholly absent;
* serialised: the budget check and the charge are one transaction that runs as if alone (SQLite's
  ``BEGIN IMMEDIATE`` write lock; PostgreSQL's locks on the budget), so processes charging the same
  ledger at once, from one machine or many, can never overspend (proof:
  [docs/proofs/ledger.md][proof-ledger-serialised]);
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
  Basic composition (the sum of each release's standalone (eps, delta)) is kept beside it;
* of constant cost: the filter's running sums are kept per budget (:mod:`dpdist.privacy.ledger.composed`,
  exact, updated in the charge's transaction), so a charge reads one row, not the dataset's history;
  :meth:`Accountant.verify` (``dpdist budget verify``) recomposes every budget from its releases and
  compares.

Datasets are keyed by the content hash of their store (``dataset``), which is private: it
tells two neighbouring datasets apart. What is printed, logged and reported is the
dataset's *name*, chosen by the user or drawn at random when the budget is set, never a
function of the data. Each dataset also has a secret *split key* (random, kept here), from
which :mod:`dpdist.data.split` decides each record's side of the train/test split.

``Accountant.release`` is the one path for a mechanism's output: it charges, computes the
noisy result, records its outcome in the same ledger and only then returns it. The outcome is
the result or, when the computation raises an ``Exception`` other than the machine's own
(a lost connection, memory, a killed worker), the failure -- recorded by its class and a fixed
public message, never the exception's own text (:mod:`dpdist.privacy.ledger.outcomes`). A retried
release with the same key replays the recorded outcome and never draws fresh noise (nor re-runs a
solver) for a charge whose outcome was already recorded (the claim's proof:
[docs/proofs/recorded-outcomes.md][proof-recorded-outcomes]).

The schema's versions and the upgrades between them are in :mod:`dpdist.privacy.ledger.schema`;
an older ledger is upgraded in place, in one transaction, when opened, and every row is kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dpdist.exceptions import (
    BudgetExceeded,
    LedgerUnavailable,
    ParameterError,
    ReleaseKeyConflict,
    UnknownDataset,
)
from dpdist.privacy.filter import FilterSums, PrivacyFilter
from dpdist.privacy.guard import charged_by_caller
from dpdist.privacy.ledger import composed, queries
from dpdist.privacy.ledger.backend import LedgerBackend, open_backend, parse_location
from dpdist.privacy.ledger.connection import LedgerConnection
from dpdist.privacy.ledger.outcomes import UNWRITTEN, failure_record, machine_failure, replay
from dpdist.privacy.ledger.records import (
    UNCOVERED_MARK,
    BudgetStatus,
    Release,
    spend_text,
    status_table,
)
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.utils.random import random_name
from dpdist.utils.validation import check_delta, check_epsilon

__all__ = [
    "Accountant",
    "BudgetStatus",
    "Release",
    "UNCOVERED_MARK",
    "default_ledger",
    "default_ledger_path",
    "machine_failure",
    "spend_text",
    "status_table",
]


def default_ledger_path() -> Path:
    """``$DPDIST_LEDGER`` if set, else ``~/.dpdist/ledger.sqlite`` (the CLI contract)."""
    env = os.environ.get("DPDIST_LEDGER")
    return Path(env) if env else Path.home() / ".dpdist" / "ledger.sqlite"


def default_ledger() -> str | Path:
    """The ledger used when none is named: ``$DPDIST_LEDGER`` (a path, or a ``postgresql://`` URL),
    else ``~/.dpdist/ledger.sqlite``. A mistyped URL there is refused (``ParameterError``), never taken
    as a path (:func:`dpdist.privacy.ledger.backend.parse_location`)."""
    env = os.environ.get("DPDIST_LEDGER")
    if not env:
        return default_ledger_path()
    location = parse_location(env)
    return location.text if location.is_url else Path(location.text)


def _check_name(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ParameterError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _today() -> str:
    """A release's time as stored: its UTC date only. Two charges' exact times would bracket how long
    the private computation between them took (a function of the data), and an analyst can read the
    table; the history is ordered by the release's id, never by its time."""
    return datetime.now(UTC).date().isoformat()


def params_hash(charge: Charge, params: dict[str, Any] | None) -> str:
    """SHA-256 of the mechanism, its privacy loss and the release's parameters."""
    doc = {"mechanism": charge.mechanism, "loss": json.loads(charge.loss.to_json()), "params": params or {}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class _Budget:
    """A budget as a charge's transaction reads it: its totals, public name and privacy filter."""

    dataset: str
    name: str
    epsilon_total: float
    delta_total: float
    pf: PrivacyFilter
    filter_json: str

    def status(self, state: composed.Composed, extra: list[FilterSums] | None = None) -> BudgetStatus:
        """The budget's status with its composed ``state`` and the terms of ``extra`` releases."""
        sums = sum(extra or [], state.sums)
        epsilon_spent, delta_spent = self.pf.measure(sums)
        return BudgetStatus(
            dataset=self.dataset,
            name=self.name,
            epsilon_total=self.epsilon_total,
            delta_total=self.delta_total,
            epsilon_spent=epsilon_spent,
            delta_spent=delta_spent,
            epsilon_basic=float(sums.epsilon),
            delta_basic=float(sums.delta),
            releases=sums.releases,
            privacy_filter=self.pf,
            uncovered=state.uncovered,
        )


class Accountant:
    """A durable privacy ledger at ``path``: an SQLite file's path, or a ``postgresql://`` URL
    (default: :func:`default_ledger`).

    Safe to share between threads and processes: every call runs its own transaction.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, timeout: float = 120.0, create: bool = True) -> None:
        """``create=False`` opens an existing ledger only (``UnknownDataset`` if there is none), to read:
        for commands that only read, so a mistyped path creates nothing and a read-only SQLite ledger
        reads and keeps its mode (:mod:`dpdist.privacy.ledger.sqlite`). A location that looks like a URL
        but is none dpdist reads is refused before anything is made
        (:func:`dpdist.privacy.ledger.backend.parse_location`)."""
        location = parse_location(path if path is not None else default_ledger())
        self.timeout = float(timeout)
        self.path: Path | str = location.text if location.is_url else Path(location.text)
        self._ledger: LedgerBackend = open_backend(location, self.timeout, create)

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._ledger.dialect

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

        def body(con: LedgerConnection) -> BudgetStatus:
            self._ledger.refuse_if_moved(con)
            row = queries.budget_row(con, dataset)
            if row is None:
                chosen = name or random_name()
                if queries.name_used(con, chosen):
                    raise ParameterError(f"the name {chosen!r} is already used by another dataset in {self.path}")
                text = PrivacyFilter.for_budget(epsilon, delta).to_json()
                queries.insert_budget(con, dataset, epsilon, delta, _now(), chosen, secrets.token_hex(32), text)
                composed.store(con, dataset, composed.Composed(text, 0, 0, FilterSums()), None)
            elif tuple(row[:2]) != (epsilon, delta):
                raise ParameterError(
                    f"dataset {row[2]!r} already has a budget (epsilon={row[0]:g}, delta={row[1]:g}) in "
                    f"{self.path}; a budget is never changed once set"
                )
            return self._status(con, dataset)

        return self._ledger.write(body)

    def has_budget(self, dataset: str) -> bool:
        return self._ledger.read(lambda con: queries.has_budget(con, dataset))

    def resolve(self, name_or_dataset: str) -> str:
        """The dataset (content hash) of a public name (or of the hash itself)."""
        found = self._ledger.read(lambda con: queries.dataset_named(con, name_or_dataset))
        if found is None:
            raise UnknownDataset(
                f"no dataset named {name_or_dataset!r} in ledger {self.path}; "
                "`dpdist budget show` lists the datasets it has"
            )
        return found

    def name(self, dataset: str) -> str:
        """The public name of ``dataset``."""
        return self._ledger.read(lambda con: self._budget_row(con, dataset)[2])

    def budget_of(self, store: Any) -> str:
        """The dataset a store's releases are charged to (``store.budget_id``: a split half's is
        its source's), after linking a budget the ledger holds for a half's own content.

        Ledgers of older dpdist releases let a train/test half have a budget of its own (its
        content hash) and charged its releases there. Those records are records of the source:
        the first time the half is used, that budget is linked to the source's (table ``links``,
        schema 3), and from then on the source's status and history include its releases, so
        the source's composition counts everything its records have been charged (nothing is
        moved or lost; the half's own budget still lists its releases). Raises
        ``UnknownDataset`` when there is such a budget and the source has none yet."""
        own, target = _check_name(store.dataset_id, "dataset"), _check_name(store.budget_id, "dataset")

        def link(con: LedgerConnection) -> None:
            self._ledger.refuse_if_moved(con)
            self._ledger.lock_budget(con, target, own)  # the link changes what the target's charges count
            if queries.has_budget(con, own) and not queries.is_linked(con, own):
                eps_total, delta_total, _, text = self._budget_row(con, target)
                stored = composed.kept(con, target)
                queries.insert_link(con, own, target, _now())
                # the target now counts the half's releases too: its state composed again, once
                pf = PrivacyFilter.from_json(eps_total, delta_total, text)
                composed.store(con, target, composed.recompose(con, target, pf, str(text)), stored)

        if own != target:
            self._ledger.write(link)
        return target

    def split_key(self, dataset: str) -> bytes:
        """The secret key that decides each record's side of the train/test split (never published)."""

        def body(con: LedgerConnection) -> bytes:
            self._budget_row(con, dataset)
            return bytes.fromhex(queries.split_key(con, dataset))

        return self._ledger.read(body)

    def status(self, dataset: str) -> BudgetStatus:
        """Total, spent and remaining budget of ``dataset``."""
        return self._ledger.read(lambda con: self._status(con, _check_name(dataset, "dataset")))

    def datasets(self) -> list[BudgetStatus]:
        """The status of every dataset in the ledger (ordered by name)."""

        def body(con: LedgerConnection) -> list[BudgetStatus]:
            return [self._status(con, n) for n in queries.datasets(con)]

        return self._ledger.read(body)

    def history(self, dataset: str) -> list[Release]:
        """Every release charged to ``dataset``, oldest first (the audit trail)."""
        dataset = _check_name(dataset, "dataset")

        def body(con: LedgerConnection) -> list[Release]:
            self._budget_row(con, dataset)
            return queries.releases(con, dataset)

        return self._ledger.read(body)

    def verify(self) -> list[composed.Verdict]:
        """Every budget's kept composed state beside a full recomposition of its releases (ordered by
        name): equal, bit for bit, unless the ledger was written around dpdist (``dpdist budget verify``).
        Reads every release: the check a charge no longer needs to make."""

        def body(con: LedgerConnection) -> list[composed.Verdict]:
            out = []
            for dataset in queries.datasets(con):
                eps_total, delta_total, _, text = self._budget_row(con, dataset)
                pf = PrivacyFilter.from_json(eps_total, delta_total, text)
                out.append(composed.verify(con, dataset, pf, str(text)))
            return out

        return self._ledger.read(body)

    def _budget_row(self, con: LedgerConnection, dataset: str) -> tuple[float, float, str, str | None]:
        """(epsilon_total, delta_total, name, the stored filter's JSON) of ``dataset``'s budget."""
        row = queries.budget_row(con, dataset)
        if row is None:
            raise UnknownDataset(
                f"no privacy budget for this dataset in ledger {self.path}; set one with: "
                "dpdist budget init STORE --epsilon E --delta D"
            )
        return row

    def _state(
        self, con: LedgerConnection, dataset: str
    ) -> tuple[_Budget, composed.Composed, composed.Composed | None]:
        """``dataset``'s budget, its composed state now (:func:`composed.current`) and its stored row."""
        eps_total, delta_total, name, text = self._budget_row(con, dataset)
        pf = PrivacyFilter.from_json(eps_total, delta_total, text)
        budget = _Budget(dataset, name, eps_total, delta_total, pf, str(text))
        state, stored = composed.current(con, dataset, pf, budget.filter_json)
        return budget, state, stored

    def _status(self, con: LedgerConnection, dataset: str, extra: list[PrivacyLoss] | None = None) -> BudgetStatus:
        budget, state, _ = self._state(con, dataset)
        return budget.status(state, [budget.pf.sums(loss) for loss in extra or []])

    # ---------------------------------------------------------------------- charges

    def check(self, dataset: str, *charges: Charge) -> BudgetStatus:
        """Raise ``BudgetExceeded`` unless ``charges`` would fit the budget now (reads, charges nothing).

        For a refusal before any work (a pre-flight check); the charge itself checks again.
        Returns the status the dataset would have after them.
        """

        def body(con: LedgerConnection) -> tuple[BudgetStatus, BudgetStatus]:
            before = self._status(con, _check_name(dataset, "dataset"))
            return before, self._status(con, dataset, [c.loss for c in charges])

        before, after = self._ledger.read(body)
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
        parameters spends nothing more. The budget check and the insert are one transaction that
        holds the budget's lock (run again, whole, when a PostgreSQL server aborts it).
        """
        dataset = _check_name(dataset, "dataset")
        key = _check_name(key, "key")
        if not isinstance(charge, Charge):
            raise ParameterError(f"charge must be a dpdist.privacy.loss.Charge, got {type(charge).__name__}")
        _check_name(charge.mechanism, "mechanism")
        digest = params_hash(charge, params)
        return self._ledger.write(lambda con: self._charge(con, dataset, charge, key, digest))

    def _charge(self, con: LedgerConnection, dataset: str, charge: Charge, key: str, digest: str) -> Release:
        """The body of :meth:`charge`'s transaction: the existing charge of ``key``, or a new one if it fits."""
        self._ledger.refuse_if_moved(con)
        self._ledger.lock_budget(con, dataset)  # the charges of one budget one after another
        mechanism, loss = charge.mechanism, charge.loss
        existing = queries.find_release(con, dataset, key)
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
        budget, state, stored = self._state(con, dataset)
        term = budget.pf.sums(loss)
        status = budget.status(state, [term])
        if not status.epsilon_spent <= status.epsilon_total:
            before = budget.status(state)
            raise BudgetExceeded(
                status.name,
                loss.epsilon,
                loss.delta,
                before.epsilon_spent,
                status.epsilon_spent,
                before.epsilon_total,
                before.delta_total,
            )
        # a budget this one is linked to counts its releases too (Accountant.budget_of): its state grows as well
        target = queries.link_target(con, dataset)
        linked = self._state(con, target) if target is not None else None
        covered = bool(charge.covered)
        release = Release(dataset, key, _today(), mechanism, loss.epsilon, loss.delta, None, loss, digest, covered)
        release_id = queries.insert_release(con, release)
        composed.store(con, dataset, state.plus(term, covered, release_id), stored)
        if linked is not None:
            other, other_state, other_stored = linked
            new = other_state.plus(other.pf.sums(loss), covered, release_id)
            composed.store(con, other.dataset, new, other_stored)
        return release

    def recorded(self, dataset: str, key: str) -> bool:
        """Whether ``key`` was released on ``dataset`` with a recorded outcome (a release under it replays)."""
        dataset, key = _check_name(dataset, "dataset"), _check_name(key, "key")
        rel = self._ledger.read(lambda con: queries.find_release(con, dataset, key))
        return rel is not None and rel.result is not None

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

        **Every outcome is recorded**: a result, or any ``Exception`` of ``compute`` (a dpdist error, a
        numpy or scikit-learn error, ...) recorded by its class and a fixed public message; a result that
        cannot be recorded, or that the ledger refuses for its size, is recorded as a failure. The charge
        stands and every retry under the key replays the outcome without calling ``compute``. What
        propagates unrecorded, as an interrupted run, is a ``BaseException`` that is not an ``Exception``
        and the machine's own failures (:func:`machine_failure`). The claim that this keeps a retry from
        drawing twice, and its proof: [docs/proofs/recorded-outcomes.md][proof-recorded-outcomes].
        """
        charged = self.charge(dataset, charge, key, params)
        if charged.result is not None:
            return replay(charged.result)
        failure: str | None = None
        try:
            with charged_by_caller():  # the fits inside run under this charge (dpdist.privacy.guard)
                result = compute()
        except Exception as e:  # noqa: BLE001 -- every failure is the release's outcome (see above)
            if machine_failure(e):  # the machine's, not the release's: as an interrupted run
                raise
            failure = failure_record(type(e))
        else:
            try:
                encoded = json.dumps(result, sort_keys=True, allow_nan=False)
            except Exception:  # noqa: BLE001 -- not recordable (NaN, inf, a non-JSON type): a failed release
                failure = failure_record(None)
        # recorded and raised outside the handlers, so no exception of ``compute`` is chained to it
        if failure is not None:
            return replay(self._record(charged.dataset, charged.key, failure))
        try:
            stored = self._record(charged.dataset, charged.key, encoded)
        except Exception as e:  # noqa: BLE001 -- any refusal of the result but the machine's may depend on its size
            if isinstance(e, (LedgerUnavailable, ParameterError)) and not self._ledger.refused_by_size(e):
                raise  # a lock, a permission, a lost server, a moved ledger: not the result, a retry may draw anew
            # the result was refused (its size: a full disk, a limit, a timeout): its fixed-size failure in its place
            stored = self._record(charged.dataset, charged.key, failure_record(None, UNWRITTEN))
        return replay(stored)

    def _record(self, dataset: str, key: str, encoded: str) -> str:
        """Record ``encoded`` as the result of ``key`` unless a concurrent attempt recorded first; the stored one."""

        def body(con: LedgerConnection) -> str:
            self._ledger.refuse_if_moved(con)
            stored = queries.result_of(con, dataset, key)
            if stored is not None:  # a concurrent attempt recorded first: its result stands
                return stored
            queries.record_result(con, dataset, key, encoded)
            return encoded

        return self._ledger.write(body)
