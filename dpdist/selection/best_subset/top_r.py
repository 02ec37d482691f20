"""DP best subset selection by the top-R method (seed 002 Alg. 1 and App. B; spec 6.3).

Procedure (R = 1 + s(p - s), public):

1. Centre C: IHT warm start, then one-swap local search (``iht``), which also gives F at
   all s(p - s) one-swaps of C (a Dask map over workers in ``pipelines.best_subset``).
2. List L = {C} ∪ {one-swaps of C}, t = max_{S in L} F(S).
3. Certificate (one MIP on a ``mip`` worker, ``oa``): the master over the supports with at
   least two mistakes from C (sum_{j in C} z_j <= s - 2) has no support below t - tau
   ("infeasible" with objective limit t - tau). Then L is the exact top-R.
4. If instead the MIP finds T with F(T) < t - tau: when F(T) < F(C) - tau, C was not the
   optimum and the procedure restarts from T (at most ``max_recenter`` times); otherwise
   the exact top-R is computed with no-good cuts -- T enters L, the worst member of L
   leaves it, sum_{j in T} z_j <= s - 1 is added, and step 3 repeats -- up to ``max_extra``
   entries. Nothing is retried on other data and nothing is silently abandoned (the seed's
   code drops the trial when its check fails); exceeding a limit is a refusal.
5. Sample (``samplers.top_r_sample``): u(S) = min(F(S), t) for the R listed supports, t
   for the C(p, s) - R others, P(S) ∝ exp(-c u(S)).

The seed's "practical R" is s(p - s) + 2 (one more: the best support with >= 2 mistakes);
ours is s(p - s) + 1 because the certificate replaces that entry.

Privacy (ADD/REMOVE, pure epsilon-DP)
-------------------------------------
Let F_(R)(D) be the R-th smallest value of F_D over all supports and u_D(S) =
min(F_D(S), F_(R)(D)). For neighbours D' = D + {d} we have, for every S,
0 <= F_D'(S) - F_D(S) <= Delta (``objective``). Then

* F_(R) is monotone and Delta-sensitive: F_D' >= F_D pointwise, so every order statistic
  can only increase; F_D' <= F_D + Delta pointwise, so it increases by at most Delta;
* min(a, b) is non-decreasing in each argument and 1-Lipschitz in the sup norm, so
  0 <= u_D'(S) - u_D(S) <= Delta for every S.

So the exponential mechanism P(S) ∝ exp(-epsilon u(S)/Delta) is epsilon-DP (monotone
utilities; ``objective``). The procedure samples exactly this distribution when L is an
exact top-R list: listed supports have u = F, unlisted ones have F >= F_(R) hence u = F_(R) =
t, and ties at the R-th place do not matter (tied supports have the same u either way). The
rejection loop is unbounded, so the outside category is exactly uniform.

Certified tolerance. The sampler uses computed values F^ (the objective at a feasible beta,
certified within tau/10 of F by a duality gap) and t^ = max_L F^; the certificate gives
F(S) >= t^ - tau for every unlisted S (SCIP's tolerances, 1e-9 relative, are far below tau).
Writing u^ for the utility the sampler uses, |u^ - u| <= tau everywhere: at most tau/10 on
L; off L, F(S) >= t^ - tau and F_(R) lies in [t^ - tau, t^ + tau/10] (at most R - 1 supports
lie below t^ - tau). For an EM at rate c on a utility within tau of a monotone
Delta-sensitive one, P_D(S)/P_D'(S) <= exp(c (Delta + 4 tau)) (each of the two factors of the
ratio moves by at most exp(2 c tau)). With tau = tol * Delta (``tol`` public) we sample at
c = epsilon / (Delta (1 + 4 tol)), so the release is epsilon-DP as charged.

Failures. A time limit, an uncertified inner solve or an exceeded ``max_extra`` after the
charge is a refusal (``SolverFailure``): the charge stands, the ledger records the refusal as
the release and no support is published. Whether a refusal happens depends on the data and is
not covered by the epsilon guarantee; the limits are public and generous so it is rare.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.selection.best_subset.base import BSSSelectorBase, Refusal
from dpdist.selection.best_subset.iht import iht_unit, local_search, swap_support
from dpdist.selection.best_subset.oa import MasterJob, master_unit
from dpdist.selection.best_subset.samplers import top_r_sample
from dpdist.utils.validation import check_count

__all__ = ["BSSTopRSelector", "TopRList", "top_r_list"]

Support = tuple[int, ...]


@dataclass
class TopRList:
    """The exact top-R list: the centre, its one-swaps (a table) and the no-good entries.

    ``alive`` marks the listed entries in the order [centre, swaps (row-major over the
    finite table cells), extras]; exactly R of them are alive.
    """

    center: Support
    center_value: float
    table: np.ndarray
    extras: list[tuple[Support, float]] = field(default_factory=list)
    alive: np.ndarray = field(init=False)
    _cells: np.ndarray = field(init=False, repr=False)
    stats: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._cells = np.flatnonzero(np.isfinite(self.table.ravel()))
        self.alive = np.ones(1 + self._cells.size, dtype=bool)

    @property
    def R(self) -> int:
        return int(self.alive.sum())

    def all_values(self) -> np.ndarray:
        return np.concatenate([[self.center_value], self.table.ravel()[self._cells],
                               np.array([v for _, v in self.extras], dtype=np.float64)])

    def support(self, k: int) -> Support:
        if k == 0:
            return self.center
        if k <= self._cells.size:
            i, j = divmod(int(self._cells[k - 1]), self.table.shape[1])
            return swap_support(self.center, i, j)
        return self.extras[k - 1 - self._cells.size][0]

    def add(self, support: Support, value: float) -> None:
        """Enter ``support`` and drop the worst listed entry (the list keeps R entries)."""
        self.extras.append((support, float(value)))
        self.alive = np.append(self.alive, True)
        values = np.where(self.alive, self.all_values(), -np.inf)
        self.alive[int(np.argmax(values))] = False

    def threshold(self) -> float:
        return float(self.all_values()[self.alive].max())

    def listed(self) -> tuple[np.ndarray, np.ndarray]:
        """(indices, values) of the listed entries."""
        idx = np.flatnonzero(self.alive)
        return idx, self.all_values()[idx]

    def is_listed(self, S: Support) -> bool:
        common = len(set(S) & set(self.center))
        s = len(self.center)
        if common == s:
            return bool(self.alive[0])
        if common == s - 1:
            out = next(k for k, c in enumerate(self.center) if c not in S)
            inc = next(j for j in S if j not in self.center)
            cell = out * self.table.shape[1] + inc
            pos = int(np.searchsorted(self._cells, cell))
            return bool(self.alive[1 + pos])
        for k, (T, _) in enumerate(self.extras):
            if T == S:
                return bool(self.alive[1 + self._cells.size + k])
        return False


def _seeds(center: Support, table: np.ndarray, count: int) -> tuple[Support, ...]:
    """The centre and the best swap for each of the ``count`` best incoming features."""
    best_in = np.min(table, axis=0)
    order = np.argsort(best_in)[:count]
    seeds = [center]
    for j in order:
        if np.isfinite(best_in[j]):
            seeds.append(swap_support(center, int(np.argmin(table[:, j])), int(j)))
    return tuple(seeds)


def top_r_list(executor: Any, tau: float, time_limit: float, max_extra: int = 100, max_recenter: int = 5,
               seed_cuts: int = 20) -> TopRList:
    """The exact top-R list (module docstring, steps 1-4), values certified to ``tau``.

    Raises ``Refusal`` on a time limit, an uncertified solve or more than ``max_extra``
    no-good entries / ``max_recenter`` restarts.
    """
    s = executor.meta.s
    inner = tau / 10.0
    try:
        start = executor.call(iht_unit, None)
        for _ in range(max_recenter + 1):
            center, f0, table = local_search(executor, start, inner)
            lst = TopRList(center, f0, table)
            seeds = _seeds(center, table, seed_cuts)
            nogood: list[Support] = []
            while True:
                t = lst.threshold()
                job = MasterJob(seeds, inner, center=center, max_common=s - 2, nogood=tuple(nogood),
                                objlimit=t - tau, time_limit=time_limit)
                res = executor.mip(master_unit, job)
                lst.stats.setdefault("master_seconds", []).append(res.seconds)
                if res.status == "infeasible":
                    lst.stats["extras"] = len(nogood)
                    return lst
                if res.status == "timelimit":
                    raise Refusal(f"the top-R certificate hit the MIP time limit ({time_limit:g} s)")
                T, v = res.support, float(res.value)
                if v < f0 - tau:
                    start = T  # the centre was not the optimum: restart from the better support
                    break
                if not v < t:
                    raise Refusal("the top-R certificate returned a support above the threshold (numerical trouble)")
                if len(nogood) == max_extra:
                    raise Refusal(f"the exact top-R needs more than max_extra={max_extra} no-good cuts")
                lst.add(T, v)
                nogood.append(T)
        raise Refusal(f"the top-R centre moved more than max_recenter={max_recenter} times")
    except ArithmeticError as e:
        raise Refusal(f"an inner solve failed: {e}") from None


class BSSTopRSelector(BSSSelectorBase):
    """Private best subset selection by the top-R method (pure epsilon-DP).

    Parameters
    ----------
    s : support size to release.
    epsilon : the budget (pure DP; the charge is exactly epsilon).
    loss : "squared" (least squares with ridge) or "hinge" (labels -1/+1).
    r, ridge : the l2-ball radius and the ridge of F (seed: r = 1.1, ridge 120 / hinge 100).
    x_bound, y_bound : Assumption 1, |x_ij| <= x_bound and |y_i| <= y_bound (squared loss).
    bounds : "check" refuses data outside the bounds, "clip" clips each record.
    tol : certified tolerance relative to Delta (tau = tol * Delta); the sampler runs at
        epsilon / (1 + 4 tol) to pay for it (module docstring).
    time_limit : seconds per MIP solve; hitting it is a refusal (the charge stands).
    max_extra : largest number of no-good entries in the exact top-R fallback.
    random_state : None (OS entropy, for every release) or a seed (experiments only).

    After ``fit``: ``support_`` (ascending feature indices), ``n_features_in_``, ``release_``.
    """

    mechanism = "bss/top-r"

    def __init__(self, s: int = 5, epsilon: float = 1.0, loss: str = "squared", r: float = 1.1,
                 ridge: float = 120.0, x_bound: float = 0.5, y_bound: float = 0.5, bounds: str = "check",
                 tol: float = 1e-3, time_limit: float = 600.0, max_extra: int = 100,
                 random_state: Any = None) -> None:
        super().__init__(s=s, epsilon=epsilon, loss=loss, r=r, ridge=ridge, x_bound=x_bound, y_bound=y_bound,
                         bounds=bounds, tol=tol, time_limit=time_limit, random_state=random_state)
        self.max_extra = max_extra

    def _validate_extra(self) -> None:
        check_count(self.max_extra, "max_extra", minimum=0)

    def privacy_charge(self) -> Charge:
        """What ``fit`` charges: an epsilon-bounded-range mechanism (epsilon-DP and epsilon^2/8-zCDP).

        The sampled distribution is an exponential mechanism on a monotone utility within
        tau of a Delta-sensitive one, at rate epsilon / (Delta (1 + 4 tol)): for neighbours the
        log-ratio ln P_D(S)/P_D'(S) ranges over an interval of width at most epsilon (the
        utilities' differences lie in an interval of width Delta + 4 tau), which is the
        bounded-range property (Durfee and Rogers 2019).
        """
        self._validate()
        return Charge(PrivacyLoss.bounded_range(float(self.epsilon)), self.mechanism)

    def _release(self, executor: Any, rng: np.random.Generator) -> Support:
        meta = executor.meta
        tau = self.tol * meta.delta
        lst = top_r_list(executor, tau, self.time_limit, self.max_extra)
        self.top_r_ = lst
        idx, values = lst.listed()
        scale = self.epsilon / (meta.delta * (1.0 + 4.0 * self.tol))
        return top_r_sample(values, meta.p, meta.s, scale, rng, lambda k: lst.support(int(idx[k])), lst.is_listed)


def top_r_probabilities(lst: TopRList, p: int, s: int, scale: float) -> tuple[np.ndarray, float]:
    """(P of each listed entry, P of each single unlisted support) -- tests and experiments."""
    from dpdist.selection.best_subset.samplers import top_r_log_weights
    from scipy.special import logsumexp

    _, values = lst.listed()
    logw = top_r_log_weights(values, p, s, scale)
    logz = logsumexp(logw)
    rest = math.comb(p, s) - values.size
    return np.exp(logw[:-1] - logz), (math.exp(logw[-1] - logz) / rest if rest else 0.0)
