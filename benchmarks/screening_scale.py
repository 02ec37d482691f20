"""RNM-Screen at KDDA scale: time per iteration and peak memory beside fast DP-FW.

Writes (once, then reuses) a synthetic store of ``--n`` rows with KDDA's shape per row (20,216,830
columns, ~36 non-zeros per row from KDDA's power-law column profile, binary labels), then runs in
separate processes (so each peak resident memory is its own):

* fast DP-FW (Alg. 2 + 4, logistic loss, lambda = 50, epsilon = 1, delta = 1e-6, refresh every T/10);
* the same with RNM-Screen every 50th iteration (screen_epsilon = 0.5, screen_delta = 1e-6, n_max = n):
  each pass is O(n + D) -- the solver's state plus one array of D column norms, computed once.

Each process loads the store (CSR rows + CSC columns), compiles the kernels on a small slice, and then
times ``--iters`` iterations; peak memory is the process's maximum resident set (load included).

    .venv/bin/python benchmarks/screening_scale.py [--n 1000000] [--iters 2000] [--work benchmarks/_work]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def child(path: str, iters: int, screen: bool) -> None:
    import numpy as np

    from dpdist.data.store import open_store
    from dpdist.selection.sis import store_target
    from dpdist.solvers.fast_fw import fast_frank_wolfe
    from dpdist.solvers.screening import screening_plan

    store = open_store(path)
    t = time.perf_counter()
    X = store.csr()
    y = (store_target(store) > 0).astype(np.float64)
    load = time.perf_counter() - t
    n, D = X.shape
    lam, refresh = 50.0, math.ceil(iters / 10)

    def plan(T: int, d: int):
        return screening_plan("rnm", "logistic", lam, d, T, 50, 0.5, 1e-6, n_max=n) if screen else None

    small = X[:2000]
    fast_frank_wolfe(
        small, y[:2000], lam, 60, selection="exponential", epsilon=1.0, delta=1e-6, refresh=20, screening=plan(60, D)
    )  # compile outside the timer
    res = fast_frank_wolfe(
        X,
        y,
        lam,
        iters,
        selection="exponential",
        epsilon=1.0,
        delta=1e-6,
        refresh=refresh,
        screening=plan(iters, D),
        random_state=1,
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(
        json.dumps(
            {
                "n": n,
                "D": D,
                "nnz": int(X.nnz),
                "load_s": load,
                "us_per_iter": 1e6 * res.seconds / iters,
                "peak_gib": peak,
                "zeroed": len(res.screened),
                "nnz_w": int(np.count_nonzero(res.coef)),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=20_216_830)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--work", default="benchmarks/_work")
    ap.add_argument("--child", default=None)
    ap.add_argument("--screen", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.iters, args.screen)
        return
    from dpdist.data.synthetic import write_synthetic

    path = Path(args.work) / f"kdda-n{args.n}-d{args.d}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        t = time.perf_counter()
        write_synthetic("kdda", path, seed=0, n=args.n, d=args.d)
        print(f"wrote {path} in {time.perf_counter() - t:.0f} s", flush=True)
    out = {}
    for screen in (False, True):
        cmd = [sys.executable, __file__, "--child", str(path), "--iters", str(args.iters)] + (
            ["--screen"] if screen else []
        )
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out[screen] = json.loads(r.stdout.strip().splitlines()[-1])
        print(
            ("RNM-Screen /50" if screen else "fast DP-FW    "),
            out[screen],
            f"load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    a, b = out[False], out[True]
    print(f"\n{a['n']:,} x {a['D']:,}, nnz {a['nnz']:,}; T = {args.iters}")
    print("| solver | us / iteration | peak memory (GiB) |\n|---|---|---|")
    print(f"| fast DP-FW | {a['us_per_iter']:.0f} | {a['peak_gib']:.2f} |")
    print(
        f"| RNM-Screen every 50th | {b['us_per_iter']:.0f} (x{b['us_per_iter'] / a['us_per_iter']:.2f}) | "
        f"{b['peak_gib']:.2f} (x{b['peak_gib'] / a['peak_gib']:.2f}) |"
    )


if __name__ == "__main__":
    main()
