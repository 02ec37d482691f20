"""Single-process solvers on dedicated Dask workers.

Fast DP Frank-Wolfe is one sequential numba loop: it gains nothing from being split, and two
of them on one worker would fight for its core. Such fits are submitted with the Dask worker
resource ``solver=1``: only workers started with ``--resources solver=1`` (every LocalCluster
worker dpdist starts, and the SLURM workers of ``deploy/jobqueue.yaml``) run them, one at a
time each. If a worker dies mid-fit, Dask runs the fit again on another such worker.

The fit returns the model it would release; it does not touch the ledger. The caller charges
the accountant first and records the returned model as the release (``dpdist.flows.release``).
"""

from __future__ import annotations

import ctypes
import gc
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from dpdist.data.store import BLOCK_CACHE, open_store
from dpdist.methods import get
from dpdist.pipelines.fit_progress import relay, reporter
from dpdist.privacy.guard import charged_by_caller
from dpdist.released import widen
from dpdist.selection.sis import store_target
from dpdist.solvers.frank_wolfe import Progress
from dpdist.utils.operator_log import timing

SOLVER_RESOURCE = "solver"
# the best-subset OA master (``dpdist.pipelines.best_subset``): one SCIP process per worker holding it.
# Every worker dpdist starts holds both (``dpdist.flows.runtime``), so the names live here, light to import.
MIP_RESOURCE = "mip"
STORE_CLASSES = [-1.0, 1.0]  # a binary store's public labels (``store_target``'s mapping)


def _release_heap() -> None:
    """Collect garbage and return the C heap's free pages to the system (glibc ``malloc_trim``).

    A Dask worker that ran the select stage holds GBs of freed but unreturned heap (Dask's
    "unmanaged memory"), which a KDDA-sized fit would start on top of. A no-op where there is
    no glibc."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _fit_copies(store: Any, X: sp.csr_matrix, bounds: str, dtype: str = "float64") -> sp.csc_matrix:
    """For a fit on all columns: the store's CSC copy (read, not converted from X), and with
    ``bounds="clip"`` both matrices clipped in place. Their arrays were read for this fit alone
    (no block cache), so nothing else sees them; the estimator then finds every entry within the
    bound and copies neither (``enforce_bounds``). Peak memory of a KDDA-sized fit: CSR + CSC
    + the solver's O(n_features) state, where converting and clipping copies held 3 matrices.
    Blocks cached in this worker by earlier stages are dropped first (the fit does not read them)
    and the freed heap handed back to the system (:func:`_release_heap`)."""
    BLOCK_CACHE.clear()
    _release_heap()
    X_csc = store.csc(dtype)
    if bounds == "clip":  # per entry, as enforce_bounds' clip (stores hold no repeated entry: both canonical)
        for A in (X, X_csc):
            if A.has_canonical_format:
                np.clip(A.data, -1.0, 1.0, out=A.data)
    return X_csc


@dataclass(frozen=True)
class FitJob:
    """One model fit on a store, as a picklable unit of work (:func:`fit_store`): the registered
    ``method`` and its estimator's ``params`` (the registry builds it, :meth:`dpdist.methods.Method.build`,
    for the store's task).

    ``path``: the store; ``features``: the columns to fit on (None: all); ``dtype``: the values' type
    ("float32": half the memory, :meth:`SparseStore.csr`); ``split_key``: the key of the search's own
    split (a secret: never in the job's repr, which Dask logs with a failed task).
    """

    path: str
    method: str
    params: dict[str, Any]
    features: list[int] | None = None
    dtype: str = "float64"
    split_key: bytes | None = field(default=None, repr=False)  # a secret: not in Dask's log of a failed task


def fit_store(job: FitJob, show: bool = False) -> dict[str, Any]:
    """On a worker: run ``job``; with ``show``, its iterations go to the run's terminal display
    (:mod:`dpdist.pipelines.fit_progress`).

    Returns the released form of the model in the store's columns: the non-zero weights, the
    intercept of a gradient learner, the signed vertex path of a Frank-Wolfe learner (a function of
    the private selections only), the search's chosen candidate. The fit's time goes to the worker's
    log, never into the release (and the search's nowhere: its duration is secret).
    """
    epsilon = job.params.get("epsilon")
    with charged_by_caller():  # a task of the flow's central release, which charged it first
        return _fit_store(job, reporter(f"train {job.method} at epsilon={epsilon:g}", show))


def _fit_store(job: FitJob, progress: Progress | None) -> dict[str, Any]:
    store = open_store(job.path)
    entry = get(job.method)
    model = entry.build(store.task, **job.params)
    X, y, X_csc = store.csr(job.dtype), store_target(store), None
    if job.features is not None:
        X = X[:, np.asarray(job.features, dtype=np.int64)]
    elif entry.column_copy:  # the solvers that read columns (screening too)
        X_csc = _fit_copies(store, X, str(job.params.get("bounds", "check")), job.dtype)
    if entry.own_split:  # not timed, no progress: the search's duration tells how many runs it made
        model.fit(X, y, split_key=job.split_key)
    else:
        t0 = time.perf_counter()
        kwargs: dict[str, Any] = {"X_csc": X_csc} if X_csc is not None else {}
        model.fit(X, y, **kwargs, **({"progress": progress} if entry.path or entry.counted else {}))
        timing("%s fit on %s: %.3f s", job.method, job.path, time.perf_counter() - t0)
    return _released_form(entry, model, job, store)


def _released_form(entry: Any, model: Any, job: FitJob, store: Any) -> dict[str, Any]:
    """The model ``fit_store`` returns (and the flow records): in the store's columns, with its
    public labels (``store_target``'s -1/+1 for a binary store, None for a regression)."""
    width = int(store.shape[1])
    if entry.on_selection:  # objective perturbation: fitted on a released selection (the run config requires one)
        return {
            "indices": [int(j) for j in job.features or ()],
            "values": model.coef_.ravel().tolist(),
            "path": [],
            "n_features": width,
            "iterations": 0,
            "classes": STORE_CLASSES if store.task != "regression" else None,
        }
    if not entry.path:  # a gradient learner, or the search's best run
        record = model.release_record_
        result = record["model"] if entry.own_split else record
        out = {**widen(result, job.features, width), "path": [], "iterations": 0}
        if entry.own_split:
            chosen = model.best_params_["learner"]
            out["search"] = {
                "candidate": record["candidate"],
                "validation_score": record["validation_score"],
                "learner": chosen,
            }
        return out
    record = model.release_record_
    out = {
        "indices": [int(j) for j in record["indices"]],
        "values": list(record["values"]),
        "path": [int(v) for v in record["path"]],
        "n_features": int(record["n_features"]),
        "iterations": int(model.max_iter),
        "classes": STORE_CLASSES if store.task != "regression" else None,
    }
    if model.screening is not None:
        out["screened"] = [[int(t), int(j)] for t, j in record.get("screened", [])]
    if record.get("clip"):  # the per-record map the model was fitted under (``from_release`` applies it again)
        out["clip"] = 1.0
    return widen(out, job.features, width)  # back to store columns (signed 1-based vertices)


def fit_on_solver(client: Any, job: FitJob) -> dict[str, Any]:
    """Run :func:`fit_store` on a worker holding the ``solver`` resource and wait for it (its task named
    ``train-<method>`` on the Dask dashboard; its iterations on the run's display while one is live)."""
    with relay(client) as show:
        fut = client.submit(
            fit_store,
            job,
            show,
            resources={SOLVER_RESOURCE: 1},
            pure=False,
            key=f"train-{job.method}-{os.urandom(6).hex()}",
        )
        return fut.result()
