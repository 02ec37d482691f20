"""Outer approximation on a real MIP solver: SCIP with one branch-and-bound tree and lazy cuts.

References: [DPBSS25] Alg. 2; docs/algorithms.md §6.6.

Master problem over z in {0,1}^p and eta ([DPBSS25] eq. (10)):

    min eta  s.t.  sum_j z_j = s,  region,  eta >= L_k + g_k^T (z - z^_k)  for every cut k,

where each cut is the tangent, at the binary point z^_k = 1_{S_k}, of a convex lower bound of
the relaxed objective c(z) (``least_squares`` / ``hinge`` module docstrings): valid for all z
whatever the accuracy of the inner solve. The region restricts the supports searched:

* ``max_common=m``: sum_{j in C} z_j <= m (at least s - m mistakes from a centre C);
* ``common=m``: sum_{j in C} z_j = m (exactly s - m mistakes, one bucket of docs/algorithms.md §6.4);
* ``nogood``: sum_{j in T} z_j <= s - 1 for each listed support T (docs/algorithms.md §6.5 "next-best").

Instead of the paper's code loop (solve the master, evaluate, add a cut, re-solve from
scratch), SCIP solves the master once: a constraint handler checks every integral candidate
(z, eta) SCIP proposes, evaluates F at its support and, when eta is below the support's
certified bound, adds that support's cut as a new constraint (a lazy cut). The tree is
never restarted. ``benchmarks/bss_speed.py --solver-probe`` measures this against HiGHS
re-solving the master after each cut (the paper's loop): see the module's output in the
README.

Numerics: eta is shifted by a reference value (the first seed's F, never released) so the
rows SCIP sees are O(gap) rather than O(F); feasibility and optimality tolerances are
tightened to 1e-9 (relative), far below the certified margins tau used by the mechanisms.
Coefficients below SCIP's epsilon (1e-9) are dropped by SCIP, which can strengthen a cut by
at most s * 1e-9 -- also far below tau.

There is no time limit unless a caller passes one (``time_limit``; then ``solve_master`` may
return ``status="timelimit"``): the private releases run every solve to its certificate, and a
limit is only the operator's opt-in guard, outside the privacy guarantee (``base`` module).
With no limit, SCIP ends a tree optimal or infeasible (the master is a finite binary program with
eta bounded below). Any other status is numerical trouble; it never ends the solve:
``solve_master`` builds a fresh tree with SCIP's random seed shifted (from the third attempt on,
also with SCIP's numerics emphasis and no presolving), seeded with every cut and no-good cut found
so far -- each cut is a valid lower bound of F, and each no-good excludes a support already
collected or proven above the (only falling) limit -- and solves again, with no cap on the
attempts. The result is the region's certified optimum (or certificate) either way; only the
time differs. SCIP's own "userinterrupt" (it catches the operator's Ctrl-C) is raised as
``KeyboardInterrupt``. An exception inside SCIP's callbacks (out of memory while evaluating a
support, an interrupt) stops the tree and is raised as it was, so a machine failure stays one
(not recorded as the release's outcome).
"""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from pyscipopt import SCIP_PARAMEMPHASIS, SCIP_PARAMSETTING, SCIP_RESULT, Conshdlr, Model, quicksum

from dpdist.selection.best_subset.hinge import hinge_cut, hinge_evaluate
from dpdist.selection.best_subset.least_squares import ls_cut, ls_evaluate
from dpdist.selection.best_subset.objective import Problem

__all__ = [
    "Cut",
    "MasterJob",
    "MasterResult",
    "Oracle",
    "drop_sets",
    "evaluate_unit",
    "master_unit",
    "oracle_for",
    "solve_master",
]

DECOMPOSE_MAX = 64  # most subproblems (removal sets K) a region is split into

Support = tuple[int, ...]


@dataclass(frozen=True)
class Cut:
    """eta >= bound + grad^T (z - 1_support)."""

    support: Support
    bound: float
    grad: np.ndarray


@dataclass
class Oracle:
    """Evaluates supports (certified value and bound) and builds their cuts, with a cache.

    ``tol`` is the largest certified error value - bound an inner solve may leave; the inner
    solves run until they meet it (``least_squares``, ``hinge``), so every evaluation returns.
    """

    problem: Problem
    tol: float
    values: dict[Support, tuple[float, float]] = field(default_factory=dict)
    _state: dict[Support, tuple[Any, ...]] = field(default_factory=dict, repr=False)
    _cuts: dict[Support, Cut] = field(default_factory=dict, repr=False)
    evaluations: int = 0

    def evaluate(self, support: Sequence[int]) -> tuple[float, float]:
        """(value, bound) of F at ``support``: bound <= F(S) <= value, value - bound <= tol."""
        key = tuple(sorted(int(j) for j in support))
        if key not in self.values:
            S = np.asarray(key, dtype=np.int64)
            state: tuple[Any, ...]  # the inner solve's optimum, as its loss's cut reads it
            if self.problem.loss == "squared":
                value, bound, beta, mu = ls_evaluate(self.problem, S, self.tol)
                state = (beta, mu)
            else:
                value, bound, beta, mu, h = hinge_evaluate(self.problem, S, self.tol)
                state = (beta, mu, h)
            self.values[key] = (value, bound)
            self._state[key] = state
            self.evaluations += 1
        return self.values[key]

    def cut(self, support: Sequence[int]) -> Cut:
        key = tuple(sorted(int(j) for j in support))
        if key not in self._cuts:
            _, bound = self.evaluate(key)
            S = np.asarray(key, dtype=np.int64)
            if self.problem.loss == "squared":
                bound, grad = ls_cut(self.problem, S, *self._state[key])
            else:
                beta, _, h = self._state[key]
                bound, grad = hinge_cut(self.problem, S, beta, h)
            self._cuts[key] = Cut(key, bound, grad)
        return self._cuts[key]


@dataclass
class MasterResult:
    """Outcome of one master solve.

    status: "optimal" (support is a minimiser over the region up to ``gap``),
    "infeasible" (no support in the region has a bound below ``objlimit``: the certificate),
    or "timelimit". ``lower`` is SCIP's dual bound on min F over the region (un-shifted).
    """

    status: str
    support: Support | None
    value: float | None
    lower: float
    seconds: float
    cuts: int
    nodes: int


class Collector(Protocol):
    """Receives the supports a collecting solve enumerates (``solve_master(collect=...)``)."""

    def threshold(self) -> float:
        """Supports whose certified lower bound is below this (less the margin) are offered."""

    def offer(self, support: Support, value: float) -> bool:
        """Take ``support``; False stops the solve (the caller restarts elsewhere)."""


class _LazyCuts(Conshdlr):
    """Checks integral candidates against F and adds the violated support's cut.

    In collecting mode every candidate that satisfies its own cut is offered to the
    collector (with its computed value) when its certified lower bound is below the
    collector's threshold less ``margin``, and then excluded by a no-good cut, so no solution
    is ever accepted and the tree enumerates every support below the objective limit. The
    rule is on the bound, not the value: a candidate left out then provably has
    F >= threshold - margin (the value is only within the inner tolerance above F).
    """

    def __init__(
        self,
        oracle: Oracle,
        z: list,
        eta: object,
        shift: float,
        s: int,
        viol: float,
        collect: Collector | None = None,
        margin: float = 0.0,
    ) -> None:
        self.oracle, self.z, self.eta, self.shift, self.s, self.viol = oracle, z, eta, shift, s, viol
        self.collect, self.margin = collect, margin
        self.added: set[Support] = set()
        self.excluded: set[Support] = set()
        self.stopped = False
        self.error: BaseException | None = None  # raised inside a callback, re-raised after the solve

    def _violated(self, solution: object = None) -> tuple[Support, bool]:
        zval = np.fromiter((self.model.getSolVal(solution, v) for v in self.z), dtype=np.float64, count=len(self.z))
        S = tuple(sorted(int(j) for j in np.argpartition(-zval, self.s - 1)[: self.s]))
        eta = self.model.getSolVal(solution, self.eta) + self.shift
        return S, eta < self.oracle.cut(S).bound - self.viol

    def add(self, cut: Cut) -> None:
        const = cut.bound - self.shift - float(cut.grad[list(cut.support)].sum())
        self.model.addCons(self.eta - quicksum(float(g) * v for g, v in zip(cut.grad, self.z)) >= const)
        self.added.add(cut.support)

    def _guarded(self, work: Callable[[], dict]) -> dict:
        """``work()``, or, when it raises (out of memory in an evaluation, an interrupt), the
        exception kept for ``solve_master`` to raise after the solve and the solve stopped: SCIP's
        callbacks turn any exception into a plain "SCIP: unspecified error", which would hide a
        machine failure that must leave the release unrecorded."""
        if self.error is not None:
            return {"result": SCIP_RESULT.INFEASIBLE}
        try:
            return work()
        except BaseException as e:  # noqa: BLE001 -- every kind, re-raised as it was after the solve
            self.error = e
            self.model.interruptSolve()
            return {"result": SCIP_RESULT.INFEASIBLE}

    def conscheck(self, constraints, solution, checkintegrality, checklprows, printreason, completely, **kw):
        if self.collect is not None:  # every candidate goes through enforcement (collected, then excluded)
            return {"result": SCIP_RESULT.INFEASIBLE}

        def check() -> dict:
            _, violated = self._violated(solution)
            return {"result": SCIP_RESULT.INFEASIBLE if violated else SCIP_RESULT.FEASIBLE}

        return self._guarded(check)

    def _enforce(self) -> dict:
        S, violated = self._violated()
        if violated and S not in self.added:
            self.add(self.oracle.cut(S))
            return {"result": SCIP_RESULT.CONSADDED}
        if self.collect is None or S in self.excluded:
            return {"result": SCIP_RESULT.FEASIBLE}
        value, bound = self.oracle.evaluate(S)
        if bound < self.collect.threshold() - self.margin:  # else F >= bound >= threshold - margin
            if not self.collect.offer(S, value):
                self.stopped = True
                self.model.interruptSolve()
            else:  # the threshold fell: prune every node whose bound is above the new one
                self.model.setObjlimit(self.collect.threshold() - self.margin - self.shift)
        self.model.addCons(quicksum(self.z[j] for j in S) <= self.s - 1)
        self.excluded.add(S)
        return {"result": SCIP_RESULT.CONSADDED}

    def consenfolp(self, constraints, nusefulconss, solinfeasible):
        return self._guarded(self._enforce)

    def consenfops(self, constraints, nusefulconss, solinfeasible, objinfeasible):
        return self._guarded(self._enforce)

    def conslock(self, constraint, locktype, nlockspos, nlocksneg):
        pass


def solve_master(
    oracle: Oracle,
    seeds: Sequence[Sequence[int]],
    *,
    center: Sequence[int] | None = None,
    max_common: int | None = None,
    common: int | None = None,
    drop: Sequence[int] | None = None,
    nogood: Sequence[Sequence[int]] = (),
    objlimit: float | None = None,
    gap: float = 0.0,
    time_limit: float | None = None,
    collect: Collector | None = None,
    margin: float = 0.0,
) -> MasterResult:
    """Minimise F over the region by single-tree outer approximation (see the module docstring).

    ``seeds``: supports whose cuts start the master (at least one). ``objlimit``: only
    supports with F below it are of interest; "infeasible" then certifies that every
    support of the region has F >= objlimit (up to SCIP's tolerances). ``gap``: absolute
    optimality gap at which SCIP may stop. ``drop``: a subset K of the centre; fixes z_K = 0
    and z_{C \\ K} = 1 (the supports that replace exactly K), a far tighter master than the
    bucket constraint alone, whose relaxation can drop every centre feature fractionally.

    ``collect``: enumerate instead of minimise. Every support of the region below
    ``objlimit`` is evaluated; those whose certified lower bound is below
    ``collect.threshold() - margin`` are offered to the collector (with their computed
    value), and each is then excluded by a no-good cut; each offer lowers the objective limit
    to the new threshold less ``margin``. "infeasible" then certifies that every support of
    the region not evaluated has F >= the final limit (limits only fall; cuts are lower
    bounds of F), and every one evaluated but not offered has F >= its bound >= (the
    threshold then) - margin; "interrupted" means the collector stopped the solve.
    """
    t0 = time.perf_counter()
    if not seeds:
        raise ValueError("solve_master needs at least one seed support")
    shift = oracle.evaluate(seeds[0])[0]
    known: list[Support] = [tuple(sorted(int(j) for j in S)) for S in seeds]
    excluded: list[Support] = []
    region = (center, max_common, common, drop, tuple(nogood))
    attempt = 0
    while True:  # no cap: a release must not stop on a condition of the data (module docstring)
        m, z, handler = _attempt(
            oracle, shift, known, excluded, region, objlimit, gap, time_limit, collect, margin, attempt
        )
        if handler.error is not None:  # a callback's exception (out of memory, an interrupt): as it was
            raise handler.error
        status = "interrupted" if handler.stopped else m.getStatus()
        if status in ("optimal", "gaplimit", "infeasible", "timelimit", "interrupted"):
            break
        if status == "userinterrupt":  # SCIP caught the operator's Ctrl-C (misc/catchctrlc)
            raise KeyboardInterrupt
        # numerical trouble: every cut found is valid and every support excluded stays so (limits
        # only fall), so a fresh tree with another random seed solves the same region
        known += [S for S in handler.added if S not in known]
        excluded += [S for S in handler.excluded if S not in excluded]
        if collect is not None:
            objlimit = collect.threshold() - margin if objlimit is None else min(objlimit, collect.threshold() - margin)
        attempt += 1
    lower = float(m.getDualbound()) + shift
    support = value = None
    if m.getNSols() > 0 and status in ("optimal", "gaplimit"):
        sol = m.getBestSol()
        zval = np.array([m.getSolVal(sol, v) for v in z])
        support = tuple(sorted(int(j) for j in np.argpartition(-zval, oracle.problem.s - 1)[: oracle.problem.s]))
        value = oracle.evaluate(support)[0]
        status = "optimal"
    elif status == "infeasible":
        lower = float(objlimit) if objlimit is not None and math.isfinite(objlimit) else np.inf
    return MasterResult(status, support, value, lower, time.perf_counter() - t0, len(handler.added), m.getNNodes())


def _attempt(
    oracle: Oracle,
    shift: float,
    seeds: Sequence[Support],
    excluded: Sequence[Support],
    region: tuple[Any, ...],
    objlimit: float | None,
    gap: float,
    time_limit: float | None,
    collect: Collector | None,
    margin: float,
    attempt: int,
) -> tuple[Model, list[Any], _LazyCuts]:
    """One SCIP tree over the region (``solve_master``), seeded with the cuts of ``seeds`` and with
    the no-good cuts of ``excluded``; ``attempt`` shifts SCIP's random seed. Returns the solved
    model, its z variables and its cut handler."""
    s = oracle.problem.s
    m = _master_model(time_limit, gap, attempt)
    z = [m.addVar(vtype="B", name=f"z{j}") for j in range(oracle.problem.p)]
    eta = m.addVar(lb=-shift, ub=None, obj=1.0, name="eta")  # F >= 0
    m.addCons(quicksum(z) == s)
    center, max_common, common, drop, nogood = region
    _restrict(m, z, s, center, max_common, common, drop, [*nogood, *excluded])
    viol = max(1e-9 * abs(shift), 1e-12)
    handler = _LazyCuts(oracle, z, eta, shift, s, viol, collect, margin)
    handler.excluded.update(excluded)
    m.includeConshdlr(
        handler,
        "bss_oa",
        "outer-approximation cuts of the BSS objective",
        chckpriority=-10,
        enfopriority=-10,
        needscons=False,
    )
    for S in seeds:
        handler.add(oracle.cut(S))
    if objlimit is not None and math.isfinite(objlimit):
        m.setObjlimit(float(objlimit) - shift)
    m.optimize()
    return m, z, handler


def _master_model(time_limit: float | None, gap: float, attempt: int = 0) -> Model:
    """An empty SCIP model with the master's parameters: tolerances 1e-9, the absolute gap, no
    dual reductions (the lazy cuts are not all known upfront), a fixed random seed. A later
    ``attempt`` (after numerical trouble, ``solve_master``) shifts the seed and, from the third
    on, also runs SCIP with its numerics emphasis and no presolving, in case the trouble is
    the cuts' own coefficient range rather than the seed's path."""
    m = Model()
    if not os.environ.get("DPDIST_SCIP_VERBOSE"):
        m.hideOutput()
    if time_limit is not None:  # an operator's opt-in guard, outside the privacy guarantee (``base``)
        m.setParam("limits/time", max(1.0, float(time_limit)))
    m.setParam("numerics/feastol", 1e-9)
    m.setParam("numerics/dualfeastol", 1e-9)
    m.setParam("limits/absgap", max(float(gap), 0.0))
    m.setParam("limits/gap", 0.0)
    m.setParam("misc/allowstrongdualreds", False)
    m.setParam("misc/allowweakdualreds", False)
    m.setParam("randomization/randomseedshift", int(attempt))
    if attempt >= 2:
        m.setEmphasis(SCIP_PARAMEMPHASIS.NUMERICS)
        m.setPresolve(SCIP_PARAMSETTING.OFF)
        m.setParam("numerics/feastol", 1e-9)  # the emphasis loosens nothing the certificates use
        m.setParam("numerics/dualfeastol", 1e-9)
    return m


def _restrict(
    m: Model,
    z: list[Any],
    s: int,
    center: Sequence[int] | None,
    max_common: int | None,
    common: int | None,
    drop: Sequence[int] | None,
    nogood: Sequence[Sequence[int]],
) -> None:
    """The region's constraints on z (``solve_master``'s parameters; module docstring)."""
    if center is not None:
        C = [int(j) for j in center]
        if max_common is not None:
            m.addCons(quicksum(z[j] for j in C) <= max_common)
        if common is not None:
            m.addCons(quicksum(z[j] for j in C) == common)
        if drop is not None:
            gone = {int(j) for j in drop}
            for j in C:
                if j in gone:
                    m.chgVarUb(z[j], 0.0)
                else:
                    m.chgVarLb(z[j], 1.0)
    for T in nogood:
        m.addCons(quicksum(z[int(j)] for j in T) <= s - 1)


def oracle_for(problem: Problem, tol: float) -> Oracle:
    """The problem's oracle for inner tolerance ``tol``, kept on the problem so evaluations
    and cuts are reused by every later solve in the same process."""
    cache = problem.__dict__.setdefault("_oracles", {})
    if tol not in cache:
        cache[tol] = Oracle(problem, tol)
    return cache[tol]


@dataclass(frozen=True)
class MasterJob:
    """One master solve, as a picklable unit of work (arguments of ``solve_master``)."""

    seeds: tuple[Support, ...]
    tol: float
    center: Support | None = None
    max_common: int | None = None
    common: int | None = None
    nogood: tuple[Support, ...] = ()
    drop: Support | None = None
    objlimit: float | None = None
    gap: float = 0.0
    time_limit: float | None = None


def master_unit(problem: Problem, job: MasterJob) -> MasterResult:
    """Work unit: run one master solve (on a worker holding the ``mip`` resource)."""
    return solve_master(
        oracle_for(problem, job.tol),
        job.seeds,
        center=job.center,
        max_common=job.max_common,
        common=job.common,
        drop=job.drop,
        nogood=job.nogood,
        objlimit=job.objlimit,
        gap=job.gap,
        time_limit=job.time_limit,
    )


def evaluate_unit(problem: Problem, item: tuple[Support, float]) -> tuple[float, float]:
    """Work unit: (value, bound) of F at one support."""
    support, tol = item
    return oracle_for(problem, tol).evaluate(support)


def drop_sets(oracle: Oracle, center: Sequence[int], sizes: Sequence[int]) -> list[Support] | None:
    """The removal sets K of the centre with |K| in ``sizes``, cheapest first, or None when there
    are more than ``DECOMPOSE_MAX`` (then the region is solved as one master).

    The order key is F(C \\ K) (the support without replacements: an upper bound of every
    support replacing exactly K), so the best subproblems come first and set the objective
    limit that prunes the rest.
    """
    C = tuple(sorted(int(j) for j in center))
    Ks = [K for j in sizes for K in itertools.combinations(C, j)]
    if len(Ks) > DECOMPOSE_MAX:
        return None

    def key(K: Support) -> float:
        rest = tuple(j for j in C if j not in K)
        return oracle.evaluate(rest)[0] if rest else math.inf

    return sorted(Ks, key=key)
