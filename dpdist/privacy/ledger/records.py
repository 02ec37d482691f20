"""What a ledger holds, as Python values: a release's record, a budget's status, and their texts.

Both ledger backends (:mod:`dpdist.privacy.ledger.sqlite`, :mod:`dpdist.privacy.ledger.postgres`)
store the same rows; these are read from them by :class:`dpdist.privacy.accountant.Accountant`.
A dataset is shown by its public *name*, never by its content hash (which tells neighbouring
datasets apart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dpdist.privacy.filter import PrivacyFilter
from dpdist.privacy.ledger.outcomes import public_result
from dpdist.privacy.loss import PrivacyLoss

__all__ = [
    "RELEASE_COLUMNS",
    "UNCOVERED_MARK",
    "BudgetStatus",
    "Release",
    "deltas_past_basic",
    "release_row",
    "spend_text",
    "status_table",
]

# how a release run outside the privacy guarantee (``covered=False``) is marked wherever it is listed
UNCOVERED_MARK = "NOT COVERED (run outside the privacy guarantee: an operator's opt-in)"

RELEASE_COLUMNS = "dataset, key, time, mechanism, epsilon, delta, result, loss, params, covered"


def release_row(row: tuple[Any, ...]) -> Release:
    """A ``Release`` from a row of ``RELEASE_COLUMNS``."""
    return Release(
        dataset=row[0],
        key=row[1],
        time=row[2],
        mechanism=row[3],
        epsilon=row[4],
        delta=row[5],
        result=row[6],
        loss=None if row[7] is None else PrivacyLoss.from_json(row[7]),
        params=row[8],
        covered=bool(row[9]),
    )


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

        ``time`` is the UTC *date* of the charge: two charges' times a few seconds apart would publish
        how long the private computation between them took. The ledger stores a new release's date
        only (its tables can be read by SQL); releases of an older dpdist keep their full time there.
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
            "result": None if self.result is None else public_result(self.result),
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
    """Budgets as a compact table (``BudgetStatus.to_dict()`` rows): dataset | budget | spent (the filter's
    figure) | the basic sum of the releases' epsilons beside it | left | releases."""
    header = ("dataset", "epsilon", "delta", "spent", "basic", "left", "releases", "not covered")
    cells = [
        (
            r["dataset"],
            f"{r['epsilon_total']:g}",
            f"{r['delta_total']:g}",
            "past" if r["epsilon_spent"] is None else f"{r['epsilon_spent']:.4g}",
            f"{r['epsilon_basic']:.4g}",
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


def deltas_past_basic(status: BudgetStatus) -> float | None:
    """The releases' deltas added, when they pass the share of the budget's delta that lets basic composition
    add their epsilons (a refusal then has delta as its cause); else None."""
    pf = status.privacy_filter
    if pf is None or pf.order is None or status.delta_basic <= pf.delta_basic:
        return None
    if status.epsilon_basic > status.epsilon_total:  # the epsilons alone pass the total: not delta's doing
        return None
    return float(status.delta_basic)
