"""Fast DP-FW's cost per iteration on a full-shape train store (issue 16): why the KDDA train stage is slow.

Runs the kernel of ``dpdist run``'s train stage (seed 004 Alg. 2 + 4, the run config's epsilon,
delta, lam and T, so the same eps0 and sampler scale) for the first ``--steps`` iterations on
a store (default: the train half of ``deploy/full-size/<profile>.toml``'s last run, KDDA by default), with the CSC
copy read from the store as ``dpdist.pipelines.train.fit_store`` does, and no refresh in those steps
(the run refreshes every ceil(T / 10) = 400). Prints the seconds per iteration (the kernel's own
timer, kernels loaded before it), the share of the rows the chosen columns hold (each step of
Alg. 2 costs O(rows of column j x row length): a column in most rows makes a step a full pass over
the data), the extrapolation to T iterations, the peak RSS and the load. The figures are the
operator's (a private fit's pace is never released).

For each ``--epsilons`` value it also times (seed 004 Table 3 at this shape) ``--alg1-iters``
iterations of standard DP-FW (Alg. 1, ``frank_wolfe`` with Laplace report-noisy-max: two sparse
products over all rows and 2D noise draws per iteration, whatever epsilon) and prints the
speed-up of fast DP-FW over it (over the fast run's steps with its setup, as seed 004 Table 3 compares
whole runs, and at the fast run's steady pace); ``--by-rows`` also runs the fast steps with every
update in seed 004's row order (``_HEAVY_SHARE = inf``) to show what the column-order update
(``dpdist.solvers.fast_fw.move._move``) changes (the same path to the bit, checked).

``--calibration paper`` runs both solvers in seed 004's own calibration, the one its Table 3 was
measured in: eps0 = epsilon / sqrt(8 T ln(1/delta)) per step (advanced composition), a fifth of
the tight calibration's that ``dpdist run`` uses (``safe``, the default; the plan's eps0 and its
true epsilon are printed: at T = 4,000, delta = 1e-7 the seed's "epsilon = 1" is 0.205 for Alg. 2 + 4's
exponential mechanism; Alg. 1's Laplace report-noisy-max at the seed's scale L / eps0 spends 0.870). More
noise per step spreads the exponential mechanism's choice over more (and sparser) columns, so the
fast solver's step gets cheaper while Alg. 1's does not change. ``--calibration printed`` tests
a reading of the seed's text: its Alg. 2 line 5 scale, L N epsilon / (2 lambda sqrt(8 T ln(1/delta))),
multiplies |alpha_j| in its line 13. On the mean gradient alpha_j / N (the spec's §9.8: the noise
assumes the mean) that is eps0 |alpha_j| L / (2 lambda): the paper calibration's exponent
eps0 |alpha_j| / (2 L) divided by lambda / L^2 (50 here), i.e. 50 times its noise (run as
``lipschitz_noise = lambda / L``; the plan's true epsilon, far below the nominal one, is printed).
On the sum-gradient as printed the exponent would be N times that, a noiseless argmax whose choice
could not depend on epsilon as Table 3's URL row does. Which scale the seed's runs used is not known.

    .venv/bin/python benchmarks/fw_full_shape_steps.py [kdda|url|webspam] [--store PATH] [--steps 10] [--epsilons 1 0.1]
        [--alg1-iters 3] [--by-rows] [--calibration safe|paper|printed]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
import tomllib
from pathlib import Path

import numpy as np

import dpdist.solvers.fast_fw.solver as ffw
import dpdist.solvers.frank_wolfe as fw
from dpdist.data.store import open_store
from dpdist.selection.sis import store_target
from dpdist.solvers.frank_wolfe import frank_wolfe, lipschitz, privacy_plan

ROOT = Path(__file__).resolve().parent.parent
PAPER = {
    "kdda": {1.0: "1,239.64x", 0.1: "2,245.56x"},
    "url": {1.0: "9.99x", 0.1: "2,451.80x"},
    "webspam": {1.0: "581.25x", 0.1: "537.65x"},
}  # seed 004 Table 3: Alg. 2 + 4 over Alg. 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "profile",
        nargs="?",
        default="kdda",
        choices=sorted(PAPER),
        help="the deploy/full-size config whose train store, T, epsilon, delta and lam are used",
    )
    ap.add_argument("--store", type=Path, help="default: the train half of the config's last run")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--epsilons", type=float, nargs="+", default=None, help="default: the config's")
    ap.add_argument("--alg1-iters", type=int, default=0, help="Alg. 1 iterations timed per epsilon (0: none)")
    ap.add_argument("--by-rows", action="store_true", help="also time the fast steps all in row order")
    ap.add_argument(
        "--calibration",
        choices=["safe", "paper", "printed"],
        default="safe",
        help="safe: the run's (tight) calibration; paper: seed 004's; printed: seed 004's scale as printed, "
        "on the mean gradient (true epsilon printed)",
    )
    args = ap.parse_args()
    cfg = tomllib.loads((ROOT / "deploy" / "full-size" / f"{args.profile}.toml").read_text())
    args.store = args.store or ROOT / cfg["output"] / "stores" / "train"
    tr = cfg["train"]
    T, eps, delta, lam = int(tr["iters"]), float(tr["epsilon"][0]), float(tr["delta"]), float(tr["lam"])

    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    store = open_store(args.store)
    dtype = tr.get("dtype", "float64")  # as the run's fit reads the store (Webspam: float32)
    X, Xc = store.csr(dtype), store.csc(dtype)
    y = (store_target(store) > 0).astype(np.float64)
    read = time.perf_counter() - t
    # the first steps of the T-iteration run: its privacy plan (eps0 shrinks with T), not that of `steps`
    # iterations; Alg. 1's too
    ffw.privacy_plan = fw.privacy_plan = lambda epsilon, delta, _steps, *rest: privacy_plan(epsilon, delta, T, *rest)
    counts = np.diff(Xc.indptr)
    where = args.store.relative_to(ROOT) if args.store.is_relative_to(ROOT) else args.store
    print(
        f"\n### fast DP-FW per iteration on {where} ({X.shape[0]:,} x {X.shape[1]:,}, {X.nnz:,} non-zeros), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
    )
    print(f"- read CSR + CSC from the store ({dtype} values): {read:.1f} s")
    # the solvers' calibration, and the L their noise is scaled with (printed: lambda / L, module doc)
    calib = {"calibration": "paper" if args.calibration == "printed" else args.calibration}
    if args.calibration == "printed":
        calib["lipschitz_noise"] = lam / lipschitz("logistic", lam)
    paces = {}
    for eps in args.epsilons or [eps]:
        runs, marks = {}, {}
        for name, share in [("by columns where heavy", ffw._HEAVY_SHARE)] + (
            [("by rows", np.inf)] if args.by_rows else []
        ):
            old, ffw._HEAVY_SHARE = ffw._HEAVY_SHARE, share
            marks[name] = []  # (time, iterations done), every 0.25 s
            runs[name] = ffw.fast_frank_wolfe(
                X,
                y,
                lam,
                args.steps,
                selection="exponential",
                epsilon=eps,
                delta=delta,
                refresh=0,
                random_state=0,
                X_csc=Xc,
                **calib,
                progress=lambda d, _t, m=marks[name]: m.append((time.perf_counter(), d)),
            )
            ffw._HEAVY_SHARE = old
        res = runs["by columns where heavy"]
        held = np.mean([counts[abs(v) - 1] for v in res.path])  # rows of the chosen columns, on average
        share = held / X.shape[0]
        per = res.seconds / args.steps
        # steady state: between the first report after iteration 1 (the first gradient, O(nnz), and the
        # kernel's O(n + D) allocations are behind) and the last report; each falls inside an
        # iteration, so their offsets cancel on average
        seen = [(t, d) for t, d in marks["by columns where heavy"] if 1 <= d < args.steps]
        (t1, d1), (t2, d2) = (seen[0], seen[-1]) if seen else ((0.0, 0), (0.0, 0))
        if d2 > d1:
            steady, pace = (t2 - t1) / (d2 - d1), f"in steady state (iterations {d1 + 1}-{d2})"
        else:  # fewer than two progress reports (every 0.25 s): the pace with the setup bounds it from above
            steady, pace = per, f"with the setup (steady state not resolved in {args.steps} iterations: more --steps)"
        step = res.privacy.eps0 * lipschitz("logistic", lam) / res.privacy.lipschitz  # eps0 L / Ln: each step's epsilon
        print(
            f"- epsilon {eps} (the T = {T} run's plan, {args.calibration} calibration: eps0 = {res.privacy.eps0:.3g}, "
            f"each step {step:.3g}-DP, true epsilon {res.privacy.true_epsilon:.4g}), delta {delta}, "
            f"lam {lam}: first {args.steps} iterations (no refresh) {res.seconds:.1f} s, {per:.3f} s per iteration "
            f"with the setup; **{steady:.4f} s per iteration** {pace}; "
            f"the chosen columns hold {share:.1%} of the rows on average ({held:,.1f} rows); "
            f"at this pace T = {T} takes "
            f"~{steady * T / 60:.1f} min (plus the setup and {T // max(1, -(-T // 10))} full refreshes)"
        )
        if "by rows" in runs:
            rows = runs["by rows"]
            same = rows.path == res.path and np.array_equal(rows.coef, res.coef)
            print(
                f"  - every update in row order (seed 004 Alg. 2 as printed): {rows.seconds / args.steps:.3f} s per "
                f"iteration, {rows.seconds / res.seconds:.2f}x the time; same path and weights: {same}"
            )
        paces[eps] = steady, per
    del Xc  # Alg. 1 makes its own CSC copy: the store's is dropped first (Webspam's train half: 8 GB each)
    for eps, (steady, per) in paces.items() if args.alg1_iters else ():
        std = frank_wolfe(
            X, y, lam, args.alg1_iters, selection="laplace", epsilon=eps, delta=delta, random_state=0, **calib
        )
        per1 = std.seconds / args.alg1_iters
        # seed 004 Table 3 compares whole runs: the fast solver's time with its setup (the first gradient
        # over every entry) against Alg. 1's at its pace (its clock starts after its CSC copy)
        print(
            f"- epsilon {eps}: standard DP-FW (Alg. 1, Laplace report-noisy-max; true epsilon "
            f"{std.privacy.true_epsilon:.4g}), {args.alg1_iters} iterations: {per1:.2f} s per iteration (the first "
            f"included); speed-up of fast DP-FW (Alg. 2 + 4) over the {args.steps} steps with its setup "
            f"**{per1 / per:.1f}x**, at its steady pace {per1 / steady:.1f}x "
            f"(seed 004 Table 3, {args.profile}: {PAPER[args.profile].get(eps, 'not in the table')})"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"- peak RSS of this process {peak:.2f} GiB; load 1-min {load0:.2f} before / {os.getloadavg()[0]:.2f} after "
        f"({os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
