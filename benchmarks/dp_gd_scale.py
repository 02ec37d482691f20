"""Seconds per full-batch DP-GD step over Dask at KDDA's width, and one step's noise.

A KDDA-profile synthetic store (20,216,830 columns, ~36 non-zeros a row) of ``--n`` rows is fitted
by DP-GD over a local cluster of 2 worker processes (``dpdist.pipelines.dp_gd``): the rows are loaded on
the workers once, then each step broadcasts the iterate, sums the clipped gradients per group,
adds the sums on the workers and draws the noise centrally. Printed: the load, the median step,
and the noise alone (``gaussian_noise`` in threads vs one numpy call), beside an in-process step of
the same estimator on the same rows (``dpdist.solvers.dp_sgd``) as the baseline of the same run.

    .venv/bin/python benchmarks/dp_gd_scale.py [--n 400000] [--steps 6]

Appends a dated section to ``benchmarks/results/dp_gd_scale.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "dp_gd_scale.md")
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    from dpdist.data.store import open_store
    from dpdist.data.synthetic import write_synthetic
    from dpdist.gradient_models import DPGDClassifier
    from dpdist.pipelines.dp_gd import dp_gd_store
    from dpdist.selection.sis import store_target
    from dpdist.solvers.dp_sgd import dp_sgd, gaussian_noise

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=REPO / "benchmarks") as tmp:
        path = Path(tmp) / "kdda"
        write_synthetic("kdda", path, seed=1, n=args.n)
        store = open_store(path)
        d = store.shape[1]
        model = DPGDClassifier(epsilon=1.0, max_iter=100, n_records=args.n, classes=[-1.0, 1.0])
        z = model.privacy_charge(args.n).details["noise_multiplier"]
        plan = model.sgd_plan(args.n, z)
        one = type(plan)(**{**plan.__dict__, "steps": 1})
        times = {}
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit="10GiB"
            ) as cluster,
            Client(cluster) as client,
        ):
            t0 = time.perf_counter()
            dp_gd_store(client, path, one, np.random.default_rng(), "l2")
            times["load + 1 step"] = time.perf_counter() - t0
            steps = []
            t_prev = [time.perf_counter()]

            def tick(done: int, total: int) -> None:
                now = time.perf_counter()
                steps.append(now - t_prev[0])
                t_prev[0] = now

            many = type(plan)(**{**plan.__dict__, "steps": args.steps})
            t_prev[0] = time.perf_counter()
            dp_gd_store(client, path, many, np.random.default_rng(), "l2", progress=tick)
            times["step (median, Dask, rows loaded each fit)"] = float(np.median(steps[1:] or steps))
        X, y = model.map_records(store.csr(), store_target(store))
        dp_sgd(X, y, one, np.random.default_rng())  # numba kernel loaded outside the timer
        t0 = time.perf_counter()
        dp_sgd(X, y, type(plan)(**{**plan.__dict__, "steps": 3}), np.random.default_rng())
        times["step in one process (dp_sgd, q = 1)"] = (time.perf_counter() - t0) / 3
        g = np.zeros(d)
        rng = np.random.default_rng()
        gaussian_noise(rng, g, 1.0)
        t0 = time.perf_counter()
        for _ in range(3):
            gaussian_noise(rng, g, 1.0)
        times["noise of one step, threads"] = (time.perf_counter() - t0) / 3
        t0 = time.perf_counter()
        for _ in range(3):
            g += rng.standard_normal(d)
        times["noise of one step, one numpy call"] = (time.perf_counter() - t0) / 3
    lines = [
        f"### {args.n:,} x {d:,} (KDDA profile), {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`python benchmarks/dp_gd_scale.py --n {args.n} --steps {args.steps}`; {platform.machine()}, "
        f"{os.cpu_count()} CPUs; 1-minute load {load:.2f} before, {os.getloadavg()[0]:.2f} after; 2 local "
        "worker processes.",
        "",
        "| what | seconds |",
        "| --- | ---: |",
    ]
    lines += [f"| {k} | {v:.3f} |" for k, v in times.items()]
    text = "\n".join(lines) + "\n\n"
    print(text)
    if not args.out.exists():
        args.out.write_text(
            "# Full-batch DP-GD over Dask at KDDA's width (issue 40)\n\nWritten by "
            "`benchmarks/dp_gd_scale.py`; each section one invocation.\n\n"
        )
    with open(args.out, "a") as f:
        f.write(text)


if __name__ == "__main__":
    main()
