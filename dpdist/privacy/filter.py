"""The ledger's admission rule: a privacy *filter* for releases chosen after seeing earlier ones.

A dataset's budget (epsilon, delta) is spent by releases whose mechanisms and parameters may each
depend on every earlier output; composition theorems for parameters fixed in advance do not cover
that. The ledger charges a release only if the sequence with it :meth:`~PrivacyFilter.admits`: either
(P) the releases' standalone epsilons add to at most epsilon and their deltas to at most delta/4, or
(R) their Renyi divergences at an order alpha* fixed with the budget, plus the approximate parts'
epsilons, convert (Balle et al. 2020, Thm. 21, at delta/2) to at most epsilon, the approximate parts'
deltas adding to at most delta/4. The decision depends on the releases through a few exact sums only
(:class:`FilterSums`), which the ledger keeps per budget.

Claim: the whole interaction under this filter, refusals included, is (epsilon, delta)-DP under
ADD/REMOVE one record, and the filter is never looser than composing releases fixed in advance.
The rule in full and the proof: [docs/proofs/privacy-filter.md][proof-privacy-filter].
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from fractions import Fraction
from typing import Any

from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import ORDERS, Part, PrivacyLoss, rdp_curve
from dpdist.utils.validation import check_delta, check_epsilon

__all__ = ["FilterSums", "PrivacyFilter"]


def _conversion_offset(alpha: float, delta: float) -> float:
    """epsilon - S of Balle et al. 2020 (Thm. 21) at order alpha: ln(1 - 1/alpha) - ln(delta alpha) / (alpha - 1)."""
    return math.log1p(-1.0 / alpha) - math.log(delta * alpha) / (alpha - 1.0)


def _rdp_at(losses: Iterable[PrivacyLoss], alpha: float) -> float:
    """The Renyi divergence at ``alpha`` of the losses' RDP parts composed (dp-accounting's curves).

    Composed on the whole grid and read at ``alpha``: repeat-and-select's bound at one order uses
    the other orders (its lambda-hat), which depend on no data.
    """
    parts = [p for loss in losses for p in loss.parts]
    if not any(p[0] != "approx" for p in parts):
        return 0.0
    orders = tuple(sorted(set(ORDERS) | {alpha}))
    return float(rdp_curve(parts, orders)[orders.index(alpha)])


@functools.lru_cache(maxsize=4096)
def _release_rdp_at(parts: tuple[Part, ...], alpha: float) -> float:
    """:func:`_rdp_at` of one release's parts (a ledger charges the same few losses again and again)."""
    return _rdp_at([PrivacyLoss(parts, 1.0)], alpha)


@dataclass(frozen=True)
class FilterSums:
    """What a :class:`PrivacyFilter` decides from: running sums over a sequence of releases, exact.

    Every sum is of floats (each release's figures) and is kept as an exact ``Fraction``, so the sums
    of a sequence do not depend on the order or the grouping of their terms, and a sum kept up to date
    one release at a time equals the sum of the whole sequence bit for bit (the ledger keeps one per
    budget: :mod:`dpdist.privacy.ledger.composed`). Each is rounded once, to the nearest float
    (``math.fsum``'s result), where the filter compares it with a bound.
    """

    releases: int = 0
    epsilon: Fraction = Fraction(0)  # the releases' standalone epsilons (route (P))
    delta: Fraction = Fraction(0)  # and their standalone deltas
    approx_epsilon: Fraction = Fraction(0)  # the approximate parts' epsilons (route (R))
    approx_delta: Fraction = Fraction(0)  # and their deltas
    renyi: Fraction = Fraction(0)  # the releases' Renyi divergences at alpha*, each counted at least 0
    unbounded: int = 0  # releases whose divergence at alpha* is not finite: route (R) never holds again

    def __add__(self, other: FilterSums) -> FilterSums:
        return FilterSums(
            self.releases + other.releases,
            self.epsilon + other.epsilon,
            self.delta + other.delta,
            self.approx_epsilon + other.approx_epsilon,
            self.approx_delta + other.approx_delta,
            self.renyi + other.renyi,
            self.unbounded + other.unbounded,
        )

    def covers(self, other: FilterSums) -> bool:
        """Whether every sum and count is at least ``other``'s (a later state of the same sequence is)."""
        return all(a >= b for a, b in zip(astuple(self), astuple(other), strict=True))


# route (R)'s figure is rounded up by this relative amount: a sum a few ulps below its bound in
# floating point but above it in exact arithmetic is not admitted (the float error of the sums
# themselves is ~1e-15 relative, well inside it)
_ROUND_UP = 1e-12


@dataclass(frozen=True)
class PrivacyFilter:
    """The admission rule of a budget (epsilon, delta): the module doc, and its proof page.

    Build it with :meth:`for_budget` when a budget is set, and from the ledger's record
    (:meth:`from_json`) after that.
    """

    epsilon: float
    delta: float
    order: float | None  # alpha*; None when delta is 0 (no route (R))
    conversion_share: float = 0.5  # delta_conversion / delta
    basic_share: float = 0.25  # delta_basic / delta
    approx_share: float = 0.25  # delta_approx / delta

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_delta(self.delta)
        shares = (self.conversion_share, self.basic_share, self.approx_share)
        if not (all(0.0 <= x <= 1.0 for x in shares) and math.fsum(shares) <= 1.0):
            raise ParameterError(
                f"a privacy filter's delta shares must be in [0, 1] and add to at most 1, got {shares}"
            )
        if self.order is not None and not (self.order > 1.01 and math.isfinite(self.order)):
            raise ParameterError(f"a privacy filter's Renyi order must be finite and > 1.01, got {self.order!r}")
        if self.order is None and self.delta > 0.0:
            raise ParameterError("a privacy filter with delta > 0 needs its Renyi order")

    @classmethod
    def for_budget(cls, epsilon: float, delta: float) -> PrivacyFilter:
        """The filter of a new budget: alpha* is the grid order that admits the largest zCDP rho."""
        epsilon, delta = check_epsilon(epsilon), check_delta(delta)
        if delta == 0.0:
            return cls(epsilon, delta, None)
        conversion = cls.conversion_share * delta
        if min(cls.conversion_share, cls.basic_share, cls.approx_share) * delta == 0.0:
            raise ParameterError(
                f"delta={delta:g} is too small to split into the filter's parts: give 0 or a larger delta"
            )
        best, best_rho = None, -math.inf
        for alpha in ORDERS:
            if alpha <= 1.01:  # the conversion is not stable there (dp-accounting's own cut-off)
                continue
            rho = (epsilon - _conversion_offset(alpha, conversion)) / alpha
            if rho > best_rho:
                best, best_rho = alpha, rho
        return cls(epsilon, delta, best)

    def to_json(self) -> str:
        """What the ledger stores with the budget (its epsilon and delta are stored beside it)."""
        return json.dumps(
            {"order": self.order, "shares": [self.conversion_share, self.basic_share, self.approx_share]},
            allow_nan=False,
        )

    @classmethod
    def from_json(cls, epsilon: float, delta: float, text: str | None) -> PrivacyFilter:
        if not isinstance(text, str):
            raise ParameterError("this budget has no privacy filter recorded (a ledger not written by dpdist?)")
        doc = json.loads(text)
        return cls(epsilon, delta, doc["order"], *doc["shares"])

    def to_dict(self) -> dict[str, Any]:
        """The public form (shown beside a budget's status)."""
        return {
            "order": self.order,
            "delta_conversion": self.delta_conversion,
            "delta_basic": self.delta_basic,
            "delta_approx": self.delta_approx,
        }

    @property
    def delta_conversion(self) -> float:
        """The delta route (R) converts at."""
        return self.conversion_share * self.delta

    @property
    def delta_basic(self) -> float:
        """The most the releases' standalone deltas may add to in route (P)."""
        return self.basic_share * self.delta

    @property
    def delta_approx(self) -> float:
        """The most the approximate parts' deltas may add to in route (R)."""
        return self.approx_share * self.delta

    def sums(self, loss: PrivacyLoss) -> FilterSums:
        """One release's terms of the sums this filter decides from (its divergence at alpha* computed
        now, once: the bound the filter counts for it from then on)."""
        approx = [p for p in loss.parts if p[0] == "approx"]
        renyi, unbounded = Fraction(0), 0
        if self.order is not None:
            r = _release_rdp_at(loss.parts, self.order)
            if math.isfinite(r):
                renyi = Fraction(max(r, 0.0))  # a divergence is >= 0: a rounding below it is counted as 0
            else:
                unbounded = 1  # a divergence dp-accounting cannot bound (or NaN): route (R) does not hold
        return FilterSums(
            1,
            Fraction(loss.epsilon),
            Fraction(loss.delta),
            sum((Fraction(p[1]) for p in approx), Fraction(0)),
            sum((Fraction(p[2]) for p in approx), Fraction(0)),
            renyi,
            unbounded,
        )

    def measure(self, sums: FilterSums) -> tuple[float, float]:
        """(epsilon, delta) the filter counts for a sequence with these sums: admitted while epsilon <= the
        budget's.

        epsilon is the smaller of route (P)'s sum and route (R)'s S converted at alpha* (inf for a
        route whose deltas do not fit); delta is that route's: the standalone deltas, or the
        approximate parts' deltas plus ``delta_conversion``.
        """
        if sums.releases == 0:
            return 0.0, 0.0
        basic_delta = float(sums.delta)
        basic = float(sums.epsilon) if basic_delta <= self.delta_basic else math.inf
        approx_delta = float(sums.approx_delta)
        renyi = math.inf
        if self.order is not None and approx_delta <= self.delta_approx:
            s = math.inf if sums.unbounded else float(sums.renyi) + float(sums.approx_epsilon)
            if not math.isfinite(s):
                s = math.inf
            renyi = max(0.0, s + _conversion_offset(self.order, self.delta_conversion)) * (1.0 + _ROUND_UP)
        if basic <= renyi:
            return basic, (basic_delta if basic < math.inf else self.delta)
        return renyi, approx_delta + self.delta_conversion

    def spent(self, losses: Iterable[PrivacyLoss]) -> tuple[float, float]:
        """(epsilon, delta) the filter counts for ``losses`` (:meth:`measure` of their :meth:`sums`)."""
        return self.measure(sum((self.sums(loss) for loss in losses), FilterSums()))

    def admits(self, losses: Iterable[PrivacyLoss]) -> bool:
        """Whether the sequence ``losses`` passes the filter."""
        return bool(self.spent(losses)[0] <= self.epsilon)
