"""Single-process solvers on dedicated Dask workers.

Fast DP Frank-Wolfe is one sequential numba loop: it gains nothing from being split, and two
of them on one worker would fight for its core. Such fits are submitted with the Dask worker
resource ``solver=1``: only workers started with ``--resources solver=1`` (every LocalCluster
worker dpdist starts, and the SLURM workers of ``deploy/jobqueue.yaml``) run them, one at a
time each. If a worker dies mid-fit, Dask runs the fit again on another such worker.

The fit returns the model it would release; it does not touch the ledger. The caller charges
the accountant first and records the returned model as the release (``flows.release``).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np

from dpdist.data.store import open_store
from dpdist.linear_model import DPFrankWolfeClassifier, DPFrankWolfeRegressor
from dpdist.selection.sis import store_target
from dpdist.solvers.objective_perturbation import ObjectivePerturbation
from dpdist.utils.random import RandomState

SOLVER_RESOURCE = "solver"
log = logging.getLogger("dpdist.pipelines.train")


def estimator(task: str, method: str, epsilon: float, delta: float, lam: float, max_iter: int,
              bounds: str = "check", calibration: str = "safe",
              random_state: RandomState = None) -> DPFrankWolfeClassifier | DPFrankWolfeRegressor | ObjectivePerturbation:
    """The estimator of ``method`` for a store's task (binary classification or regression)."""
    if method == "objective-perturbation":
        return ObjectivePerturbation("squared" if task == "regression" else "logistic", epsilon, 0.0,
                                     random_state=random_state)
    cls = DPFrankWolfeRegressor if task == "regression" else DPFrankWolfeClassifier
    return cls(epsilon=epsilon, delta=delta, lam=lam, max_iter=max_iter, method=method, calibration=calibration,
               bounds=bounds, random_state=random_state)


def fit_store(path: str, method: str, epsilon: float, delta: float, lam: float, max_iter: int,
              features: list[int] | None = None, bounds: str = "check", seed: int | None = None,
              calibration: str = "safe") -> dict[str, Any]:
    """On a worker: fit on the store at ``path`` (optionally on the columns ``features``).

    Returns the released form of the model: the non-zero weights (indices in the store's
    columns) and the signed vertex path (a function of the private selections only). The
    fit's time goes to the worker's log, never into the release.
    """
    store = open_store(path)
    X = store.csr()
    if features is not None:
        X = X[:, np.asarray(features, dtype=np.int64)]
    y = store_target(store)
    model = estimator(store.task, method, epsilon, delta, lam, max_iter, bounds, calibration, seed)
    t0 = time.perf_counter()
    model.fit(X, y)
    log.info("%s fit on %s: %.3f s", method, path, time.perf_counter() - t0)
    classes = [-1.0, 1.0] if store.task != "regression" else None  # store_target's public mapping
    if method == "objective-perturbation":
        return {"indices": [int(j) for j in features], "values": model.coef_.tolist(), "path": [],
                "n_features": int(store.shape[1]), "iterations": 0, "classes": classes}
    cols = np.asarray(features, dtype=np.int64) if features is not None else None
    nz = np.flatnonzero(model.coef_)
    path = [int(v) for v in model.path_] if model.path_ is not None else []
    if cols is not None:  # back to store columns: signed 1-based vertices
        nz_cols = cols[nz]
        path = [int(np.sign(v)) * (int(cols[abs(v) - 1]) + 1) for v in path]
    else:
        nz_cols = nz
    return {"indices": nz_cols.tolist(), "values": model.coef_[nz].tolist(), "path": path,
            "n_features": int(store.shape[1]), "iterations": int(max_iter), "classes": classes}


def fit_on_solver(client: Any, path: str, method: str, epsilon: float, delta: float, lam: float, max_iter: int,
                  features: list[int] | None = None, bounds: str = "check", seed: int | None = None,
                  calibration: str = "safe") -> dict[str, Any]:
    """Run :func:`fit_store` on a worker holding the ``solver`` resource and wait for it."""
    fut = client.submit(fit_store, str(path), method, epsilon, delta, lam, max_iter, features, bounds, seed,
                        calibration, resources={SOLVER_RESOURCE: 1}, pure=False,
                        key=f"fit-{method}-{os.urandom(6).hex()}")
    return fut.result()
