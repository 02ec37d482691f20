"""DP-SIS at KDDA scale: 2e7 features on a 2-worker LocalCluster (issue 6 "Scale").

Writes (once, then reuses) a synthetic store with KDDA's shape per row -- 20,216,830
columns, ~36 non-zeros per row drawn from KDDA's power-law column profile, binary labels --
with ``--n`` rows, then measures in the same run:

* baseline: single-process scipy ``X.T @ y`` on the whole matrix already in memory
  (the load from the store is timed separately and not counted);
* dpdist: ``pipelines.sis.correlation_scores`` on a 2-worker LocalCluster, which reads the
  zarr row blocks on the workers and tree-reduces sparse partials (timed end to end,
  reads included);
* the canonical top-k (k = 100) on the resulting 2e7 scores (target: under 10 s).

Throughput is non-zeros per second; the ratio is ours over the baseline's.

    .venv/bin/python benchmarks/sis_scale.py [--n 1000000] [--work benchmarks/_work]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=20_216_830)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--work", default="benchmarks/_work")
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    from dpdist.data.store import open_store
    from dpdist.data.synthetic import write_synthetic
    from dpdist.selection.sis import DPSIS, store_target
    from pipelines.sis import correlation_scores

    path = Path(args.work) / f"kdda-n{args.n}-d{args.d}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        t = time.perf_counter()
        write_synthetic("kdda", path, seed=0, n=args.n, d=args.d)
        print(f"wrote {path} in {time.perf_counter() - t:.0f} s")
    store = open_store(path)
    n, d = store.shape
    print(f"store: {n:,} x {d:,}, nnz {store.nnz:,} ({store.nnz / n:.1f} per row), row blocks of {store.block_rows:,}")

    t = time.perf_counter()
    X = store.csr()
    y = store_target(store)
    t_load = time.perf_counter() - t
    X.T @ y  # warm-up
    t = time.perf_counter()
    base = np.abs(X.T @ y)
    t_scipy = time.perf_counter() - t
    del X

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="8GiB") as cluster, \
            Client(cluster) as client:
        print(f"Dask dashboard: {client.dashboard_link}")
        correlation_scores(path)  # warm-up: imports and numba/zarr initialisation on the workers
        t = time.perf_counter()
        scores = correlation_scores(path)
        t_dask = time.perf_counter() - t
    np.testing.assert_allclose(scores, base, rtol=1e-9, atol=1e-9)

    DPSIS(3, 1.0).fit_scores(scores[:1000])  # compile the top-k kernels
    sis = DPSIS(args.k, args.epsilon)
    t = time.perf_counter()
    sis.fit_scores(scores)
    t_topk = time.perf_counter() - t

    nnz = store.nnz
    print(f"scipy X.T @ y, one process, in memory : {t_scipy:7.2f} s  {nnz / t_scipy / 1e6:8.1f} M nnz/s "
          f"(loading the matrix took {t_load:.1f} s more)")
    print(f"dpdist Dask reduction, 2 workers      : {t_dask:7.2f} s  {nnz / t_dask / 1e6:8.1f} M nnz/s "
          f"(reads included)  ratio {t_scipy / t_dask:.2f}x")
    print(f"canonical top-k, d={d:,}, k={args.k}   : {t_topk:7.2f} s  target under 10 s -> "
          f"{'met' if t_topk < 10 else 'NOT met'}")
    print(f"scores identical to scipy's: yes; {os.cpu_count()} cores on this machine")


if __name__ == "__main__":
    main()
