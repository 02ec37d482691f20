"""Each budget's composed state, kept in the ledger: what a charge's check reads instead of the history.

A charge is admitted when the budget's privacy filter admits the dataset's releases with it
(:class:`dpdist.privacy.filter.PrivacyFilter`), and the filter depends on the releases only through
a few running sums (:class:`dpdist.privacy.filter.FilterSums`). The ledger keeps those sums per budget
(table ``composed``: each sum as the exact decimal text of a sum of floats, the filter they are at,
the largest release id they count), written in the transaction of every charge, link or upgrade that
changes them, so a charge reads one row instead of every earlier release: its cost does not grow with
the dataset's history. A row that is not current (releases written around dpdist, a filter changed
by hand) is recomposed from the releases for that call, and a charge stores the recomposition; a row
only grows (:mod:`.schema`'s triggers), and :func:`verify` (``dpdist budget verify``) compares each
with a full recomposition.

Claim: the filter decides every charge from a kept state exactly as from a full recomposition of the
budget's releases. Proof: [docs/proofs/ledger.md][proof-ledger-composed].
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpdist.privacy.filter import FilterSums, PrivacyFilter
from dpdist.privacy.ledger import queries
from dpdist.privacy.ledger.connection import LedgerConnection
from dpdist.privacy.ledger.records import BudgetStatus

__all__ = ["COLUMNS", "Budget", "Composed", "Verdict", "current", "exact_text", "recompose", "store", "verify"]

# the columns of a budget's row, in the order they are stored, copied (ledger migrate) and digested
COLUMNS = (
    "dataset",
    "filter",
    "last_id",
    "releases",
    "uncovered",
    "unbounded",
    "epsilon",
    "delta",
    "approx_epsilon",
    "approx_delta",
    "renyi",
)
_EXACT = ("epsilon", "delta", "approx_epsilon", "approx_delta", "renyi")


@dataclass(frozen=True)
class Composed:
    """A budget's composed state: its filter's sums, the releases run outside the guarantee, the filter
    (its stored JSON) the sums are at, and the largest release id they count (0: none)."""

    filter: str
    last_id: int
    uncovered: int
    sums: FilterSums

    def covers(self, other: Composed) -> bool:
        """Whether this is a later state of the same budget's releases than ``other`` (or the same)."""
        return (
            self.filter == other.filter
            and self.last_id >= other.last_id
            and self.uncovered >= other.uncovered
            and self.sums.covers(other.sums)
        )

    def plus(self, loss_sums: FilterSums, covered: bool, release_id: int) -> Composed:
        """The state after one more release (``loss_sums``: its terms, :meth:`PrivacyFilter.sums`)."""
        return Composed(self.filter, release_id, self.uncovered + (not covered), self.sums + loss_sums)


def exact_text(x: Fraction) -> str:
    """The exact decimal text of a sum of floats (a dyadic rational: its decimal expansion ends)."""
    n, d = x.numerator, x.denominator
    k = d.bit_length() - 1
    if d != 1 << k:
        raise ValueError(f"{x} is not a sum of floats")
    digits = str(abs(n) * 5**k).rjust(k + 1, "0")
    text = f"{digits[:-k]}.{digits[-k:]}" if k else digits
    return f"-{text}" if n < 0 else text


def _row(composed: Composed, dataset: str) -> tuple[Any, ...]:
    s = composed.sums
    return (
        dataset,
        composed.filter,
        composed.last_id,
        s.releases,
        composed.uncovered,
        s.unbounded,
        *(exact_text(getattr(s, name)) for name in _EXACT),
    )


def kept(con: LedgerConnection, dataset: str) -> Composed | None:
    """The stored state of ``dataset``'s budget (``None`` if it has none)."""
    row = con.execute(f"SELECT {', '.join(COLUMNS[1:])} FROM composed WHERE dataset = ?", (dataset,)).fetchone()
    if row is None:
        return None
    text, last_id, releases, uncovered, unbounded, *exact = row
    epsilon, delta, approx_epsilon, approx_delta, renyi = (Fraction(str(v)) for v in exact)
    sums = FilterSums(int(releases), epsilon, delta, approx_epsilon, approx_delta, renyi, int(unbounded))
    return Composed(str(text), int(last_id), int(uncovered), sums)


def latest_id(con: LedgerConnection, dataset: str) -> int:
    """The largest id of the releases a budget counts (its own and its linked budgets'; 0: none), each
    read from the index on (dataset, id)."""
    aliases = con.execute("SELECT alias FROM links WHERE dataset = ?", (dataset,)).fetchall()
    counted = [dataset, *(str(r[0]) for r in aliases)]
    ids = [con.execute("SELECT max(id) FROM releases WHERE dataset = ?", (d,)).fetchone()[0] for d in counted]
    return max((int(i) for i in ids if i is not None), default=0)


def recompose(con: LedgerConnection, dataset: str, pf: PrivacyFilter, filter_json: str) -> Composed:
    """The state of ``dataset``'s budget composed afresh from every release it counts."""
    releases = queries.releases(con, dataset)
    sums = sum((pf.sums(r.privacy_loss) for r in releases), FilterSums())
    return Composed(filter_json, latest_id(con, dataset), sum(not r.covered for r in releases), sums)


def current(
    con: LedgerConnection, dataset: str, pf: PrivacyFilter, filter_json: str
) -> tuple[Composed, Composed | None]:
    """The budget's state now -- its stored row when it is current (one row and an index lookup per
    budget it counts), else a recomposition -- and its stored row (``None`` when it has none)."""
    stored = kept(con, dataset)
    if stored is not None and stored.filter == filter_json and stored.last_id == latest_id(con, dataset):
        return stored, stored
    return recompose(con, dataset, pf, filter_json), stored


def store(con: LedgerConnection, dataset: str, new: Composed, stored: Composed | None) -> None:
    """Write ``new`` as the budget's state when it covers the stored one (it always does after a charge
    on a current state); else leave the row as it is (its later calls recompose; :func:`verify` says so)."""
    if stored is None:
        marks = ", ".join("?" * len(COLUMNS))
        con.execute(f"INSERT INTO composed ({', '.join(COLUMNS)}) VALUES ({marks})", _row(new, dataset))
    elif new.covers(stored) and new != stored:
        sets = ", ".join(f"{c} = ?" for c in COLUMNS[1:])
        con.execute(f"UPDATE composed SET {sets} WHERE dataset = ?", (*_row(new, dataset)[1:], dataset))


@dataclass(frozen=True)
class Verdict:
    """A budget's stored state beside a full recomposition of its releases."""

    dataset: str
    stored: Composed | None
    recomposed: Composed

    @property
    def equal(self) -> bool:
        return self.stored == self.recomposed

    def differences(self) -> list[str]:
        """The fields that differ (empty when equal)."""
        if self.stored is None:
            return ["no stored state"]
        a, b = self.stored, self.recomposed
        out = [f for f in ("filter", "last_id", "uncovered") if getattr(a, f) != getattr(b, f)]
        return out + [f for f in ("releases", "unbounded", *_EXACT) if getattr(a.sums, f) != getattr(b.sums, f)]


def verify(con: LedgerConnection, dataset: str, pf: PrivacyFilter, filter_json: str) -> Verdict:
    """``dataset``'s stored state and a full recomposition of its releases (equal, bit for bit, unless
    the ledger was written around dpdist)."""
    return Verdict(dataset, kept(con, dataset), recompose(con, dataset, pf, filter_json))


@dataclass(frozen=True)
class Budget:
    """A budget as a charge's transaction reads it: its totals, public name and privacy filter."""

    dataset: str
    name: str
    epsilon_total: float
    delta_total: float
    pf: PrivacyFilter
    filter_json: str

    def status(self, state: Composed, extra: list[FilterSums] | None = None) -> BudgetStatus:
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
