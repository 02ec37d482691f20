"""Full-batch DP-GD (and DP-IHT) as a Dask reduction over a store's row blocks.

The same steps as ``dpdist.solvers.dp_sgd.dp_sgd`` with q = 1 (``DPGDClassifier``) and
``dpdist.solvers.dp_iht.dp_iht`` (``DPIHTClassifier``), with the rows spread over the cluster:

1. Once: the store's row blocks are read by tasks pinned to the workers, a few groups per worker,
   each group's rows prepared as the estimator prepares them (each row normalised, a per-record
   map; targets mapped to -1/+1 or clipped) and held in its worker's memory for the whole fit.
2. Each step: the iterate w is sent to one worker once, as a task holding it (``_iterate``), and
   copied from there to the workers that need it; each group's
   task sums the clipped per-record gradients of its rows (the numba kernel
   ``clipped_gradient_sum``); the sums are added on the workers, two at a time; the central
   process -- the flow's release task, after the charge -- adds the Gaussian noise N(0, (z C)^2)
   to every coordinate (``gaussian_noise``, from its own generator) and takes the step.

Privacy is the estimator's (its ``privacy_charge``: T Gaussian mechanisms of l2-sensitivity C): the
clipped sum over all records is the same number however the rows are grouped, and the noise is
drawn once per step, centrally. Nothing of a group's sum leaves the cluster but through the noisy
step. Moving a d-vector to and from the workers is the price of each step on wide data
(``benchmarks/utility.py --dask-step`` measures it at KDDA's width).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import dask
import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import normalize

from dpdist.data.store import open_store
from dpdist.pipelines.placement import pinned, workers
from dpdist.selection.sis import store_target
from dpdist.solvers.dp_iht import hard_threshold
from dpdist.solvers.dp_sgd import SGDPlan, clipped_gradient_sum, csr_parts

__all__ = ["dp_gd_store", "fit_dask"]

GROUPS_PER_WORKER = 2


def _load_group(
    path: str, ranges: list[tuple[int, int]], row_norm: str | None, loss: str, y_bound: float
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """A group's rows as the kernel takes them, prepared as the estimator prepares them."""
    store = open_store(path)
    X = sp.vstack([store.read_rows(r0, r1) for r0, r1 in ranges], format="csr")
    y = np.concatenate([store_target(store, store.y[r0:r1]) for r0, r1 in ranges])
    if row_norm is not None:
        X = normalize(X, norm=row_norm)
    if loss == "squared":
        y = np.clip(y, -y_bound, y_bound)
    return csr_parts(X), np.ascontiguousarray(y, dtype=np.float64)


def _iterate(w: np.ndarray) -> np.ndarray:
    """The step's iterate on the cluster. A task rather than scattered data: the scheduler holds its
    input, so a worker lost with the only copy makes Dask run it again, where a broadcast scatter's
    replication went on asking the lost worker for ever (``Scheduler.replicate`` keeps the workers it
    started with) and the fit hung."""
    return w


def _group_sum(
    group: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    w: np.ndarray,
    b: float,
    hyper: tuple[int, float, float],
) -> tuple[np.ndarray, float]:
    """The clipped gradient sum of a group's rows at (w, b) (un-noised: it never leaves the cluster)."""
    parts, y = group
    out = np.zeros(w.size)
    gb = clipped_gradient_sum(parts, y, np.arange(y.size, dtype=np.int64), (w, np.array([b])), hyper, out)
    return out, gb


def _add(a: tuple[np.ndarray, float], b: tuple[np.ndarray, float]) -> tuple[np.ndarray, float]:
    return a[0] + b[0], a[1] + b[1]


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
    store = open_store(path)
    d = store.shape[1]
    bounds = list(store.row_bounds())
    addrs = workers()
    n_groups = max(1, min(len(bounds), GROUPS_PER_WORKER * max(1, len(addrs))))
    groups = []
    for g in range(n_groups):
        with pinned(g, addrs):
            groups.append(
                client.submit(
                    _load_group,
                    str(path),
                    bounds[g::n_groups],
                    row_norm,
                    plan.loss,
                    y_bound,
                    pure=False,
                    key=f"dp-gd-rows-{g}-{os.urandom(4).hex()}",
                )
            )
    w, b = np.zeros(d), 0.0
    w_sum, b_sum, n_avg = np.zeros(d), 0.0, 0
    first_avg = min(plan.steps - 1, int(plan.average_from * plan.steps))
    for t in range(plan.steps):
        tag = os.urandom(3).hex()  # task names the dashboard shows: the step and the group
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": f"{w.nbytes + (1 << 20)}B"}):
            w_f = client.submit(_iterate, w, pure=False, key=f"dp-gd-step{t}-iterate-{tag}")  # the step's data
        sums = [
            client.submit(_group_sum, grp, w_f, b, plan.hyper, pure=False, key=f"dp-gd-step{t}-group{g}-{tag}")
            for g, grp in enumerate(groups)
        ]
        while len(sums) > 1:  # added on the workers, two at a time
            sums = [
                client.submit(_add, sums[i], sums[i + 1], pure=False, key=f"dp-gd-step{t}-add-{i}-{len(sums)}-{tag}")
                if i + 1 < len(sums)
                else sums[i]
                for i in range(0, len(sums), 2)
            ]
        g, gb = sums[0].result()
        gb = plan.noisy_gradient(rng, g, gb, w)
        w = w - plan.lr * g
        b -= plan.lr * gb / plan.normaliser
        if s is not None:
            hard_threshold(w, s)
        if t >= first_avg:
            w_sum += w
            b_sum += b
            n_avg += 1
        if progress is not None:
            progress(t + 1, plan.steps)
    del groups  # the rows held on the workers are released with their futures
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
