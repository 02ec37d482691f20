"""Fast DP-FW's cost per iteration on a full-shape train store (issue 16), and [RKL23] Table 3 there.

Runs the kernel of ``dpdist run``'s train stage ([RKL23] Alg. 2 + 4, the run config's epsilon,
delta, lam and T, so the same eps0 and sampler scale) for the first ``--steps`` iterations on
a store (default: the train half of ``deploy/full-size/<profile>.toml``'s last run, KDDA by default), with the CSC
copy read from the store as ``dpdist.pipelines.train.fit_store`` does, and no refresh in those steps
(the run refreshes every ceil(T / 10) = 400). Prints the seconds per iteration (the kernel's own
timer, kernels loaded before it), the share of the rows the chosen columns hold (each step of
Alg. 2 costs O(rows of column j x row length): a column in most rows makes a step a full pass over
the data), the extrapolation to T iterations, the peak RSS and the load. The figures are the
operator's (a private fit's pace is never released).

For each ``--epsilons`` value it also times ([RKL23] Table 3 at this shape) ``--alg1-iters``
iterations of standard DP-FW (Alg. 1, ``frank_wolfe`` with Laplace report-noisy-max: two sparse
products over all rows and 2D noise draws per iteration, whatever epsilon) and prints the
speed-up of fast DP-FW over it (over the fast run's steps with its setup, as [RKL23] Table 3 compares
whole runs, and at the fast run's steady pace); ``--by-rows`` also runs the fast steps with every
update in [RKL23]'s row order (``_HEAVY_SHARE = inf``) to show what the column-order update
(``dpdist.solvers.fast_fw.move._move``) changes (the same path to the bit, checked).

``--calibration paper`` runs both solvers in [RKL23]'s own calibration, the one its Table 3 was
measured in: eps0 = epsilon / sqrt(8 T ln(1/delta)) per step (advanced composition), a fifth of
the tight calibration's that ``dpdist run`` uses (``safe``, the default; the plan's eps0 and its
true epsilon are printed: at T = 4,000, delta = 1e-7 the paper's "epsilon = 1" is 0.205 for Alg. 2 + 4's
exponential mechanism; Alg. 1's Laplace report-noisy-max at the paper's scale L / eps0 spends 0.870). More
noise per step spreads the exponential mechanism's choice over more (and sparser) columns, so the
fast solver's step gets cheaper while Alg. 1's does not change. ``--calibration printed`` tests
a reading of the paper's text: its Alg. 2 line 5 scale, L N epsilon / (2 lambda sqrt(8 T ln(1/delta))),
multiplies |alpha_j| in its line 13. On the mean gradient alpha_j / N (docs/algorithms.md §9.8: the noise
assumes the mean) that is eps0 |alpha_j| L / (2 lambda): the paper calibration's exponent
eps0 |alpha_j| / (2 L) divided by lambda / L^2 (50 here), i.e. 50 times its noise (run as
``lipschitz_noise = lambda / L``; the plan's true epsilon, far below the nominal one, is printed).
On the sum-gradient as printed the exponent would be N times that, a noiseless argmax whose choice
could not depend on epsilon as Table 3's URL row does. Which scale the paper's runs used is not known.

The claim (with ``--alg1-iters``): fast DP-FW's speed-up over Alg. 1, whole runs, reaches [RKL23]
Table 3's at every epsilon the table lists; met or not met is computed from the run. Writes
``benchmarks/results/fw/<UTC date>-full_shape_steps-<profile>.md`` and ``.csv`` (``-<calibration>``
added outside the safe one; ``--out`` another directory).

    .venv/bin/python benchmarks/fw_full_shape_steps.py [kdda|url|webspam] [--store PATH] [--steps 10] [--epsilons 1 0.1]
        [--alg1-iters 3] [--by-rows] [--calibration safe|paper|printed] [--out benchmarks/results/fw]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import numpy as np

import dpdist.solvers.fast_fw.solver as ffw
import dpdist.solvers.frank_wolfe as fw
from dpdist.data.store import open_store
from dpdist.selection.sis import store_target
from dpdist.solvers.frank_wolfe import FWPrivacy, FWResult, frank_wolfe, lipschitz, privacy_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fw_heavy_steps import steps_at_share  # noqa: E402
from results_file import header, table, today, topic_dir, write_md  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAPER = {
    "kdda": {1.0: 1239.64, 0.1: 2245.56},
    "url": {1.0: 9.99, 0.1: 2451.80},
    "webspam": {1.0: 581.25, 0.1: 537.65},
}  # [RKL23] Table 3: Alg. 2 + 4 over Alg. 1


def _paper(profile: str, eps: float) -> str:
    got = PAPER[profile].get(eps)
    return "not in the table" if got is None else f"{got:,.2f}x"


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
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
        help="safe: the run's (tight) calibration; paper: [RKL23]'s; printed: [RKL23]'s scale as printed, "
        "on the mean gradient (true epsilon printed)",
    )
    ap.add_argument("--out", type=Path, default=None, help="where the results file goes (default results/fw)")
    return ap.parse_args()


def main() -> None:
    args = _args()
    cfg = tomllib.loads((ROOT / "deploy" / "full-size" / f"{args.profile}.toml").read_text())
    default_store = ROOT / cfg["output"] / "stores" / "train"
    args.full = args.store is None or args.store.resolve() == default_store.resolve()
    args.store = args.store or default_store
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
    where = args.store.relative_to(ROOT) if args.store.is_relative_to(ROOT) else args.store
    print(
        f"\n### fast DP-FW per iteration on {where} ({X.shape[0]:,} x {X.shape[1]:,}, {X.nnz:,} non-zeros), "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
    )
    print(f"- read CSR + CSC from the store ({dtype} values): {read:.1f} s")
    # the solvers' calibration, and the L their noise is scaled with (printed: lambda / L, module doc)
    calib: dict = {"calibration": "paper" if args.calibration == "printed" else args.calibration}
    if args.calibration == "printed":
        calib["lipschitz_noise"] = lam / lipschitz("logistic", lam)
    setting = (T, delta, lam, calib)
    rows = [_fast(args, X, Xc, y, e, setting) for e in args.epsilons or [eps]]
    del Xc  # Alg. 1 makes its own CSC copy: the store's is dropped first (Webspam's train half: 8 GB each)
    for row in rows if args.alg1_iters else ():
        _alg1(args, X, y, row, setting)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(
        f"- peak RSS of this process {peak:.2f} GiB; load 1-min {load0:.2f} before / {os.getloadavg()[0]:.2f} after "
        f"({os.cpu_count()} cores)"
    )
    write_results(args, (str(where), X.shape, X.nnz, dtype, read), setting, rows, peak, load0)


def _recorder(marks: list[tuple[float, int]]) -> Callable[[int, int], None]:
    """A solver's ``progress`` callback that records (time, iterations done) in ``marks``."""

    def record(done: int, _total: int) -> None:
        marks.append((time.perf_counter(), done))

    return record


def _plan(res: FWResult) -> FWPrivacy:
    """A private fit's privacy plan (every fit here is private: it has one)."""
    if res.privacy is None:
        raise SystemExit("a private fit returned no privacy plan")
    return res.privacy


def _fast(args: argparse.Namespace, X, Xc, y, eps: float, setting: tuple) -> dict:
    """``--steps`` fast DP-FW iterations at ``eps`` (and, with ``--by-rows``, all in row order): printed,
    and returned as one row of the results file."""
    T, delta, lam, calib = setting
    runs: dict[str, FWResult] = {}
    marks: dict[str, list[tuple[float, int]]] = {}
    for name, share in [("by columns where heavy", ffw._HEAVY_SHARE)] + ([("by rows", np.inf)] if args.by_rows else []):
        marks[name] = []  # (time, iterations done), every 0.25 s
        runs[name] = steps_at_share(
            share, X, Xc, y, (lam, args.steps, eps, delta), **calib, progress=_recorder(marks[name])
        )
    res = runs["by columns where heavy"]
    plan = _plan(res)
    counts = np.diff(Xc.indptr)
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
    step = plan.eps0 * lipschitz("logistic", lam) / plan.lipschitz  # eps0 L / Ln: each step's epsilon
    print(
        f"- epsilon {eps} (the T = {T} run's plan, {args.calibration} calibration: eps0 = {plan.eps0:.3g}, "
        f"each step {step:.3g}-DP, true epsilon {plan.true_epsilon:.4g}), delta {delta}, "
        f"lam {lam}: first {args.steps} iterations (no refresh) {res.seconds:.1f} s, {per:.3f} s per iteration "
        f"with the setup; **{steady:.4f} s per iteration** {pace}; "
        f"the chosen columns hold {share:.1%} of the rows on average ({held:,.1f} rows); "
        f"at this pace T = {T} takes "
        f"~{steady * T / 60:.1f} min (plus the setup and {T // max(1, -(-T // 10))} full refreshes)"
    )
    row = {
        "eps": eps,
        "eps0": plan.eps0,
        "true": plan.true_epsilon,
        "seconds": res.seconds,
        "per": per,
        "steady": steady,
        "resolved": d2 > d1,
        "held": held,
        "share": share,
    }
    if "by rows" in runs:
        by_rows = runs["by rows"]
        row["rows_per"] = by_rows.seconds / args.steps
        row["same"] = by_rows.path == res.path and np.array_equal(by_rows.coef, res.coef)
        print(
            f"  - every update in row order ([RKL23] Alg. 2 as printed): {row['rows_per']:.3f} s per "
            f"iteration, {by_rows.seconds / res.seconds:.2f}x the time; same path and weights: {row['same']}"
        )
    return row


def _alg1(args: argparse.Namespace, X, y, row: dict, setting: tuple) -> None:
    """``--alg1-iters`` iterations of standard DP-FW at ``row``'s epsilon: printed, and added to ``row``."""
    _T, delta, lam, calib = setting
    eps, steady, per = row["eps"], row["steady"], row["per"]
    std = frank_wolfe(
        X, y, lam, args.alg1_iters, selection="laplace", epsilon=eps, delta=delta, random_state=0, **calib
    )
    per1 = std.seconds / args.alg1_iters
    row.update(alg1_per=per1, alg1_true=_plan(std).true_epsilon, speedup=per1 / per, speedup_steady=per1 / steady)
    # [RKL23] Table 3 compares whole runs: the fast solver's time with its setup (the first gradient
    # over every entry) against Alg. 1's at its pace (its clock starts after its CSC copy)
    print(
        f"- epsilon {eps}: standard DP-FW (Alg. 1, Laplace report-noisy-max; true epsilon "
        f"{_plan(std).true_epsilon:.4g}), {args.alg1_iters} iterations: {per1:.2f} s per iteration (the first "
        f"included); speed-up of fast DP-FW (Alg. 2 + 4) over the {args.steps} steps with its setup "
        f"**{per1 / per:.1f}x**, at its steady pace {per1 / steady:.1f}x "
        f"([RKL23] Table 3, {args.profile}: {_paper(args.profile, eps)})"
    )


def _verdict(args: argparse.Namespace, rows: list[dict]) -> str:
    """Met when the whole-run speed-up reaches [RKL23] Table 3's at every epsilon it lists."""
    if not args.alg1_iters:
        return "not tested (no Alg. 1 iterations: --alg1-iters 0)"
    tested = [(r["eps"], r["speedup"], PAPER[args.profile][r["eps"]]) for r in rows if r["eps"] in PAPER[args.profile]]
    if not tested:
        return f"not tested (no epsilon of [RKL23] Table 3's {args.profile} row was run)"
    parts = [f"epsilon {e}: {got:,.1f}x against {want:,.2f}x" for e, got, want in tested]
    ok = all(got >= want for _, got, want in tested)
    return "; ".join(parts) + f"; **{'met' if ok else 'not met'}**"


def write_results(args, data: tuple, setting: tuple, rows: list[dict], peak: float, load0: float) -> None:
    """The dated results file: each epsilon's pace and speed-up over Alg. 1 against [RKL23] Table 3."""
    where, shape, nnz, dtype, read = data
    T, delta, lam, _calib = setting
    md = header(
        f"Fast DP-FW at {args.profile}'s shape: pace per iteration and [RKL23] Table 3",
        f"1 run of {args.steps} fast DP-FW iterations per epsilon"
        + (f"; {args.alg1_iters} Alg. 1 iterations per epsilon" if args.alg1_iters else "; Alg. 1 not run"),
        load0,
    )
    whole = args.steps >= T
    md += [
        "Claim: fast DP-FW ([RKL23] Alg. 2 + 4, exponential mechanism) over standard DP-FW (Alg. 1, Laplace "
        "report-noisy-max), whole runs (the fast solver's time with its setup against Alg. 1's at its pace), "
        f"reaches [RKL23] Table 3's speed-up on {args.profile} at every epsilon the table lists. Store `{where}` "
        f"({shape[0]:,} x {shape[1]:,}, {nnz:,} non-zeros, {dtype} values, read in {read:.1f} s); "
        f"`deploy/full-size/{args.profile}.toml`'s delta {delta}, lam {lam} and the T = {T} privacy plan, "
        f"{args.calibration} calibration, no refresh; peak RSS {peak:.2f} GiB.",
        "",
    ]
    if not args.full or not whole:
        md += [
            "Reduced: "
            + ("a store other than the profile's full-size train half" if not args.full else "")
            + (" and " if not args.full and not whole else "")
            + (f"the first {args.steps} of the T = {T} iterations" if not whole else "")
            + "; the speed-up does not test the claim at its shape.",
            "",
        ]
    stem = (args.out or topic_dir("fw")) / (
        f"{today()}-full_shape_steps-{args.profile}" + ("" if args.calibration == "safe" else f"-{args.calibration}")
    )
    stem.parent.mkdir(parents=True, exist_ok=True)
    columns = ["epsilon", "eps0", "true epsilon", "s per iteration with setup", "steady s per iteration"]
    columns += ["chosen columns' share of rows", "Alg. 1 s per iteration", "Alg. 1 true epsilon"]
    columns += ["speed-up, whole run", "speed-up, steady"]
    columns += ["[RKL23] Table 3", "row order s per iteration", "row order: same path and weights"]
    cells = [
        [
            r["eps"],
            f"{r['eps0']:.3g}",
            f"{r['true']:.4g}",
            f"{r['per']:.4g}",
            f"{r['steady']:.4g}" if r["resolved"] else f"{r['steady']:.4g} (not resolved)",
            f"{r['share']:.1%} ({r['held']:,.1f} rows)",
            f"{r['alg1_per']:.4g}" if "alg1_per" in r else "not run",
            f"{r['alg1_true']:.4g}" if "alg1_per" in r else "not run",
            f"{r['speedup']:.1f}x" if "speedup" in r else "not run",
            f"{r['speedup_steady']:.1f}x" if "speedup" in r else "not run",
            _paper(args.profile, r["eps"]),
            f"{r['rows_per']:.4g}" if "rows_per" in r else "not run",
            ("yes" if r["same"] else "no") if "same" in r else "not run",
        ]
        for r in rows
    ]
    md += table(columns, cells, stem.with_suffix(".csv"))
    md += ["", f"Target ([RKL23] Table 3's speed-up, whole runs): {_verdict(args, rows)}."]
    if args.by_rows:
        same = all(r["same"] for r in rows)
        md += ["", f"Row order takes the same path and weights to the bit: **{'met' if same else 'not met'}**."]
    write_md(stem.with_suffix(".md"), md)


if __name__ == "__main__":
    main()
