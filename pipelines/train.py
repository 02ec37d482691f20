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
from dpdist.exceptions import ParameterError
from dpdist.methods import get, names
from dpdist.pipelines.fit_progress import relay, reporter
from dpdist.privacy.guard import charged_by_caller
from dpdist.released import widen
from dpdist.selection.sis import store_target
from dpdist.solvers.frank_wolfe import Progress
from dpdist.utils.operator_log import timing
from dpdist.utils.random import RandomState

SOLVER_RESOURCE = "solver"
# the best-subset OA master (``dpdist.pipelines.best_subset``): one SCIP process per worker holding it.
# Every worker dpdist starts holds both (``dpdist.flows.runtime``), so the names live here, light to import.
MIP_RESOURCE = "mip"
STORE_CLASSES = [-1.0, 1.0]  # a binary store's public labels (``store_target``'s mapping)


def estimator(
    task: str,
    method: str,
    epsilon: float,
    delta: float,
    lam: float,
    max_iter: int,
    bounds: str = "check",
    calibration: str = "safe",
    random_state: RandomState = None,
    screening: dict[str, Any] | None = None,
    n_records: int | None = None,
) -> Any:
    """The estimator of the registered ``method`` (:mod:`dpdist.methods`) for a store's task (binary
    classification or regression), with the store's public classes (``store_target``'s -1/+1).

    The Frank-Wolfe learners take ``lam``, ``max_iter``, ``bounds`` and ``calibration``, the screening
    ones (rnm-screen, adp-screen: fast DP-FW with a screening) the options ``screening`` too; the
    gradient learners (and ``private-search``) run at their defaults with the public count
    ``n_records`` of the training records (they take no lambda, T or bounds: they clip per record);
    objective perturbation is pure epsilon-DP."""
    entry = get(method)
    if entry.family in ("gradient", "search"):
        return gradient_learner(task, method, epsilon, delta, n_records, random_state)
    if entry.family == "objective-perturbation":
        return entry.build(task, epsilon=epsilon, random_state=random_state, classes=STORE_CLASSES)
    screen = (screening or {}) if entry.kind == "screening" else {}
    # the classes are store_target's public mapping, never those the (train half of the) data happens to hold
    return entry.build(
        task,
        classes=STORE_CLASSES,
        epsilon=epsilon,
        delta=delta,
        lam=lam,
        max_iter=max_iter,
        calibration=calibration,
        bounds=bounds,
        random_state=random_state,
        **screen,
    )


def _release_heap() -> None:
    """Collect garbage and return the C heap's free pages to the system (glibc ``malloc_trim``).

    A Dask worker that ran the select stage holds GBs of freed but unreturned heap (Dask's
    "unmanaged memory"): the KDDA train worker started its fit at ~5 GiB. A no-op where there is
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
    """One model fit on a store, as a picklable unit of work (:func:`fit_store`).

    ``path``: the store; ``features``: the columns to fit on (None: all); ``dtype``: the values' type
    ("float32": half the memory, :meth:`SparseStore.csr`); ``n_records``: a public count of the
    training records (the gradient learners); ``split_key``: the keyed split's key (the private
    search's own split); the rest are :func:`estimator`'s parameters.
    """

    path: str
    method: str
    epsilon: float
    delta: float
    lam: float
    max_iter: int
    features: list[int] | None = None
    bounds: str = "check"
    seed: int | None = None
    calibration: str = "safe"
    screening: dict[str, Any] | None = None
    dtype: str = "float64"
    n_records: int | None = None
    split_key: bytes | None = field(default=None, repr=False)  # a secret: not in Dask's log of a failed task


def fit_store(job: FitJob, show: bool = False) -> dict[str, Any]:
    """On a worker: run ``job``; with ``show``, its iterations go to the run's terminal display
    (:mod:`dpdist.pipelines.fit_progress`).

    Returns the released form of the model: the non-zero weights (indices in the store's
    columns) and the signed vertex path (a function of the private selections only). The
    fit's time goes to the worker's log, never into the release.
    """
    with charged_by_caller():  # a task of the flow's central release, which charged it first
        return _fit_store(job, reporter(f"train {job.method} at epsilon={job.epsilon:g}", show))


def _fit_store(job: FitJob, progress: Progress | None) -> dict[str, Any]:
    store = open_store(job.path)
    entry = get(job.method)
    if entry.family in ("gradient", "search"):
        return _fit_gradient(store, job, progress)
    X, X_csc = store.csr(job.dtype), None
    if job.features is not None:
        X = X[:, np.asarray(job.features, dtype=np.int64)]
    elif entry.defaults.get("method") in ("fast-dp-fw", "fast-fw"):  # the solvers that read columns (screening too)
        X_csc = _fit_copies(store, X, job.bounds, job.dtype)
    y = store_target(store)
    model = estimator(
        store.task,
        job.method,
        job.epsilon,
        job.delta,
        job.lam,
        job.max_iter,
        job.bounds,
        job.calibration,
        job.seed,
        job.screening,
    )
    t0 = time.perf_counter()
    shown = {"progress": progress} if entry.family == "frank-wolfe" else {}  # the iterative solvers report it
    if X_csc is None:
        model.fit(X, y, **shown)
    else:
        model.fit(X, y, X_csc=X_csc, **shown)
    timing("%s fit on %s: %.3f s", job.method, job.path, time.perf_counter() - t0)
    classes = [-1.0, 1.0] if store.task != "regression" else None  # store_target's public mapping
    if entry.family == "objective-perturbation":  # fitted on a released selection (the run config requires one)
        return {
            "indices": [int(j) for j in job.features or ()],
            "values": model.coef_.ravel().tolist(),
            "path": [],
            "n_features": int(store.shape[1]),
            "iterations": 0,
            "classes": classes,
        }
    w = model.coef_.ravel()  # (1, d) for a classifier
    nz = np.flatnonzero(w)
    out = {
        "indices": nz.tolist(),
        "values": w[nz].tolist(),
        "path": [int(v) for v in model.path_] if model.path_ is not None else [],
        "n_features": int(X.shape[1]),
        "iterations": int(job.max_iter),
        "classes": classes,
    }
    if entry.kind == "screening":
        out["screened"] = [[int(t), int(j)] for t, j in model.screened_ or []]
    if job.bounds == "clip":  # the per-record map the model was fitted under (``from_release`` applies it again)
        out["clip"] = 1.0
    return widen(out, job.features, int(store.shape[1]))  # back to store columns (signed 1-based vertices)


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


def gradient_learner(
    task: str, method: str, epsilon: float, delta: float, n_records: int | None, random_state: RandomState = None
) -> Any:
    """A gradient learner (or the private search over the default grid) for a store's task, with the
    store's public classes (``store_target``'s -1/+1) and a public count of its records."""
    if n_records is None:
        raise ParameterError(
            f"{method} needs a public count of the training records (train.n_records, or a synthetic source's n)"
        )
    entry = get(method)
    if entry.family not in ("gradient", "search"):
        raise ParameterError(f"{method} is not a gradient learner (one of {names(family=('gradient', 'search'))})")
    return entry.build(
        task, epsilon=epsilon, delta=delta, n_records=int(n_records), random_state=random_state, classes=STORE_CLASSES
    )


def _fit_gradient(store: Any, job: FitJob, progress: Progress | None = None) -> dict[str, Any]:
    """On a worker: the released model of a gradient learner (or the private search), in store columns.
    Runs inside the central release, after the charge (no accountant here). ``progress`` shows a
    learner's steps (not the search's: how many runs it made is secret, dpdist.tuning)."""
    method, features = job.method, job.features
    X, y = store.csr(), store_target(store)
    if features is not None:
        X = X[:, np.asarray(features, dtype=np.int64)]
    model = gradient_learner(store.task, method, job.epsilon, job.delta, job.n_records, job.seed)
    if get(method).family == "search":  # not timed: the search's duration tells how many runs it made (dpdist.tuning)
        model.fit(X, y, split_key=job.split_key)
        out = dict(model.release_record_)
        result = out["model"]
    else:
        t0 = time.perf_counter()
        model.fit(X, y, progress=progress)
        result = model.release_record_
        timing("%s fit on %s: %.3f s", method, store.path, time.perf_counter() - t0)
    result = {**widen(result, features, int(store.shape[1])), "path": [], "iterations": 0}  # in the store's columns
    if get(method).family == "search":
        return {
            **result,
            "search": {
                "candidate": out["candidate"],
                "validation_score": out["validation_score"],
                "learner": type(model.candidates[out["candidate"]]).__name__,
            },
        }
    return result
