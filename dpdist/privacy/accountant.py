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
from dpdist.privacy.ledger import artefacts, composed, queries
from dpdist.privacy.ledger.backend import LedgerBackend, open_backend, parse_location
from dpdist.privacy.ledger.connection import LedgerConnection
from dpdist.privacy.ledger.outcomes import UNWRITTEN, failure_record, machine_failure, public_result, replay
from dpdist.privacy.ledger.paths import default_ledger_path
from dpdist.privacy.ledger.records import (
    UNCOVERED_MARK,
    BudgetStatus,
    Release,
    deltas_past_basic,
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


def _check_charge(charge: object) -> Charge:
    if not isinstance(charge, Charge):
        raise ParameterError(f"charge must be a dpdist.privacy.loss.Charge, got {type(charge).__name__}")
    _check_name(charge.mechanism, "mechanism")
    return charge


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
        self.artefacts: Path = artefacts.artefact_root(location.text, self._ledger.dialect)

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
    ) -> tuple[composed.Budget, composed.Composed, composed.Composed | None]:
        """``dataset``'s budget, its composed state now (:func:`composed.current`) and its stored row."""
        eps_total, delta_total, name, text = self._budget_row(con, dataset)
        pf = PrivacyFilter.from_json(eps_total, delta_total, text)
        budget = composed.Budget(dataset, name, eps_total, delta_total, pf, str(text))
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
        return self._ledger.read(lambda con: self._refuse_unless_fits(con, _check_name(dataset, "dataset"), charges))

    def _refuse_unless_fits(self, con: LedgerConnection, dataset: str, charges: tuple[Charge, ...]) -> BudgetStatus:
        """The body of :meth:`check`: ``BudgetExceeded`` unless ``charges`` fit ``dataset``'s budget now."""
        before, after = self._status(con, dataset), self._status(con, dataset, [c.loss for c in charges])
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
                deltas_past_basic(after),
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
        dataset, key = _check_name(dataset, "dataset"), _check_name(key, "key")
        digest = params_hash(_check_charge(charge), params)
        return self._ledger.write(lambda con: self._charge(con, dataset, charge, key, digest))

    def _charge(self, con: LedgerConnection, dataset: str, charge: Charge, key: str, digest: str) -> Release:
        """The body of :meth:`charge`'s transaction: the existing charge of ``key``, or a new one if it fits."""
        self._ledger.refuse_if_moved(con)
        self._ledger.lock_budget(con, dataset)  # the charges of one budget one after another
        return self._add(con, dataset, charge, key, digest)

    def _add(self, con: LedgerConnection, dataset: str, charge: Charge, key: str, digest: str) -> Release:
        """:meth:`_charge` once the budget is locked."""
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
                deltas_past_basic(status),
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

        A released model's weights are written to an artefact (:mod:`dpdist.privacy.ledger.artefacts`,
        in :attr:`artefacts`) before its row, which refers to it by its SHA-256, is recorded; the
        directory is checked writable before the charge. The model returned, and every replay, is read
        back whole (its digest checked).
        """
        self._check_deliverable(dataset, key)
        charged = self.charge(dataset, charge, key, params)
        if charged.result is not None:
            return self._replay(charged.result)
        name = self._ledger.read(lambda con: self._budget_row(con, charged.dataset)[2])
        with artefacts.Attempt(self.artefacts, self._where(), name, charged.key) as attempt:
            stored = self._ledger.read(lambda con: queries.result_of(con, charged.dataset, charged.key))
            if stored is None:  # no attempt recorded it: what a killed one wrote is removed before drawing
                attempt.clear_left(self._references)
                stored = self._attempt(charged, compute, attempt)
                attempt.settle(stored, self._references)  # another attempt's outcome won: this draw's files go
            attempt.done()
        return self._replay(stored)

    def release_first(
        self,
        dataset: str,
        first: tuple[Charge, str, Callable[[], Any], dict[str, Any]],
        planned: Charge,
        then: tuple[str, Callable[[Any], tuple[Charge, dict[str, Any]]]],
    ) -> Any:
        """:meth:`release` of ``first`` = (charge, key, compute, params), and the charge of the release that
        follows it, ``then`` = (its key, its (charge, params) from ``first``'s result), as one plan.

        For a release whose charge is computed from an earlier one's result (a model's from its noisy
        count): in one transaction under the budget's lock, ``first`` is charged only if it and ``planned``
        (the follower's charge planned from public values) fit together (else ``BudgetExceeded``, nothing
        charged), its result is drawn and recorded, and the follower is charged, so no concurrent release
        takes the budget between the two. The follower's own :meth:`release` finds its charge made. A
        follower that does not fit after all (its charge at the released value above the planned one) or
        whose key conflicts is left to its own release to refuse, ``first``'s result then being public.
        A ``first`` charged before takes :meth:`release`'s path. Its noise is drawn inside the transaction:
        a transaction the server runs again draws again, and only the committed draw leaves (the claim:
        [docs/proofs/ledger.md][proof-ledger-plans]).
        """
        charge, key, compute, params = first
        dataset, key, next_key = _check_name(dataset, "dataset"), _check_name(key, "key"), _check_name(then[0], "key")
        digest = params_hash(_check_charge(charge), params)
        _check_charge(planned)
        self._check_deliverable(dataset, key)
        self._check_deliverable(dataset, next_key)

        def body(con: LedgerConnection) -> str | None:
            self._ledger.refuse_if_moved(con)
            self._ledger.lock_budget(con, dataset)
            if queries.find_release(con, dataset, key) is not None:
                return None
            self._refuse_unless_fits(con, dataset, (charge, planned))
            self._add(con, dataset, charge, key, digest)
            encoded = self._outcome(compute, None)
            queries.record_result(con, dataset, key, encoded)
            try:  # the follower's charge and parameters, from the recorded (now public) result
                follower, follower_params = then[1](replay(encoded))
            except Exception:  # noqa: BLE001 -- a failed first, or raised again by the follower's own release
                return encoded
            try:
                self._add(con, dataset, follower, next_key, params_hash(follower, follower_params))
            except (BudgetExceeded, ReleaseKeyConflict):
                pass  # refused by the follower's own release, after this one is public
            return encoded

        stored = self._ledger.write(body)
        if stored is None:
            return self.release(dataset, charge, key, compute, params)
        return self._replay(stored)

    def _check_deliverable(self, dataset: str, key: str) -> None:
        """Refuse before any charge a release whose model could not be written (its artefacts' directory)."""
        row = self._ledger.read(lambda con: queries.budget_row(con, dataset)) if isinstance(dataset, str) else None
        tag = None
        if row and isinstance(key, str):
            tag = artefacts.attempt_path(self.artefacts, self._where(), row[2], key)
        artefacts.check_writable(self.artefacts, tag)

    def _where(self) -> str:
        """The ledger's location as its artefacts' attempts name it."""
        return str(self.path.resolve()) if isinstance(self.path, Path) else self.path

    def _attempt(self, charged: Release, compute: Callable[[], Any], attempt: artefacts.Attempt) -> str:
        """Compute, write a model's artefacts and record the outcome of ``charged`` (:meth:`release`)."""
        encoded = self._outcome(compute, attempt)
        try:
            return self._record(charged.dataset, charged.key, encoded)
        except Exception as e:  # noqa: BLE001 -- any refusal of the result but the machine's may depend on its size
            if isinstance(e, (LedgerUnavailable, ParameterError)) and not self._ledger.refused_by_size(e):
                raise  # a lock, a permission, a lost server, a moved ledger: not the result, a retry may draw anew
            # the result was refused (its size: a full disk, a limit, a timeout): its fixed-size failure in its place
            return self._record(charged.dataset, charged.key, failure_record(None, UNWRITTEN))

    def _outcome(self, compute: Callable[[], Any], attempt: artefacts.Attempt | None) -> str:
        """The row's text of ``compute``'s outcome: its result (a model's weights written to their artefact in
        ``attempt`` first), or its failure's record (recorded outside the handlers, so no exception of
        ``compute`` is chained to its replay)."""
        try:
            with charged_by_caller():  # the fits inside run under this charge (dpdist.privacy.guard)
                result = compute()
        except Exception as e:  # noqa: BLE001 -- every failure is the release's outcome (see above)
            if machine_failure(e):  # the machine's, not the release's: as an interrupted run
                raise
            return failure_record(type(e))
        try:
            return self._encode(result, attempt)
        except OSError as e:  # the artefact's write: its size refused (a full disk), else the machine's
            if not artefacts.refused_by_size(e):
                raise
            return failure_record(None, UNWRITTEN)
        except Exception:  # noqa: BLE001 -- not recordable (NaN, inf, a non-JSON type): a failed release
            return failure_record(None)

    def _references(self, digest: str) -> bool:
        """Whether any release's recorded result refers to the artefact ``digest`` (a full scan: run only
        when a killed attempt left files)."""
        pattern = f'%"sha256": "{digest}"%'
        return self._ledger.read(
            lambda con: con.execute("SELECT 1 FROM releases WHERE result LIKE ?", (pattern,)).fetchone() is not None
        )

    def _encode(self, result: Any, attempt: artefacts.Attempt | None) -> str:
        """The row's text of ``result``; a model's weights written to their artefact first (durably)."""
        row, found = artefacts.split_models(result, self.artefacts)
        encoded = json.dumps(row, sort_keys=True, allow_nan=False)
        if found:
            if attempt is None:
                raise TypeError("a model is released by Accountant.release, not as the first of a plan")
            for artefact in found:
                attempt.write(artefact)
        return encoded

    def _replay(self, stored: str) -> Any:
        """The recorded outcome (:func:`replay`), a model's weights read back from its artefact."""
        return artefacts.expand(replay(stored), self.artefacts)

    def result(self, release: Release) -> Any:
        """A release's recorded result as published (a failure in its public form), a model whole: its
        weights read from its artefact, the digest its row holds checked (``ParameterError`` if the file is
        missing or differs). ``None``: no outcome recorded."""
        if release.result is None:
            return None
        return artefacts.expand(public_result(release.result), self.artefacts)

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
