"""DP best subset selection by the mistakes method, made unconditional by propose-test-release
([DPBSS25] Sec. 2.1.2, Theorem 2, App. A.4-A.5; docs/algorithms.md §6.4).

Procedure:

1. Centre C: IHT + one-swap local search (``iht.local_search``) run to a one-swap local
   minimum -- no move cap, however long the descent -- which gives f_1 = the best one-swap
   value, f_1 >= F^(C) - tau/10 (F^: computed values).
2. Second best (one MIP on a ``mip`` worker): the master over the supports with >= 2
   mistakes from C, objective limit f_1. "Infeasible" certifies that no such support is
   below f_1, so C is the optimum S* (it is a one-swap local minimum) and the gap is
   gamma = f_1 - F(C). A support below F(C) by more than tau restarts the search from it;
   this terminates without a limit (each restart strictly lowers F, as in ``top_r`` step 4).
3. Buckets (independent MIPs, one per j = 2..min(s, p - s), mapped over ``mip`` workers):
   u_j = min(f_j, F(C) + M_j), f_j = min over the supports with exactly j mistakes
   (sum_{j' in C} z_j' = s - j), found by a master with objective limit F(C) + M_j; when the
   master is infeasible the bucket is clamped at F(C) + M_j. u_1 = min(f_1, F(C) + M_1).
4. Test (propose-test-release, charged epsilon_1 = ``ptr_fraction`` * epsilon): release
   nothing unless gamma/Delta + Lap(1/epsilon_1') > 1 + 4 tol + ln(1/(2 delta))/epsilon_1'.
   The test comes after every solve (steps 1-3), so the release's noise (test, then sampler)
   is drawn only once all solver work is done: a crash or abort of the solver work happens
   before any draw, and a retry under the same key draws the test for the first time.
5. Sample (``samplers.mistakes_sample``, epsilon_2 = epsilon - epsilon_1): a bucket j with
   probability ∝ |P_j| exp(-c u_j), |P_j| = C(s, j) C(p - s, j), then a uniform member of it.

The horizon M_j = (ln|P_j| + ``horizon``)/c is public. A clamped bucket has at most
e^-horizon times the weight of S* whatever its exact minimum, so clamping changes
P(output = S*) by at most (number of buckets) * e^-horizon (4.5e-5 per bucket at the default
horizon 10); it spares the MIP from proving the minimum of buckets too far away to matter.
The seed computes every bucket to OA tolerance 5e-3 (relative) instead.

Privacy (ADD/REMOVE): (epsilon, delta)-DP unconditionally -- the gap gamma is Delta-sensitive, the test
passes with probability at most delta unless the centres of D and of every neighbour are the optimum, and
then the bucket exponential mechanism is epsilon_2-DP. The claim and its proof:
[docs/proofs/selection-best_subset-mistakes.md][proof-bss-mistakes].

Without the test ("paper" mode: the paper's public code -- all of epsilon on the EM at the
seed's calibration exp(-epsilon F/(2 Delta)), buckets ">= j mistakes", the bucket's best
support returned) the guarantee holds only on data satisfying gap > Delta, which nobody
checks: paper mode has no privacy guarantee, is for reproducing the paper's figures, and
refuses an accountant.

A refused test releases nothing, by design; it is a valid output of the mechanism (a
charged output: ``ReleaseRefused``, recorded as the release). It is the only refusal and the
only stop: the restarts have no limit and every solve runs to its certificate (``base`` module;
the operator's opt-in ``nonprivate_time_limit`` is outside the guarantee and marked so).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from dpdist.base import PARAMETERS, PrivacyParams
from dpdist.exceptions import ParameterError, SolverAborted
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.selection.best_subset.base import BSSSelectorBase, Refusal
from dpdist.selection.best_subset.iht import iht_unit, local_search
from dpdist.selection.best_subset.oa import MasterJob, drop_sets, master_unit, oracle_for, solve_master
from dpdist.selection.best_subset.objective import Problem
from dpdist.selection.best_subset.samplers import log_comb, mistakes_sample
from dpdist.utils.validation import Options, Positive, check_delta

__all__ = ["BSSMistakesSelector", "BucketJob", "Buckets", "bucket_unit", "center_and_gap", "mistakes_buckets"]

Support = tuple[int, ...]
MODES = ("ptr", "paper")


@dataclass(frozen=True)
class BucketJob:
    """Bucket j of the centre: its minimum if below ``threshold``, else clamped."""

    center: Support
    j: int
    threshold: float
    tau: float
    time_limit: float | None = None


def bucket_unit(problem: Problem, job: BucketJob) -> tuple[str, float, Support | None]:
    """Work unit: ("clamped", threshold, None), ("exact", value, argmin) or ("timelimit", nan, None).

    The bucket is split by the removal set K (which j centre features leave; ``oa.drop_sets``),
    cheapest first: each subproblem fixes the centre's variables, and the best value so far is
    the next one's objective limit. A bucket with too many removal sets is one master.
    """
    s, C = problem.s, job.center
    oracle = oracle_for(problem, job.tau / 10.0)
    deadline = None if job.time_limit is None else time.monotonic() + job.time_limit
    best_value, best = job.threshold, None
    Ks = drop_sets(oracle, C, [job.j])
    for K in Ks if Ks is not None else [None]:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return "timelimit", math.nan, None
        kw = dict(drop=K) if K is not None else dict(common=s - job.j)
        res = solve_master(oracle, [C], center=C, objlimit=best_value, gap=job.tau / 2.0, time_limit=left, **kw)
        if res.status == "timelimit":
            return "timelimit", math.nan, None
        if res.status == "optimal" and res.value is not None and res.value < best_value:  # an optimum has its value
            best_value, best = float(res.value), res.support
    if best is None:
        return "clamped", job.threshold, None
    return "exact", min(best_value, job.threshold), best


@dataclass
class Buckets:
    """The centre, its bucket values u_0..u_jmax and what the MIPs found."""

    center: Support
    values: np.ndarray
    best: list[Support | None]
    gap: float
    stats: dict[str, Any] = field(default_factory=dict)


def center_and_gap(
    executor: Any, tau: float, time_limit: float | None = None
) -> tuple[Support, float, float, np.ndarray, Support]:
    """Steps 1-2: (centre, F(centre), f_1, swap table, best one-swap), centre certified optimal.

    The centre is a one-swap local minimum (``local_search`` has no move cap), so f_1 >=
    F^(centre) - tau/10 (computed values) and the centre is optimal within 1.6 tau (module docstring, (d)).
    The returned f_1 is min(best one-swap, best >= 2-mistake support) when the latter is lower.
    Draws no noise. ``time_limit`` (None: none) is the operator's opt-in guard: a MIP that hits it
    raises ``SolverAborted`` (outside the privacy guarantee, ``base`` module).
    """
    s = executor.meta.s
    inner = tau / 10.0
    start = executor.call(iht_unit, None)
    while True:  # each restart strictly lowers F (module docstring, step 2): it terminates
        center, f0, table = local_search(executor, start, inner)
        i, j = np.unravel_index(int(np.argmin(table)), table.shape)
        f1 = float(table[i, j])
        from dpdist.selection.best_subset.iht import swap_support

        second = swap_support(center, int(i), int(j))
        if s < 2 or executor.meta.p - s < 2:  # no support has two mistakes
            return center, f0, f1, table, second
        res = executor.mip(
            master_unit,
            MasterJob(
                (center,), inner, center=center, max_common=s - 2, objlimit=f1, gap=tau / 2.0, time_limit=time_limit
            ),
        )
        if res.status == "timelimit":
            raise SolverAborted(f"the optimality certificate of the centre hit the MIP time limit ({time_limit:g} s)")
        if res.status == "infeasible":
            return center, f0, f1, table, second
        if float(res.value) < f0 - tau:
            start = res.support
            continue
        return center, f0, min(f1, float(res.value)), table, res.support if res.value < f1 else second


def mistakes_buckets(
    executor: Any,
    center: Support,
    f0: float,
    f1: float,
    tau: float,
    scale: float,
    horizon: float,
    time_limit: float | None,
    best_one: Support,
) -> Buckets:
    """Step 3: the bucket values u_j = min(f_j, F(C) + M_j), j = 0..min(s, p - s), each within tau."""
    p, s = executor.meta.p, executor.meta.s
    jmax = min(s, p - s)
    M = [(log_comb(s, j) + log_comb(p - s, j) + horizon) / scale for j in range(jmax + 1)]
    values = np.empty(jmax + 1)
    best: list[Support | None] = [center] + [None] * jmax
    values[0] = f0
    values[1] = min(f1, f0 + M[1])
    best[1] = best_one
    jobs = [BucketJob(center, j, f0 + M[j], tau, time_limit) for j in range(2, jmax + 1)]
    kinds = []
    for job, (kind, value, support) in zip(jobs, executor.mip_map(bucket_unit, jobs)):
        if kind == "timelimit":
            raise SolverAborted(f"a mistakes bucket hit the MIP time limit ({time_limit:g} s)")
        values[job.j], best[job.j] = value, support
        kinds.append(kind)
    return Buckets(center, values, best, f1 - f0, {"kinds": kinds})


@dataclass(**PARAMETERS)
class BSSMistakesSelector(BSSSelectorBase, PrivacyParams):
    """Private best subset selection by the mistakes method with a propose-test-release gap check.

    Parameters (besides those of ``BSSTopRSelector``)
    -----------------------------------------------
    delta : the PTR failure probability; the release is (epsilon, delta)-DP (> 0 required).
    ptr_fraction : share of epsilon spent on the gap test (the rest samples the buckets).
    horizon : bucket clamping horizon (module docstring); larger is closer to the exact
        minima and costlier.
    mode : "ptr" (default, unconditionally private) or "paper" (the paper's public code:
        no test, bucket best supports, ">= j" buckets, the paper's calibration; no privacy
        guarantee, refuses an accountant).

    A failed test raises ``ReleaseRefused`` (nothing is released; the charge stands).
    """

    mechanism = "bss/mistakes-ptr"
    ptr_fraction: float = 0.5
    horizon: float = 10.0
    mode: str = "ptr"
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "delta": "no_validation",  # with mode "ptr" only (_check_params)
        "ptr_fraction": "no_validation",
        "horizon": [Positive()],
        "mode": [Options(*MODES)],
    }

    def _check_params(self) -> None:
        super()._check_params()
        if self.mode == "ptr":
            delta = check_delta(self.delta)
            if not 0.0 < delta < 0.5:
                raise ParameterError(f"delta must lie in (0, 0.5) for the propose-test-release check, got {delta!r}")
            if not 0.0 < float(self.ptr_fraction) < 1.0:
                raise ParameterError(f"ptr_fraction must lie in (0, 1), got {self.ptr_fraction!r}")

    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        """What ``fit`` charges: (epsilon, delta)-DP (propose-test-release has no stronger form).

        Paper mode has no guarantee to charge and raises ParameterError.
        """
        if self.mode == "paper":
            raise ParameterError(
                "mode='paper' (the paper's unchecked mistakes method) has no privacy guarantee; "
                "it reproduces the paper's figures only and cannot be charged to an accountant"
            )
        return Charge(PrivacyLoss.approx(float(self.epsilon), float(self.delta)), self.mechanism, covered=self.covered)

    def rates(self, delta_f: float) -> tuple[float, float]:
        """(Laplace rate epsilon_1' of the test, EM rate c = epsilon_2'/Delta) after the tolerance factor."""
        factor = 1.0 + 4.0 * self.tol
        if self.mode == "paper":
            return 0.0, self.epsilon / (2.0 * delta_f)
        eps1 = self.ptr_fraction * self.epsilon
        return eps1 / factor, (self.epsilon - eps1) / (factor * delta_f)

    def threshold(self) -> float:
        """The PTR threshold on gamma/Delta + noise."""
        eps1, _ = self.rates(1.0)
        return 1.0 + 4.0 * self.tol + math.log(1.0 / (2.0 * self.delta)) / eps1

    def _mechanism(self, executor: Any, rng: np.random.Generator) -> Support:
        meta = executor.meta
        tau = self.tol * meta.delta
        eps1, scale = self.rates(meta.delta)
        # all solver work first (steps 1-3): no noise is drawn before it is done
        center, f0, f1, _, best_one = center_and_gap(executor, tau, self.nonprivate_time_limit)
        # paper mode: the paper's code OA tolerance (5e-3 relative) for the buckets
        bucket_tau = tau if self.mode == "ptr" else 5e-3 * abs(f0)
        buckets = mistakes_buckets(
            executor, center, f0, f1, bucket_tau, scale, self.horizon, self.nonprivate_time_limit, best_one
        )
        self.buckets_ = buckets
        if self.mode == "ptr":
            # then the release's noise, in this order: the test (step 4), the sampler (step 5)
            noisy = buckets.gap / meta.delta + rng.laplace(scale=1.0 / eps1)
            if not noisy > self.threshold():
                raise Refusal(
                    "the propose-test-release check of the optimality gap failed "
                    "(the data are not stable enough for the mistakes method at this budget)",
                    kind="test",
                )
            return mistakes_sample(center, buckets.values, meta.p, scale, rng)
        return self._paper_sample(executor, buckets, scale, rng)

    def _paper_sample(self, executor: Any, buckets: Buckets, scale: float, rng: np.random.Generator) -> Support:
        """The paper's code: u_j = min over >= j mistakes, returning that bucket's best support."""
        u = buckets.values.copy()
        for j in range(u.size - 2, 1, -1):  # ">= j mistakes" for j >= 2
            u[j] = min(u[j], u[j + 1])
        owner = list(range(u.size))
        for j in range(u.size - 2, 1, -1):
            if buckets.values[owner[j + 1]] < buckets.values[j]:
                owner[j] = owner[j + 1]
        best = [buckets.best[owner[j]] for j in range(u.size)]
        from dpdist.privacy.mechanisms import gumbel_max
        from dpdist.selection.best_subset.samplers import mistakes_log_weights

        j = int(gumbel_max(mistakes_log_weights(u, executor.meta.p, executor.meta.s, scale), rng))
        chosen = best[j]
        if chosen is None:  # a clamped bucket: find its best support now, to the paper's tolerance
            k = owner[j]
            tau = 5e-3 * abs(buckets.values[0])
            job = BucketJob(buckets.center, k, math.inf, tau, self.nonprivate_time_limit)
            kind, _, support = executor.mip(bucket_unit, job)
            if support is None:  # paper mode refuses an accountant: nothing is ever recorded
                raise SolverAborted(
                    "a mistakes bucket's best support was not found (the operator's nonprivate time limit)"
                )
            chosen = support
        return tuple(sorted(int(i) for i in chosen))
