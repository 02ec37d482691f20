"""Where the independent work units run.

The BSS procedures are written against a small executor interface, so the library runs in
one process while ``dpdist.pipelines.best_subset`` runs the same units on a Dask cluster:

* ``call(fn, item)`` -> ``fn(problem, item)`` anywhere (IHT, single evaluations);
* ``map(fn, items)`` -> ``[fn(problem, item) for item in items]`` (one-swap evaluations);
* ``mip(fn, item)`` -> ``fn(problem, item)`` for one MIP solve (the OA master);
* ``mip_map(fn, items)`` -> several independent MIP solves (the mistakes buckets);
* ``meta``: the instance's public description (p, s, loss, Delta); ``workers``: how many
  units can run at once (a chunking hint).

A unit is a module-level function ``fn(problem, item)``; the executor supplies the problem
(in this process: the object itself; on a cluster: rebuilt once per worker from its store).
``LocalExecutor`` is the default: everything in this process, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dpdist.selection.best_subset.objective import Problem

__all__ = ["LocalExecutor", "ProblemMeta"]


@dataclass(frozen=True)
class ProblemMeta:
    """What the driver may know about an instance: public parameters and the width p."""

    p: int
    s: int
    loss: str
    delta: float

    @classmethod
    def of(cls, problem: Problem) -> ProblemMeta:
        return cls(problem.p, problem.s, problem.loss, problem.delta)


class LocalExecutor:
    """Runs every unit in this process."""

    workers = 1

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.meta = ProblemMeta.of(problem)

    def call(self, fn: Callable[[Problem, Any], Any], item: Any) -> Any:
        return fn(self.problem, item)

    def map(self, fn: Callable[[Problem, Any], Any], items: Iterable[Any]) -> list[Any]:
        return [fn(self.problem, item) for item in items]

    def mip(self, fn: Callable[[Problem, Any], Any], item: Any) -> Any:
        return fn(self.problem, item)

    def mip_map(self, fn: Callable[[Problem, Any], Any], items: Iterable[Any]) -> list[Any]:
        return [fn(self.problem, item) for item in items]
