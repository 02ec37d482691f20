"""DP best subset selection ([DPBSS25]) on a Dask cluster: the library's work units on workers.

``DaskExecutor`` implements the executor interface of
:mod:`dpdist.selection.best_subset.executor` over a ``distributed.Client``:

* the s(p - s) one-swap evaluations are split into chunks of incoming features and mapped
  over all workers (``client.map``);
* every MIP (the OA master: top-R certificate, centre certificate, each mistakes bucket)
  runs as one process on a worker holding the ``mip`` resource (``--resources mip=1``), one
  at a time per worker, like the Frank-Wolfe solver's ``solver`` resource
  (``dpdist.pipelines.train``); the mistakes buckets are independent MIPs mapped over such workers.

A task gets the store's path and the public parameters, never the data: each worker builds
the instance (Assumption 1 enforced, statistics precomputed) once and keeps it for the
following tasks (a small per-process cache). The driver learns only the public shape p.

``select_store`` is the release: it validates the parameters and the data on a worker
first (bad input costs nothing), then charges the accountant and runs the selector's
procedure inside ``Accountant.release`` (the charge precedes every solve).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpdist.data.store import open_store
from dpdist.exceptions import ParameterError
from dpdist.pipelines.placement import worker_info
from dpdist.pipelines.train import MIP_RESOURCE
from dpdist.selection.best_subset.base import BSSSelectorBase
from dpdist.selection.best_subset.executor import ProblemMeta
from dpdist.selection.best_subset.objective import Problem, store_problem

__all__ = ["MIP_RESOURCE", "DaskExecutor", "ProblemSpec", "select_store"]

_CACHE: OrderedDict[ProblemSpec, Problem] = OrderedDict()
_CACHE_SIZE = 2


@dataclass(frozen=True)
class ProblemSpec:
    """How a worker rebuilds the instance: the store and the public parameters of the instance
    (``BSSSelectorBase.instance_params``, as (name, value) pairs: the spec is a cache key)."""

    path: str
    params: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, path: str | os.PathLike[str], selector: BSSSelectorBase) -> ProblemSpec:
        return cls(str(path), tuple(selector.instance_params().items()))


def load_problem(spec: ProblemSpec) -> Problem:
    """The instance of ``spec`` in this process (built once, then cached)."""
    if spec in _CACHE:
        _CACHE.move_to_end(spec)
        return _CACHE[spec]
    problem = store_problem(open_store(spec.path), **dict(spec.params))
    _CACHE[spec] = problem
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return problem


def _run(fn: Callable[[Problem, Any], Any], spec: ProblemSpec, item: Any) -> Any:
    return fn(load_problem(spec), item)


def _meta(spec: ProblemSpec) -> ProblemMeta:
    return ProblemMeta.of(load_problem(spec))


class DaskExecutor:
    """The executor interface over a Dask client (see the module docstring)."""

    def __init__(self, client: Any, spec: ProblemSpec) -> None:
        self.client, self.spec = client, spec
        workers = worker_info(client)
        if workers and not any((w.get("resources") or {}).get(MIP_RESOURCE, 0) >= 1 for w in workers.values()):
            # a MIP task would wait forever for such a worker: say so instead (before any charge)
            raise ParameterError(
                f"no worker of the Dask cluster holds the {MIP_RESOURCE!r} resource that best "
                f"subset selection's MIP solves run on: start workers with `--resources "
                f"{MIP_RESOURCE}=1` (dpdist's local and SLURM clusters have it)"
            )
        self.workers = max(1, len(workers))
        # builds (and validates) the instance on a MIP worker before anything is charged
        self.meta: ProblemMeta = client.submit(_meta, spec, resources={MIP_RESOURCE: 1}, pure=False).result()

    def _key(self, what: str) -> str:
        return f"bss-{what}-{os.urandom(6).hex()}"

    def call(self, fn: Callable[[Problem, Any], Any], item: Any) -> Any:
        return self.client.submit(_run, fn, self.spec, item, pure=False, key=self._key(fn.__name__)).result()

    def map(self, fn: Callable[[Problem, Any], Any], items: Iterable[Any]) -> list[Any]:
        items = list(items)
        keys = [self._key(fn.__name__) for _ in items]
        futures = self.client.map(_run, [fn] * len(items), [self.spec] * len(items), items, pure=False, key=keys)
        return self.client.gather(futures)

    def mip(self, fn: Callable[[Problem, Any], Any], item: Any) -> Any:
        return self.client.submit(
            _run, fn, self.spec, item, resources={MIP_RESOURCE: 1}, pure=False, key=self._key(fn.__name__)
        ).result()

    def mip_map(self, fn: Callable[[Problem, Any], Any], items: Iterable[Any]) -> list[Any]:
        items = list(items)
        keys = [self._key(fn.__name__) for _ in items]
        futures = self.client.map(
            _run, [fn] * len(items), [self.spec] * len(items), items, resources={MIP_RESOURCE: 1}, pure=False, key=keys
        )
        return self.client.gather(futures)


def select_store(
    client: Any,
    path: str | os.PathLike[str],
    selector: BSSSelectorBase,
    accountant: Any = None,
    dataset: str | None = None,
    key: str | None = None,
) -> np.ndarray:
    """Release ``selector``'s support of the store at ``path``, computed on the cluster.

    The instance is built and validated on a worker first (ParameterError before any charge);
    then ``selector.fit_executor`` charges ``accountant`` and runs every solve on the cluster.
    Returns the released support (ascending); a failed propose-test-release check raises
    ``ReleaseRefused`` (recorded as the release); a solver limit raises ``SolverAborted`` before
    any noise is drawn (recorded as the release's outcome: the charge stands, a retry replays it).
    """
    selector.check_params()
    executor = DaskExecutor(client, ProblemSpec.of(path, selector))
    selector.fit_executor(executor, accountant, dataset, key)
    support = selector.support_
    assert support is not None  # fit_executor sets it or raises
    return support
