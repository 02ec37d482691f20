"""DP best subset selection by the top-R method ([DPBSS25] Alg. 1 and App. B; docs/algorithms.md §6.3).

Procedure (R = 1 + s(p - s), public):

1. Centre C: IHT warm start, then one-swap local search (``iht``), which also gives F at
   all s(p - s) one-swaps of C (a Dask map over workers in ``dpdist.pipelines.best_subset``).
2. List L = {C} ∪ {one-swaps of C}, t = max_{S in L} F(S).
3. Certificate (one SCIP tree on a ``mip`` worker, ``oa``, collecting mode): over the
   supports with at least two mistakes from C (sum_{j in C} z_j <= s - 2), objective limit
   t - tau. Every support the tree meets whose certified lower bound is below the list's
   current threshold (its largest value) less tau enters L and pushes out L's worst entry
   (so L keeps R entries and t falls); every candidate is then excluded by a no-good cut
   sum_{j in T} z_j <= s - 1 (docs/algorithms.md §6.5), a lazy constraint of the same tree. When the tree
   closes ("infeasible"), every support outside L has F >= t - tau (below): L is the exact
   top-R up to tau. One tree does what the paper's check (step 6 of docs/algorithms.md §6.6) only tests -- the
   seed code drops the trial when its check fails; nothing is retried on other data here.
4. If a support beats F(C) by more than tau, C was not the optimum: the search restarts
   from it. This terminates without a limit: the new centre's computed value is at most the
   better support's, which is below the old centre's by more than tau, and computed values
   are within tau/10 of F, so F strictly falls (by more than 0.8 tau) at every restart and no
   support is a centre twice; there are C(p, s) supports. The list grows as far as the
   certificate needs (no cap: a cap would be a data-dependent refusal).
5. Sample (``samplers.top_r_sample``): u(S) = min(F(S), t) for the R listed supports, t
   for the C(p, s) - R others, P(S) ∝ exp(-c u(S)).

The paper's "practical R" is s(p - s) + 2 (one more: the best support with >= 2 mistakes);
ours is s(p - s) + 1 because the certificate replaces that entry.

Privacy (ADD/REMOVE): pure epsilon-DP -- the exponential mechanism on the monotone, Delta-sensitive utility
min(F(S), F_(R)), which the procedure samples from a list certified to tau = tol Delta at the rate
epsilon / (Delta (1 + 4 tol)). The claim and its proof: [docs/proofs/selection-best_subset-top_r.md][proof-bss-top-r].

No data-dependent stop. Every run publishes a support sampled as above, so the output
distribution is exactly the epsilon-DP one: there is no refusal outcome to account for, and
nothing stops the solver work early -- no time limit, no cap on restarts or on the list, every
solve run to its certificate (``base`` module: the design and the operator's opt-in
``nonprivate_time_limit``, outside the guarantee and marked so in the ledger). Out of memory
(``MemoryError``, a killed worker) is the machine's failure, not an outcome: never recorded,
before any noise, so a retry under the key recomputes and samples for the first time.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpdist.base import PARAMETERS
from dpdist.exceptions import SolverAborted
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.selection.best_subset.base import BSSSelectorBase
from dpdist.selection.best_subset.iht import iht_unit, local_search, swap_support
from dpdist.selection.best_subset.oa import oracle_for, solve_master
from dpdist.selection.best_subset.objective import Problem
from dpdist.selection.best_subset.samplers import top_r_sample

__all__ = ["BSSTopRSelector", "CertifyJob", "TopRList", "certify_unit", "top_r_list"]

Support = tuple[int, ...]


class TopRList:
    """The exact top-R list: the centre, its one-swaps (a table) and the entries found beyond them.

    Entries are indexed [centre, swaps (row-major over the finite table cells), extras];
    exactly R of them are listed. As the collector of the certifying solve it takes the
    supports ``oa.solve_master`` offers (certified lower bound below its threshold, the
    largest listed value, less ``tau``: their values are below the threshold) and drops its
    worst entry for each, keeping R; it stops the solve when a support beats the centre by
    more than ``tau`` (the centre was not the optimum). It takes as many entries as the
    certificate needs.
    """

    def __init__(self, center: Support, center_value: float, table: np.ndarray, tau: float = 0.0) -> None:
        self.center, self.center_value, self.table = tuple(center), float(center_value), table
        self.tau = tau
        self._cells = np.flatnonzero(np.isfinite(table.ravel()))
        self._values = [self.center_value, *table.ravel()[self._cells].tolist()]
        self._alive = [True] * len(self._values)
        self._heap = [(-v, k) for k, v in enumerate(self._values)]
        heapq.heapify(self._heap)
        self.extras: list[tuple[Support, float]] = []
        self.better: Support | None = None
        self.stats: dict[str, Any] = {}

    @property
    def R(self) -> int:
        return int(sum(self._alive))

    def support(self, k: int) -> Support:
        if k == 0:
            return self.center
        if k <= self._cells.size:
            i, j = divmod(int(self._cells[k - 1]), self.table.shape[1])
            return swap_support(self.center, i, j)
        return self.extras[k - 1 - self._cells.size][0]

    def threshold(self) -> float:
        while not self._alive[self._heap[0][1]]:
            heapq.heappop(self._heap)
        return -self._heap[0][0]

    def add(self, support: Support, value: float) -> None:
        """Enter ``support`` and drop the worst listed entry (the list keeps R entries)."""
        k = len(self._values)
        self._values.append(float(value))
        self._alive.append(True)
        self.extras.append((tuple(support), float(value)))
        heapq.heappush(self._heap, (-float(value), k))
        self.threshold()
        self._alive[heapq.heappop(self._heap)[1]] = False

    def offer(self, support: Support, value: float) -> bool:
        """Collector protocol (``oa.solve_master``): take a support below the threshold."""
        if value < self.center_value - self.tau:
            self.better = tuple(support)
            return False
        self.add(support, value)
        return True

    def listed(self) -> tuple[np.ndarray, np.ndarray]:
        """(indices, values) of the listed entries."""
        idx = np.flatnonzero(np.asarray(self._alive))
        return idx, np.asarray(self._values)[idx]

    def is_listed(self, S: Support) -> bool:
        common = len(set(S) & set(self.center))
        s = len(self.center)
        if common == s:
            return bool(self._alive[0])
        if common == s - 1:
            out = next(k for k, c in enumerate(self.center) if c not in S)
            inc = next(j for j in S if j not in self.center)
            pos = int(np.searchsorted(self._cells, out * self.table.shape[1] + inc))
            return bool(self._alive[1 + pos])
        for k, (T, _) in enumerate(self.extras):
            if T == S:
                return bool(self._alive[1 + self._cells.size + k])
        return False


@dataclass(frozen=True)
class CertifyJob:
    """The certifying (collecting) solve of one centre, as a picklable unit of work."""

    center: Support
    center_value: float
    table: np.ndarray
    tau: float
    time_limit: float | None = None


def certify_unit(problem: Problem, job: CertifyJob) -> tuple[str, TopRList]:
    """Work unit (on a ``mip`` worker): complete the centre's list to the exact top-R.

    One SCIP tree over the supports with >= 2 mistakes from the centre, objective limit
    t - tau, in collecting mode: every support whose certified lower bound is below the
    list's (falling) threshold less tau enters the list, every candidate is then excluded
    by a no-good cut, and "infeasible" certifies F >= t^ - tau for the rest (module
    docstring, certified tolerance). Returns (status, list): "infeasible" (certified), "better" (a
    support beats the centre) or "timelimit".
    """
    lst = TopRList(job.center, job.center_value, job.table, job.tau)
    res = solve_master(
        oracle_for(problem, job.tau / 10.0),
        [job.center],
        center=job.center,
        max_common=problem.s - 2,
        objlimit=lst.threshold() - job.tau,
        time_limit=job.time_limit,
        collect=lst,
        margin=job.tau,
    )
    lst.stats.update(master_seconds=res.seconds, cuts=res.cuts, nodes=res.nodes, extras=len(lst.extras))
    if res.status == "interrupted":  # the collector stops the tree only for a better support
        return "better", lst
    return res.status, lst


def top_r_list(executor: Any, tau: float, time_limit: float | None = None) -> TopRList:
    """The exact top-R list (module docstring, steps 1-4), values certified to ``tau``.

    Draws no noise. No stop depends on the data (the restarts terminate, the list grows as
    needed, every solve runs to its certificate; module docstring). ``time_limit`` (None: none)
    is the operator's opt-in guard, outside the guarantee: a MIP that hits it raises
    ``SolverAborted`` (public parameters only in the message; ``base`` module).
    """
    inner = tau / 10.0
    start = executor.call(iht_unit, None)
    while True:  # each restart strictly lowers F (module docstring, step 4): it terminates
        center, f0, table = local_search(executor, start, inner)
        if executor.meta.p - executor.meta.s < 2 or executor.meta.s < 2:
            return TopRList(center, f0, table, tau)  # no support has two mistakes
        status, lst = executor.mip(certify_unit, CertifyJob(center, f0, table, tau, time_limit))
        if status == "infeasible":
            return lst
        if status == "timelimit":
            raise SolverAborted(f"the top-R certificate hit the MIP time limit ({time_limit:g} s)")
        start = lst.better  # the centre was not the optimum: restart from the better support


@dataclass(**PARAMETERS)
class BSSTopRSelector(BSSSelectorBase):
    """Private best subset selection by the top-R method (pure epsilon-DP).

    Parameters
    ----------
    s : support size to release.
    epsilon : the budget (pure DP; the charge is exactly epsilon).
    loss : "squared" (least squares with ridge) or "hinge" (labels -1/+1).
    r, ridge : the l2-ball radius and the ridge of F (r = 1.1; ridge None: the loss's, 120 squared, 100 hinge).
    x_bound, y_bound : Assumption 1, |x_ij| <= x_bound and |y_i| <= y_bound (squared loss).
    bounds : "check" refuses data outside the bounds, "clip" clips each record.
    tol : certified tolerance relative to Delta (tau = tol * Delta); the sampler runs at
        epsilon / (1 + 4 tol) to pay for it (module docstring).
    nonprivate_time_limit : None (default: every solve runs to its certificate, the release is
        covered by its charge) or seconds per MIP solve, an operator's guard *outside the privacy
        guarantee*: whether a solve hits it depends on the data, so the ledger marks such a
        release as not covered (``base`` module).
    random_state : None (OS entropy, for every release) or a seed (experiments only).

    Notes
    -----
    After ``fit``: ``support_`` (ascending feature indices), ``n_features_in_``, ``release_``.
    """

    mechanism = "bss/top-r"

    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        """What ``fit`` charges: an epsilon-bounded-range mechanism (epsilon-DP and epsilon^2/8-zCDP).

        The sampled distribution is an exponential mechanism on a monotone utility within
        tau of a Delta-sensitive one, at rate epsilon / (Delta (1 + 4 tol)): for neighbours the
        log-ratio ln P_D(S)/P_D'(S) ranges over an interval of width at most epsilon (the
        utilities' differences lie in an interval of width Delta + 4 tau), which is the
        bounded-range property (Durfee and Rogers 2019).
        """
        return Charge(PrivacyLoss.bounded_range(float(self.epsilon)), self.mechanism, covered=self.covered)

    def _mechanism(self, executor: Any, rng: np.random.Generator) -> Support:
        meta = executor.meta
        tau = self.tol * meta.delta
        lst = top_r_list(executor, tau, self.nonprivate_time_limit)  # all solver work first; no noise drawn yet
        self.top_r_ = lst
        idx, values = lst.listed()
        scale = self.epsilon / (meta.delta * (1.0 + 4.0 * self.tol))
        return top_r_sample(values, meta.p, meta.s, scale, rng, lambda k: lst.support(int(idx[k])), lst.is_listed)
