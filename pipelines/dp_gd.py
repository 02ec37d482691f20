"""Full-batch DP-GD (and DP-IHT) as a Dask reduction over a store's row blocks.

The same steps as ``dpdist.solvers.dp_sgd.dp_sgd`` with q = 1 (``DPGDClassifier``) and
``dpdist.solvers.dp_iht.dp_iht`` (``DPIHTClassifier``), with the rows spread over the cluster:

1. Once: the store's row blocks are read by tasks pinned to the workers, one group per worker,
   each group's rows prepared as the estimator prepares them (each row normalised, a per-record
   map; targets mapped to -1/+1 or clipped) and held in its worker's memory for the whole fit, over
   the group's own columns (``_own_columns``): the c_g columns its rows hold, the frequent ones first,
   its rows' column indices renumbered into them. The central process keeps each group's columns.
2. Each step: the central process sends each group the iterate's c_g coordinates on its columns,
   straight to the group's worker (a direct scatter: not through the scheduler, one TLS hop instead of
   two), then the group's task; the task sums the clipped per-record gradients of its rows there (the
   numba kernel ``clipped_gradient_sum``: the same products in the same order as on the d coordinates,
   over short vectors whose frequent coordinates share cache lines) and the central process takes its
   c_g sums straight from the worker; it -- the flow's release task, after the charge -- adds them into
   a d-vector, adds the Gaussian noise N(0, (z C)^2) to every coordinate (``gaussian_noise``, from its
   own generator, drawn while the workers sum: ``SGDPlan.draw_noise``) and takes the step.

A group's tasks run on the worker that holds it and on no other (``_Groups``): Dask's work stealing
would otherwise move a task, and the group's rows with it, to an idle worker (a worker busy when the
fit starts made it do so). A worker lost mid-fit has its group read again on another worker and its
pending task sent there again with its iterate, with the same numbers: one lost while its task waits or
runs (the scheduler cancels a task whose scattered iterate was lost with it), or between steps (a send
to it fails). Each step's iterate is a new copy on one worker, never replicated (a broadcast iterate's
replication once asked a lost worker for ever).

Privacy is the estimator's (its ``privacy_charge``: T Gaussian mechanisms of l2-sensitivity C): the
clipped sum over all records is the same number however the rows are grouped, and the noise is
drawn once per step, centrally. Nothing of a group's sum leaves the cluster but through the noisy
step. A step moves sum_g c_g coordinates each way between the central process and the workers
(c_g <= min(d, the group's non-zeros)) and nothing between the workers: the cost model is in
docs/user-guide/clusters.md. With ``$DPDIST_TIMINGS`` set, the fit's median step and the median
time of its pass over the rows (the slowest worker's kernel time in a step) go to the operator's
log (``dpdist.utils.operator_log``), never elsewhere.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import dask
import distributed
import numba
import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import normalize

from dpdist.data.store import open_store
from dpdist.pipelines.placement import pinned, worker_info, workers
from dpdist.selection.sis import store_target
from dpdist.solvers.dp_iht import hard_threshold
from dpdist.solvers.dp_sgd import SGDPlan, clipped_gradient_sum, csr_parts
from dpdist.utils import operator_log

__all__ = ["dp_gd_store", "fit_dask", "row_groups"]

CHECK_LOST = 1.0  # seconds: how often a pending group task looks whether its worker was lost
FREQUENT = 4  # rows: a group's columns in more rows are laid out by frequency, the others by first use

Parts = tuple[np.ndarray, np.ndarray, np.ndarray]


@numba.njit(cache=True)
def _first_use(indices: np.ndarray, d: int) -> np.ndarray:  # pragma: no cover -- numba
    """The position of each column's first entry in ``indices`` (-1 for a column with none)."""
    first = np.full(d, -1, dtype=np.int64)
    for k in range(indices.size):
        if first[indices[k]] < 0:
            first[indices[k]] = k
    return first


@numba.njit(cache=True, nogil=True)
def _add_into(g: np.ndarray, cols: np.ndarray, part: np.ndarray) -> None:  # pragma: no cover -- numba
    """``g[cols] += part`` in one pass (``cols`` distinct)."""
    for i in range(cols.size):
        g[cols[i]] += part[i]


@numba.njit(cache=True, nogil=True)
def _step(w: np.ndarray, g: np.ndarray, lr: float, w_sum: np.ndarray, average: bool) -> None:  # pragma: no cover
    """``w -= lr * g`` and, when ``average``, ``w_sum += w``, in one pass (the same numbers as numpy's)."""
    for i in range(w.size):
        w[i] -= lr * g[i]
        if average:
            w_sum[i] += w[i]


def _own_columns(parts: Parts, d: int) -> tuple[Parts, np.ndarray]:
    """The kernel's CSR ``parts`` over the columns its rows hold: (the parts with each column index
    renumbered into them, those columns). The columns in more than ``FREQUENT`` rows come first, the
    most frequent first (they share cache lines); the others follow in the order the rows first use
    them, so that a step reads and writes them nearly in sequence (most are in one row: KDDA's
    profile). Each row keeps its entries' order: the kernel takes the same products in the same order."""
    indptr, indices, data = parts
    counts = np.bincount(indices, minlength=d)
    cols = np.flatnonzero(counts)
    frequent = counts[cols] > FREQUENT
    hot, rare = cols[frequent], cols[~frequent]
    hot = hot[np.argsort(-counts[hot], kind="stable")]
    rare = rare[np.argsort(_first_use(indices, d)[rare], kind="stable")]
    cols = np.concatenate([hot, rare])
    number = np.empty(d, dtype=np.int64)
    number[cols] = np.arange(cols.size)
    return (indptr, number[indices], data), cols


def row_groups(bounds: list[tuple[int, int]], n_workers: int) -> list[list[tuple[int, int]]]:
    """The groups of a store's row blocks (``bounds``) a fit over ``n_workers`` workers makes: one a worker
    (as many as there are blocks, at most), block i in group i mod G."""
    n_groups = max(1, min(len(bounds), n_workers))
    return [bounds[g::n_groups] for g in range(n_groups)]


def _load_group(
    path: str, ranges: list[tuple[int, int]], row_norm: str | None, loss: str, y_bound: float
) -> tuple[Parts, np.ndarray, np.ndarray]:
    """A group's rows as the kernel takes them, prepared as the estimator prepares them, over their own
    columns: (CSR parts, targets, the columns)."""
    store = open_store(path)
    X = sp.vstack([store.read_rows(r0, r1) for r0, r1 in ranges], format="csr")
    y = np.concatenate([store_target(store, store.y[r0:r1]) for r0, r1 in ranges])
    if row_norm is not None:
        X = normalize(X, norm=row_norm)
    if loss == "squared":
        y = np.clip(y, -y_bound, y_bound)
    parts, cols = _own_columns(csr_parts(X), X.shape[1])
    return parts, np.ascontiguousarray(y, dtype=np.float64), cols


def _columns(group: tuple[Parts, np.ndarray, np.ndarray]) -> np.ndarray:
    return group[2]


def _group_sum(
    group: tuple[Parts, np.ndarray, np.ndarray], w: np.ndarray, b: float, hyper: tuple[int, float, float]
) -> tuple[np.ndarray, float, float, str]:
    """The clipped gradient sum of a group's rows at (w on its columns, b) (un-noised: it never leaves the
    cluster), with the kernel's seconds and the worker's address (the operator's timing)."""
    from distributed import get_worker

    parts, y, _ = group
    out = np.zeros(w.size)
    start = time.perf_counter()
    gb = clipped_gradient_sum(parts, y, np.arange(y.size, dtype=np.int64), (w, np.array([b])), hyper, out)
    return out, gb, time.perf_counter() - start, get_worker().address


class _Groups:
    """A fit's groups of rows held on the workers (module docstring): their futures, the worker each lies on,
    their columns. :meth:`submit` runs a task on each group on its worker only, so that no group moves
    between workers, its arrays sent straight to that worker (not through the scheduler: one hop of the
    iterate instead of two; in the task, through the scheduler, when that worker is paused or cannot be
    reached from here); :meth:`gather` takes the results straight from the workers. A group whose
    worker is lost is read again on another, and its pending task (with its arrays) sent there.
    """

    def __init__(self, client: Any, path: str, prepare: tuple[str | None, str, float]) -> None:
        self.client = client
        store = open_store(path)
        addrs = workers()
        self.futures = []
        for i, ranges in enumerate(row_groups(list(store.row_bounds()), len(addrs))):
            with pinned(i, addrs):  # loose: a load has no inputs, any worker may read it
                key = f"dp-gd-rows-{i}-{os.urandom(4).hex()}"
                self.futures.append(client.submit(_load_group, path, ranges, *prepare, pure=False, key=key))
        self.where = [""] * len(self.futures)
        # Dask warns of a large graph, naming its size: an iterate sent in a task (below) is at most d floats,
        # so the threshold is that public bound, never reached; the warning would have told c_g, a count of the data
        self.largest = f"{8 * store.shape[1] + (1 << 20)}B"
        self.columns: list[np.ndarray] = self.map("dp-gd-columns", _columns, [()] * len(self.futures))

    def _place(self, i: int) -> str:
        """The worker group ``i`` lies on, once read (again, if its worker was lost)."""
        future = self.futures[i]
        while True:
            distributed.wait(future)
            if future.status == "error":
                future.result()  # raises the load's error
            holders = self.client.who_has([future]).get(future.key) or ()
            if holders:
                self.where[i] = min(holders)
                return self.where[i]
            time.sleep(0.05)  # lost since: the scheduler reads it again

    def _alive(self) -> set[str]:
        return set(worker_info(self.client))

    def _submit_one(self, name: str, i: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        while True:
            where = self.where[i] or self._place(i)
            try:  # the arrays straight to the group's worker
                sent = [
                    self.client.scatter(a, workers=[where], direct=True, hash=False, timeout=CHECK_LOST)
                    if isinstance(a, np.ndarray)
                    else a
                    for a in args
                ]
            except (OSError, KeyError):  # a closed connection, no such (running) worker, or gone as it was told of
                if where not in self._alive():  # lost: its group is read again on another worker
                    self.where[i] = ""
                    continue
                # paused, or not reachable from here: the arrays go in the task, which the scheduler delivers
                sent = list(args)
            key = f"{name}-group{i}-{os.urandom(3).hex()}"  # the task names the dashboard shows
            with dask.config.set({"distributed.admin.large-graph-warning-threshold": self.largest}):
                return self.client.submit(
                    fn, self.futures[i], *sent, workers=[where], allow_other_workers=False, key=key
                )

    def submit(self, name: str, fn: Callable[..., Any], args: list[tuple[Any, ...]]) -> _Pending:
        """``fn(group i, *args[i])`` on group i's worker, for every group; its arrays are there when this returns."""
        return _Pending(name, fn, args, [self._submit_one(name, i, fn, a) for i, a in enumerate(args)])

    def gather(self, pending: _Pending) -> list[Any]:
        """The results of ``pending``'s tasks; a task whose worker was lost (pending on it, or its arrays lost
        with it: cancelled) is sent again."""
        tasks = pending.tasks
        while True:
            try:
                distributed.wait(tasks, timeout=CHECK_LOST)
            except TimeoutError:  # the wait's own (a task's error is raised by gather, below)
                pass
            if all(t.status == "finished" for t in tasks):
                try:
                    return self.client.gather(tasks, direct=True)
                except CancelledError:  # a result lost with its worker since: sent again below
                    pass
            alive = None
            for i, task in enumerate(tasks):
                if task.status == "error":
                    task.result()  # raises the task's error
                if task.status == "finished":
                    continue
                alive = self._alive() if alive is None else alive
                if task.cancelled() or self.where[i] not in alive:  # held for ever by its worker restriction
                    task.cancel()
                    self.where[i] = ""
                    tasks[i] = self._submit_one(pending.name, i, pending.fn, pending.args[i])

    def map(self, name: str, fn: Callable[..., Any], args: list[tuple[Any, ...]]) -> list[Any]:
        """``fn(group i, *args[i])`` on group i's worker, for every group: their results."""
        return self.gather(self.submit(name, fn, args))


@dataclass
class _Pending:
    """The tasks of a :meth:`_Groups.submit`, with what they were made of (to send one again)."""

    name: str
    fn: Callable[..., Any]
    args: list[tuple[Any, ...]]
    tasks: list[Any]


def dp_gd_store(
    client: Any,
    path: str | os.PathLike[str],
    plan: SGDPlan,
    rng: np.random.Generator,
    row_norm: str | None = "l2",
    y_bound: float = 1.0,
    s: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, float]:
    """Full-batch DP-GD on the store at ``path`` over ``client``'s workers (module docstring); with
    ``s``, DP-IHT (the iterate cut to its s largest weights after every step). Returns (w, b)."""
    if plan.sampling_rate != 1.0:
        raise ValueError("the Dask reduction takes full-batch steps: the plan's sampling_rate must be 1")
    d = open_store(path).shape[1]
    groups = _Groups(client, str(path), (row_norm, plan.loss, y_bound))
    w, b = np.zeros(d), 0.0
    w_sum, b_sum, n_avg = np.zeros(d), 0.0, 0
    first_avg = min(plan.steps - 1, int(plan.average_from * plan.steps))
    step_s, pass_s = [], []
    with ThreadPoolExecutor(1, thread_name_prefix="dp-gd-noise") as drawer:
        for t in range(plan.steps):
            started = time.perf_counter()
            pending = groups.submit(f"dp-gd-step{t}", _group_sum, [(w[cols], b, plan.hyper) for cols in groups.columns])
            noise = drawer.submit(plan.draw_noise, rng, d)  # nothing of the data: drawn while the workers sum
            sums = groups.gather(pending)
            g, gb = np.zeros(d), 0.0
            kernel: dict[str, float] = {}
            for (part, part_b, seconds, where), cols in zip(sums, groups.columns, strict=True):
                _add_into(g, cols, part)
                gb += part_b
                kernel[where] = kernel.get(where, 0.0) + seconds
            gb = plan.with_noise(g, gb, w, noise.result())
            average = t >= first_avg and s is None  # DP-IHT releases its last iterate
            _step(w, g, plan.lr, w_sum, average)
            b -= plan.lr * gb / plan.normaliser
            if s is not None:
                hard_threshold(w, s)
            if average:
                b_sum += b
                n_avg += 1
            step_s.append(time.perf_counter() - started)
            pass_s.append(max(kernel.values()))
            if progress is not None:
                progress(t + 1, plan.steps)
    n_groups = len(groups.futures)
    del groups  # the rows held on the workers are released with their futures
    operator_log.timing(
        "dp-gd over %d groups: median step %.3f s, median pass over the rows %.3f s (the slowest worker's "
        "gradient sums), step/pass %.2f",
        n_groups,
        float(np.median(step_s)),
        float(np.median(pass_s)),
        float(np.median(step_s) / max(float(np.median(pass_s)), 1e-9)),
    )
    if s is not None:  # DP-IHT releases its last iterate
        return w, b * plan.intercept_scaling
    return w_sum / n_avg, b_sum / n_avg * plan.intercept_scaling


def fit_dask(
    client: Any,
    path: str,
    model: Any,
    n_records: int,
    seed: int | None,
    classes: list[float] | None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The released model of a DP-GD or DP-IHT estimator ``model`` fitted over the cluster (run inside
    the central release, after the charge): the estimator's result form. ``progress(done, steps)``
    after each step, for the operator's display."""
    from dpdist.utils.random import check_random_state

    charge = model.privacy_charge(n_records)
    plan = model.sgd_plan(n_records, charge.details["noise_multiplier"])
    s = int(model.s) if hasattr(model, "s") else None
    w, b = dp_gd_store(
        client, path, plan, check_random_state(seed), model.row_norm, float(getattr(model, "y_bound", 1.0)), s, progress
    )
    nz = np.flatnonzero(w)
    out = {
        "indices": nz.tolist(),
        "values": w[nz].tolist(),
        "intercept": float(b),
        "n_features": int(w.size),
        "row_norm": model.row_norm,
        "method": model.mechanism,
        "path": [],
        "iterations": int(plan.steps),
    }
    if classes is not None:
        out["classes"] = classes
    return out
