"""The privacy loss of a release in its strongest form, and tight composition of releases.

Neighbouring relation (the one dpdist holds everywhere): ADD/REMOVE one record; the number of
records n is private. Every loss below is stated for that relation.

A release's loss (:class:`PrivacyLoss`) is a list of *parts*, each in the strongest form its mechanism
has: ``zcdp`` (rho: Gaussian noise, bounded-range and pure mechanisms), ``laplace`` (the exact Laplace
Renyi curve), ``approx`` ((epsilon, delta) only), ``sgm`` (Poisson-subsampled Gaussians: DP-SGD),
``rdp`` (a tabulated Renyi curve: the best of a random number of runs) and ``repeat`` (older records
of repeat-and-select). Each loss also carries a *standalone* (epsilon, delta): what the release alone
is. :func:`compose_epsilon` composes losses whose parameters are all fixed in advance (the parts of one
release, a calibration): the approximate parts add, the Renyi curves add and are converted at the
remaining delta (Google's ``dp-accounting``), and the result is never above basic composition. A
dataset's ledger admits releases chosen one after another by :mod:`dpdist.privacy.filter` instead.

Claims (each form's guarantee, the best of runs, disjoint parts, the composition) and their proofs:
[docs/proofs/privacy-loss.md][proof-privacy-loss].
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dp_accounting import dp_event
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant as _rdp
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS, RdpAccountant

from dpdist.exceptions import ParameterError
from dpdist.utils.validation import check_count, check_delta, check_epsilon, check_positive

__all__ = [
    "Charge",
    "PrivacyLoss",
    "ORDERS",
    "best_of_runs_curve",
    "calibrate",
    "compose_epsilon",
    "curve_epsilon",
    "rdp_curve",
    "rdp_epsilon",
]

ORDERS: tuple[float, ...] = tuple(float(a) for a in DEFAULT_RDP_ORDERS) + tuple(
    float(a) for a in np.geomspace(1100.0, 1e6, 40)
)
SGM_MAX_ORDER = 1024.0  # the subsampled Gaussian's curve is computed up to this order (module doc)
_EPS_FLOOR = 1e-12  # what a conversion that rounds to 0 is stated as (an upper bound)

# ("zcdp", rho) | ("laplace", eps, count) | ("approx", eps, delta) | ("sgm", z, q, steps)
# | ("rdp", label, orders, values) | ("repeat", parts, mean, shape)
Part = tuple[Any, ...]


def _check_parts(parts: Iterable[Part]) -> tuple[Part, ...]:
    out: list[Part] = []
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
        elif kind == "sgm":
            q = float(p[2])
            if not 0.0 < q <= 1.0:
                raise ParameterError(f"the sampling rate must lie in (0, 1], got {p[2]!r}")
            out.append(("sgm", check_positive(p[1], "noise_multiplier"), q, check_count(p[3], "steps")))
        elif kind == "rdp":
            orders, values = tuple(float(a) for a in p[2]), tuple(float(v) for v in p[3])
            if (
                len(orders) != len(values)
                or not orders
                or any(a <= 1.0 for a in orders)
                or list(orders) != sorted(set(orders))
                or any(not v >= 0.0 for v in values)
            ):
                raise ParameterError(
                    "a tabulated Renyi curve needs increasing orders > 1 and values >= 0 (inf allowed)"
                )
            out.append(("rdp", str(p[1]), orders, values))
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
    def subsampled_gaussian(
        cls, noise_multiplier: float, sampling_rate: float, steps: int, delta: float
    ) -> PrivacyLoss:
        """``steps`` adaptive Poisson-subsampled Gaussian mechanisms (DP-SGD): each record in a step
        with probability ``sampling_rate``, noise N(0, (noise_multiplier C)^2) on a sum of terms of
        l2 norm at most C. ``sampling_rate`` 1 is full-batch DP-GD: ``steps / (2 z^2)``-zCDP."""
        z = check_positive(noise_multiplier, "noise_multiplier")
        steps = check_count(steps, "steps")
        if float(sampling_rate) == 1.0:
            return cls.zcdp(steps / (2.0 * z * z), delta)
        parts = (("sgm", z, float(sampling_rate), steps),)
        delta = check_delta(delta, allow_zero=False)
        return cls(parts, rdp_epsilon(parts, delta), delta)

    @classmethod
    def tabulated(cls, label: str, curve: Sequence[float] | np.ndarray, delta: float) -> PrivacyLoss:
        """A mechanism whose Renyi curve on ``ORDERS`` is ``curve`` (an upper bound at each order)."""
        parts = (("rdp", label, ORDERS, tuple(float(v) for v in curve)),)
        delta = check_delta(delta, allow_zero=False)
        return cls(parts, rdp_epsilon(parts, delta), delta)

    @classmethod
    def parallel(cls, *losses: PrivacyLoss, delta: float) -> PrivacyLoss:
        """Mechanisms on disjoint parts of the data, split by each record's own content (a keyed
        hash): one added or removed record reaches one of them, so at every Renyi order the whole
        is bounded by the largest of their divergences (the others' outputs keep their laws), the
        pointwise maximum of the curves."""
        if not losses:
            raise ParameterError("parallel needs at least one privacy loss")
        if any(p[0] == "approx" for loss in losses for p in loss.parts):
            raise ParameterError("parallel needs Renyi curves, not (eps, delta) parts")
        curve = np.max([rdp_curve(loss.parts, ORDERS) for loss in losses], axis=0)
        return cls.tabulated(f"parallel of {len(losses)}", curve, delta)

    @classmethod
    def best_of_runs(cls, candidates: Sequence[PrivacyLoss], mean: float, shape: float, delta: float) -> PrivacyLoss:
        """Run a random number of times (mean ``mean``; truncated negative binomial of ``shape``:
        0 logarithmic, 1 geometric, inf Poisson) a mechanism that picks one of ``candidates`` at
        random (independently of the data) and runs it, and release the best run (Papernot &
        Steinke 2022, Thm. 2; dp-accounting's formula on the whole grid): one release whatever
        the number of runs. Its inner curve is the candidates' pointwise maximum (proof:
        [docs/proofs/privacy-loss.md][proof-privacy-loss]).
        """
        if not candidates:
            raise ParameterError("best_of_runs needs at least one candidate")
        mean = check_positive(mean, "mean")
        if mean < 1.0 or not float(shape) >= 0.0:
            raise ParameterError(f"the number of runs needs a mean >= 1 and a shape >= 0, got {mean!r}, {shape!r}")
        for c in candidates:
            if any(p[0] == "approx" for p in c.parts):
                raise ParameterError("best_of_runs needs candidates with Renyi curves, not (eps, delta) parts")
        curve = best_of_runs_curve([rdp_curve(c.parts, ORDERS) for c in candidates], mean, float(shape))
        return cls.tabulated(f"best of ~{mean:g} runs of {len(candidates)} candidate(s)", curve, delta)

    @classmethod
    def repeat_and_select(cls, inner: PrivacyLoss, mean: float, shape: float, delta: float) -> PrivacyLoss:
        """Run ``inner`` a random number of times and release the best run (``best_of_runs`` with
        one candidate)."""
        return cls.best_of_runs([inner], mean, shape, delta)

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
        """ "zcdp", "rdp" (Laplace/repeat curves), "approx" or "mixed": what the ledger shows."""
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
            elif p[0] == "sgm":
                bits.append(f"subsampled gaussian z={p[1]:.4g} q={p[2]:.3g} x{p[3]}")
            elif p[0] == "rdp":
                bits.append(p[1])
            else:
                bits.append(f"repeat(mean={p[2]:g})")
        return "; ".join(bits)

    # ---------------------------------------------------------------- serialisation

    def to_json(self) -> str:
        return json.dumps(
            {"parts": _parts_to_json(self.parts), "epsilon": self.epsilon, "delta": self.delta},
            sort_keys=True,
            allow_nan=False,
        )

    @classmethod
    def from_json(cls, text: str) -> PrivacyLoss:
        doc = json.loads(text)
        return cls(_parts_from_json(doc["parts"]), doc["epsilon"], doc["delta"])


def _parts_to_json(parts: Sequence[Part]) -> list[Any]:
    out: list[Any] = []
    for p in parts:
        if p[0] == "repeat":
            out.append(["repeat", _parts_to_json(p[1]), p[2], p[3]])
        elif p[0] == "rdp":  # JSON has no infinity: an infinite order's value is written as null
            out.append(["rdp", p[1], list(p[2]), [v if math.isfinite(v) else None for v in p[3]]])
        else:
            out.append(list(p))
    return out


def _parts_from_json(items: Sequence[Any]) -> tuple[Part, ...]:
    out: list[Part] = []
    for p in items:
        if p[0] == "repeat":
            out.append(("repeat", _parts_from_json(p[1]), p[2], p[3]))
        elif p[0] == "rdp":
            out.append(("rdp", p[1], tuple(p[2]), tuple(math.inf if v is None else v for v in p[3])))
        else:
            out.append(tuple(p))
    return tuple(out)


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
    """dp-accounting events of the zcdp, laplace and repeat parts (zCDP parts summed into one event);
    the sgm and rdp parts are added as curves by :func:`rdp_curve`."""
    rho = math.fsum(p[1] for p in parts if p[0] == "zcdp")
    events: list[dp_event.DpEvent] = [dp_event.ZCDpEvent(rho)] if rho > 0 else []
    laplace: dict[float, int] = {}
    for p in parts:
        if p[0] == "laplace":
            laplace[p[1]] = laplace.get(p[1], 0) + p[2]
        elif p[0] == "repeat":
            events.append(dp_event.RepeatAndSelectDpEvent(dp_event.ComposedDpEvent(_events(p[1])), p[2], p[3]))
    events += [
        dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(1.0 / eps), count)
        for eps, count in sorted(laplace.items())
    ]
    return events


@functools.lru_cache(maxsize=4096)
def _sgm_curve_cached(z: float, q: float, steps: int, orders: tuple[float, ...]) -> np.ndarray:
    orders_ = np.asarray(orders)
    out = np.full(orders_.size, np.inf)
    low = orders_ <= SGM_MAX_ORDER
    # at the integer order ceil(alpha): exact there (dp-accounting's closed form, fast) and an upper
    # bound at alpha (Renyi divergence does not decrease with the order); the fractional orders'
    # series converge slowly for large q
    ceil = np.ceil(orders_[low])
    ints = np.unique(ceil)
    at = dict(zip(ints, _rdp._compute_rdp_poisson_subsampled_gaussian(q, z, ints)))
    out[low] = steps * np.array([at[a] for a in ceil], dtype=float)
    out.setflags(write=False)
    return out


def _sgm_curve(z: float, q: float, steps: int, orders: np.ndarray) -> np.ndarray:
    """Renyi curve of ``steps`` Poisson-subsampled Gaussians on ``orders`` (inf past SGM_MAX_ORDER)."""
    return _sgm_curve_cached(float(z), float(q), int(steps), tuple(float(a) for a in orders))


def _table_at(table_orders: Sequence[float], values: Sequence[float], orders: np.ndarray) -> np.ndarray:
    """A tabulated curve read at ``orders``: the value at the smallest tabulated order >= each (Renyi
    divergence does not decrease with the order), inf past the table."""
    t = np.asarray(table_orders, dtype=float)
    v = np.append(np.asarray(values, dtype=float), np.inf)
    return v[np.searchsorted(t, orders, side="left")]


def rdp_curve(parts: Sequence[Part], orders: Sequence[float]) -> np.ndarray:
    """The Renyi divergence of the RDP parts composed (they add: Mironov 2017, Prop. 1), at ``orders``;
    approx parts ignored."""
    orders_ = np.asarray(orders, dtype=float)
    curve = np.zeros(orders_.size)
    events = _events(parts)
    if events:
        acc = RdpAccountant(orders=tuple(orders_), neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
        acc.compose(dp_event.ComposedDpEvent(events))
        curve += np.asarray(acc.rdp, dtype=float)
    for p in parts:
        if p[0] == "sgm":
            curve += _sgm_curve(p[1], p[2], p[3], orders_)
        elif p[0] == "rdp":
            curve += _table_at(p[2], p[3], orders_)
    return curve


def best_of_runs_curve(curves: Sequence[np.ndarray], mean: float, shape: float) -> np.ndarray:
    """The Renyi curve on ``ORDERS`` of the best of a random number of runs of a random pick among
    mechanisms with these curves (``PrivacyLoss.best_of_runs``): Papernot & Steinke's Theorem 2
    (dp-accounting's formula) on the finite part of the pointwise maximum."""
    inner = np.max(np.asarray(curves, dtype=float), axis=0)
    finite = np.isfinite(inner)
    out = np.full(len(ORDERS), np.inf)
    if finite.any():  # an inf order is no bound: left out of the formula
        orders = np.asarray(ORDERS)[finite]
        out[finite] = _rdp._compute_rdp_repeat_and_select(orders, inner[finite], mean, shape)
    return out


def curve_epsilon(curve: np.ndarray, delta: float) -> float:
    """Epsilon at ``delta`` of a Renyi curve on ``ORDERS`` (the conversion of ``rdp_epsilon``)."""
    finite = np.isfinite(curve)
    if not finite.any():
        return math.inf
    eps = float(_rdp.compute_epsilon(np.asarray(ORDERS)[finite], curve[finite], delta)[0])
    return max(eps, _EPS_FLOOR)  # a positive bound: 0 is only a rounding of a tiny one


def rdp_epsilon(parts: Sequence[Part], delta: float) -> float:
    """Epsilon at ``delta`` of the RDP parts composed (every kind but approx), by the conversion of
    Canonne, Kamath & Steinke 2020 (dp-accounting's ``compute_epsilon``) on ``ORDERS``."""
    if not any(p[0] != "approx" for p in parts):
        return 0.0
    if delta <= 0.0:
        return math.inf
    return curve_epsilon(rdp_curve(parts, ORDERS), delta)


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


def calibrate(
    make: Callable[[float], PrivacyLoss], epsilon: float, delta: float, upper: float, tol: float = 1e-12
) -> float:
    """The largest x in (0, upper] with ``make(x)`` composed alone at ``delta`` within ``epsilon``.

    ``make`` must be monotone (a larger x costs more). Bisection to a relative bracket ``tol``; the
    returned x always meets the target (it is the lower end of the final bracket).
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
        if hi - lo <= tol * lo:
            break
    return lo
