"""The privacy loss of a release in its strongest form, and tight composition of releases.

Neighbouring relation (the one dpdist holds everywhere): ADD/REMOVE one record; the number of
records n is private. Every loss below is stated for that relation.

A release's loss is a list of *parts*, each in the strongest form its mechanism has:

* ``zcdp`` (rho): rho-zCDP (Bun & Steinke 2016), i.e. (alpha, alpha rho)-RDP for all alpha > 1.
  - Gaussian noise N(0, sigma^2) on a query of l2-sensitivity Delta: rho = Delta^2 / (2 sigma^2)
    (Bun & Steinke 2016, Prop. 1.6); its Renyi divergence is exactly alpha rho.
  - An eps0-bounded-range mechanism, in particular the exponential mechanism
    exp(eps0 u / (2 Delta)) over any utility of sensitivity Delta, or exp(eps0 u / Delta) over a
    monotone one: rho = eps0^2 / 8 (Durfee & Rogers 2019, Lemma 3.2; Cesar & Rogers 2021,
    Lemma 3.4). T adaptive ones are T eps0^2 / 8-zCDP (zCDP composes additively).
  - Any pure eps-DP mechanism: rho = eps^2 / 2 (Bun & Steinke 2016, Prop. 1.4).
* ``laplace`` (eps, count): ``count`` Laplace mechanisms, each with scale Delta_1 / eps on a query
  of l1-sensitivity Delta_1. Composed with its exact Renyi-divergence curve (Mironov 2017,
  Table II), which is below both eps and alpha eps^2 / 2.
* ``approx`` (eps, delta): a mechanism with only an approximate guarantee (objective
  perturbation with Gaussian noise, propose-test-release, legacy ledger records).
* ``repeat`` (inner parts, mean, shape): the best of a random number of runs of an inner
  mechanism (Papernot & Steinke 2022), e.g. a private choice of lambda/T among candidate fits
  released as one result.

Each loss also carries a *standalone* (epsilon, delta) guarantee: what the release alone is
(its target for a calibrated mechanism). Basic composition adds those.

Tight composition (:func:`compose_epsilon`) of a sequence of losses at a total delta:

* the approx parts add: (eps_a, delta_a) = (sum eps_i, sum delta_i) (basic composition);
* every other part is an RDP curve; the curves add (RDP composes additively, Mironov 2017,
  Prop. 1) and the sum is converted at the remaining delta_r = delta - delta_a with the
  conversion of Canonne, Kamath & Steinke 2020 (Prop. 12) / Balle et al. 2020 (Thm. 21),
  eps = min_alpha [R(alpha) + ln(1 - 1/alpha) - (ln delta_r + ln alpha)/(alpha - 1)]. The
  curves and the conversion are Google's ``dp-accounting`` (``RdpAccountant``) on a grid of
  orders extended to 1e6 (for very small rho);
* the result is eps_a + eps_r, and the composed epsilon is the smaller of that and basic
  composition of the standalone guarantees (both are valid (eps, delta) bounds of the same
  sequence of releases, so their minimum is one too).

That is the guarantee of losses whose parameters are all fixed in advance: the parts of one
release, a calibration. A dataset's ledger admits releases chosen one after another, each after
seeing the earlier ones, by the filter of :mod:`dpdist.privacy.filter` instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dp_accounting import dp_event
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS, RdpAccountant

from dpdist.exceptions import ParameterError
from dpdist.utils.validation import check_count, check_delta, check_epsilon, check_positive

__all__ = ["Charge", "PrivacyLoss", "ORDERS", "calibrate", "compose_epsilon", "rdp_epsilon"]

ORDERS: tuple[float, ...] = tuple(float(a) for a in DEFAULT_RDP_ORDERS) + tuple(
    float(a) for a in np.geomspace(1100.0, 1e6, 40))

Part = tuple  # ("zcdp", rho) | ("laplace", eps, count) | ("approx", eps, delta) | ("repeat", parts, mean, shape)


def _check_parts(parts: Iterable[Part]) -> tuple[Part, ...]:
    out = []
    for p in parts:
        kind = p[0]
        if kind == "zcdp":
            if not (p[1] >= 0 and math.isfinite(p[1])):
                raise ParameterError(f"rho must be finite and >= 0, got {p[1]!r}")
            out.append(("zcdp", float(p[1])))
        elif kind == "laplace":
            out.append(("laplace", check_epsilon(p[1]), check_count(p[2], "count")))
        elif kind == "approx":
            out.append(("approx", check_epsilon(p[1]), check_delta(p[2])))
        elif kind == "repeat":
            inner = _check_parts(p[1])
            if any(q[0] == "approx" for q in inner):
                raise ParameterError("repeat-and-select needs an RDP inner mechanism, not an (eps, delta) part")
            out.append(("repeat", inner, check_positive(p[2], "mean"), float(p[3])))
        else:
            raise ParameterError(f"unknown privacy-loss part {kind!r}")
    return tuple(out)


@dataclass(frozen=True)
class PrivacyLoss:
    """What one release costs: its parts (strongest forms) and its standalone (epsilon, delta).

    Build losses with the constructors (``pure``, ``bounded_range``, ``laplace``, ``gaussian``,
    ``zcdp``, ``approx``, ``compose``); they set the standalone guarantee correctly.
    """

    parts: tuple[Part, ...]
    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", _check_parts(self.parts))
        check_epsilon(self.epsilon)
        check_delta(self.delta)

    # ----------------------------------------------------------------- constructors

    @classmethod
    def pure(cls, epsilon: float) -> PrivacyLoss:
        """A pure epsilon-DP mechanism: epsilon^2/2-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
        eps = check_epsilon(epsilon)
        return cls((("zcdp", eps * eps / 2.0),), eps, 0.0)

    @classmethod
    def bounded_range(cls, epsilon: float, count: int = 1, delta: float | None = None) -> PrivacyLoss:
        """``count`` adaptive epsilon-bounded-range mechanisms (exponential mechanisms).

        Each is epsilon-DP and epsilon^2/8-zCDP (Cesar & Rogers 2021, Lemma 3.4). The
        standalone guarantee is (count * epsilon, 0), or with ``delta`` the tighter of that
        and the zCDP conversion at ``delta``.
        """
        eps = check_epsilon(epsilon)
        count = check_count(count, "count")
        parts = (("zcdp", count * eps * eps / 8.0),)
        return cls._with_standalone(parts, count * eps, delta)

    @classmethod
    def pure_steps(cls, epsilon: float, count: int, delta: float | None = None) -> PrivacyLoss:
        """``count`` adaptive pure epsilon-DP steps that are not bounded-range (e.g. Laplace
        report-noisy-max): count * epsilon^2/2-zCDP."""
        eps = check_epsilon(epsilon)
        count = check_count(count, "count")
        return cls._with_standalone((("zcdp", count * eps * eps / 2.0),), count * eps, delta)

    @classmethod
    def laplace(cls, epsilon: float, count: int = 1, delta: float | None = None) -> PrivacyLoss:
        """``count`` Laplace mechanisms with scale Delta_1/epsilon (exact Laplace RDP curve)."""
        eps = check_epsilon(epsilon)
        count = check_count(count, "count")
        return cls._with_standalone((("laplace", eps, count),), count * eps, delta)

    @classmethod
    def zcdp(cls, rho: float, delta: float) -> PrivacyLoss:
        """A rho-zCDP mechanism; standalone (eps, delta) by the conversion at ``delta`` (> 0)."""
        rho = check_positive(rho, "rho")
        delta = check_delta(delta, allow_zero=False)
        parts = (("zcdp", rho),)
        return cls(parts, rdp_epsilon(parts, delta), delta)

    @classmethod
    def gaussian(cls, noise_multiplier: float, delta: float, count: int = 1) -> PrivacyLoss:
        """``count`` Gaussian mechanisms with sigma = noise_multiplier * Delta_2:
        rho = count / (2 noise_multiplier^2) (Bun & Steinke 2016, Prop. 1.6)."""
        z = check_positive(noise_multiplier, "noise_multiplier")
        count = check_count(count, "count")
        return cls.zcdp(count / (2.0 * z * z), delta)

    @classmethod
    def approx(cls, epsilon: float, delta: float) -> PrivacyLoss:
        """A mechanism with only an (epsilon, delta) guarantee."""
        eps, dlt = check_epsilon(epsilon), check_delta(delta)
        return cls((("approx", eps, dlt),), eps, dlt)

    @classmethod
    def repeat_and_select(cls, inner: PrivacyLoss, mean: float, shape: float, delta: float) -> PrivacyLoss:
        """Run ``inner`` a random number of times (mean ``mean``; truncated negative binomial of
        ``shape``: 0 logarithmic, 1 geometric, inf Poisson) and release the best run
        (Papernot & Steinke 2022, Thm. 2): one release whatever the number of candidates."""
        parts = (("repeat", inner.parts, mean, shape),)
        return cls(parts, rdp_epsilon(parts, check_delta(delta, allow_zero=False)), delta)

    @classmethod
    def compose(cls, *losses: PrivacyLoss) -> PrivacyLoss:
        """Sequential (adaptive) composition of several mechanisms inside one release."""
        if not losses:
            raise ParameterError("compose needs at least one privacy loss")
        parts = tuple(p for loss in losses for p in loss.parts)
        eps = math.fsum(loss.epsilon for loss in losses)
        dlt = math.fsum(loss.delta for loss in losses)
        if dlt >= 1.0:
            raise ParameterError(f"composed delta {dlt} >= 1")
        if dlt > 0:
            eps = min(eps, compose_epsilon([cls(parts, eps, dlt)], dlt, basic=False))
        return cls(parts, eps, dlt)

    @classmethod
    def _with_standalone(cls, parts: tuple[Part, ...], basic_eps: float, delta: float | None) -> PrivacyLoss:
        if delta is None or delta == 0.0:
            return cls(parts, basic_eps, 0.0)
        delta = check_delta(delta, allow_zero=False)
        tight = rdp_epsilon(parts, delta)
        return cls(parts, tight, delta) if tight < basic_eps else cls(parts, basic_eps, 0.0)

    # ------------------------------------------------------------------ properties

    @property
    def rho(self) -> float | None:
        """The loss's zCDP rho when it is wholly zCDP (zcdp parts only), else None."""
        if all(p[0] == "zcdp" for p in self.parts):
            return math.fsum(p[1] for p in self.parts)
        return None

    @property
    def form(self) -> str:
        """"zcdp", "rdp" (Laplace/repeat curves), "approx" or "mixed": what the ledger shows."""
        kinds = {p[0] for p in self.parts}
        if kinds == {"zcdp"}:
            return "zcdp"
        if kinds == {"approx"}:
            return "approx"
        if "approx" in kinds:
            return "mixed"
        return "rdp"

    def epsilon_at(self, delta: float) -> float:
        """The tightest epsilon of this release alone at ``delta``."""
        return compose_epsilon([self], delta)

    def describe(self) -> str:
        """A short human-readable form, e.g. ``rho=0.0123`` or ``eps=0.5, delta=1e-06``."""
        bits = []
        for p in self.parts:
            if p[0] == "zcdp":
                bits.append(f"rho={p[1]:.4g}")
            elif p[0] == "laplace":
                bits.append(f"laplace eps={p[1]:.4g}" + (f" x{p[2]}" if p[2] > 1 else ""))
            elif p[0] == "approx":
                bits.append(f"eps={p[1]:.4g}, delta={p[2]:.3g}")
            else:
                bits.append(f"repeat(mean={p[2]:g})")
        return "; ".join(bits)

    # ---------------------------------------------------------------- serialisation

    def to_json(self) -> str:
        return json.dumps({"parts": _parts_to_json(self.parts), "epsilon": self.epsilon, "delta": self.delta},
                          sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> PrivacyLoss:
        doc = json.loads(text)
        return cls(_parts_from_json(doc["parts"]), doc["epsilon"], doc["delta"])


def _parts_to_json(parts: Sequence[Part]) -> list[Any]:
    return [["repeat", _parts_to_json(p[1]), p[2], p[3]] if p[0] == "repeat" else list(p) for p in parts]


def _parts_from_json(items: Sequence[Any]) -> tuple[Part, ...]:
    return tuple(("repeat", _parts_from_json(p[1]), p[2], p[3]) if p[0] == "repeat" else tuple(p) for p in items)


@dataclass(frozen=True)
class Charge:
    """What a release is charged: its privacy loss and the mechanism's name.

    ``covered=False`` marks a release the operator ran outside the privacy guarantee (an opt-in
    wall-clock guard whose stop depends on the data, e.g. best subset's ``nonprivate_time_limit``):
    it is charged as usual, and the ledger records and shows the mark.
    """

    loss: PrivacyLoss
    mechanism: str
    details: dict[str, Any] = field(default_factory=dict, compare=False)  # e.g. per-step eps0 (shown, not charged)
    covered: bool = True

    @property
    def epsilon(self) -> float:
        return self.loss.epsilon

    @property
    def delta(self) -> float:
        return self.loss.delta


# ------------------------------------------------------------------------ composition


def _events(parts: Sequence[Part]) -> list[dp_event.DpEvent]:
    """dp-accounting events of the RDP parts (zCDP parts summed into one event)."""
    rho = math.fsum(p[1] for p in parts if p[0] == "zcdp")
    events: list[dp_event.DpEvent] = [dp_event.ZCDpEvent(rho)] if rho > 0 else []
    laplace: dict[float, int] = {}
    for p in parts:
        if p[0] == "laplace":
            laplace[p[1]] = laplace.get(p[1], 0) + p[2]
        elif p[0] == "repeat":
            events.append(dp_event.RepeatAndSelectDpEvent(dp_event.ComposedDpEvent(_events(p[1])), p[2], p[3]))
    events += [dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(1.0 / eps), count)
               for eps, count in sorted(laplace.items())]
    return events


def rdp_epsilon(parts: Sequence[Part], delta: float) -> float:
    """Epsilon at ``delta`` of the RDP parts (zcdp, laplace, repeat) composed; approx parts ignored."""
    events = _events(parts)
    if not events:
        return 0.0
    if delta <= 0.0:
        return math.inf
    acc = RdpAccountant(orders=ORDERS, neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dp_event.ComposedDpEvent(events))
    return float(acc.get_epsilon(delta))


def compose_epsilon(losses: Iterable[PrivacyLoss], delta: float, basic: bool = True) -> float:
    """The epsilon of all ``losses`` composed, at total ``delta`` (module doc; inf if impossible).

    ``basic=False`` leaves out the basic-composition alternative.
    """
    losses = list(losses)
    parts = [p for loss in losses for p in loss.parts]
    approx_eps = math.fsum(p[1] for p in parts if p[0] == "approx")
    approx_delta = math.fsum(p[2] for p in parts if p[0] == "approx")
    tight = math.inf
    if approx_delta <= delta:
        tight = approx_eps + rdp_epsilon(parts, delta - approx_delta)
    if not basic:
        return tight
    basic_delta = math.fsum(loss.delta for loss in losses)
    basic_eps = math.fsum(loss.epsilon for loss in losses) if basic_delta <= delta else math.inf
    return min(tight, basic_eps)


def calibrate(make: Callable[[float], PrivacyLoss], epsilon: float, delta: float, upper: float) -> float:
    """The largest x in (0, upper] with ``make(x)`` composed alone at ``delta`` within ``epsilon``.

    ``make`` must be monotone (a larger x costs more). Bisection; the returned x always meets
    the target (it is the lower end of the final bracket).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    hi = check_positive(upper, "upper")
    if compose_epsilon([make(hi)], delta) <= epsilon:
        return hi
    lo = hi
    while compose_epsilon([make(lo)], delta) > epsilon:
        lo /= 2.0
        if lo < 1e-300:
            raise ParameterError(f"no calibration meets epsilon={epsilon:g} at delta={delta:g}")
    hi = 2.0 * lo if 2.0 * lo < hi else hi
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if compose_epsilon([make(mid)], delta) <= epsilon:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * lo:
            break
    return lo
