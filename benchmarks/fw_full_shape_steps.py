"""Fast DP-FW's cost per iteration on a full-shape train store (issue 16): why the KDDA train stage is slow.

Runs the kernel of ``dpdist run``'s train stage (seed 004 Alg. 2 + 4, the run config's epsilon,
delta, lam and T, so the same eps0 and sampler scale) for the first ``--steps`` iterations on
a store (default: the train half of ``deploy/full-size/kdda.toml``'s last run), with the CSC
copy read from the store as ``pipelines.train.fit_store`` does, and no refresh in those steps
(the run refreshes every ceil(T / 10) = 400). Prints the seconds per iteration (the kernel's own
timer, kernels loaded before it), the share of the rows the chosen columns hold (each step of
Alg. 2 costs O(rows of column j x row length): a column in most rows makes a step a full pass over
the data), the extrapolation to T iterations, the peak RSS and the load. The figures are the
operator's (a private fit's pace is never released).

    .venv/bin/python benchmarks/fw_full_shape_steps.py [--store PATH] [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import tomllib
from pathlib import Path

import numpy as np

from dpdist.data.store import open_store
from dpdist.selection.sis import store_target
import dpdist.solvers.fast_frank_wolfe as ffw
from dpdist.solvers.frank_wolfe import privacy_plan

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    cfg = tomllib.loads((ROOT / "deploy" / "full-size" / "kdda.toml").read_text())
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=ROOT / cfg["output"] / "stores" / "train")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    tr = cfg["train"]
    T, eps, delta, lam = int(tr["iters"]), float(tr["epsilon"][0]), float(tr["delta"]), float(tr["lam"])

    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    store = open_store(args.store)
    X, Xc = store.csr(), store.csc()
    y = (store_target(store) > 0).astype(np.float64)
    read = time.perf_counter() - t
    # the first steps of the T-iteration run: its privacy plan (eps0 shrinks with T), not that of `steps` iterations
    ffw.privacy_plan = lambda epsilon, delta, _steps, *rest: privacy_plan(epsilon, delta, T, *rest)
    res = ffw.fast_frank_wolfe(X, y, lam, args.steps, selection="exponential", epsilon=eps, delta=delta, refresh=0,
                               random_state=0, X_csc=Xc)
    counts = np.diff(Xc.indptr)
    share = np.mean([counts[abs(v) - 1] / X.shape[0] for v in res.path])
    per = res.seconds / args.steps
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"\n### fast DP-FW per iteration on {args.store.relative_to(ROOT) if args.store.is_relative_to(ROOT) else args.store}"
          f" ({X.shape[0]:,} x {X.shape[1]:,}, {X.nnz:,} non-zeros), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print(f"- read CSR + CSC from the store: {read:.1f} s; peak RSS of this process {peak:.2f} GiB")
    print(f"- the T = {T} run's privacy plan: eps0 = {res.privacy.eps0:.3g} per iteration")
    print(f"- first {args.steps} iterations (epsilon {eps}, delta {delta}, lam {lam}, no refresh): "
          f"{res.seconds:.1f} s, {per:.2f} s per iteration; the chosen columns hold {share:.1%} of the rows "
          "on average (each such step updates the gradient through every row of the column)")
    print(f"- at this pace T = {T} iterations take ~{per * T / 3600:.1f} h (extrapolated, plus {T // max(1, -(-T // 10))} "
          "full refreshes)")
    print(f"- load 1-min {load0:.2f} before / {os.getloadavg()[0]:.2f} after (2 cores, shared)")


if __name__ == "__main__":
    main()
