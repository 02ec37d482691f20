"""Speed of DP best subset selection (seed 002) on this machine, beside brute force and a peer.

For least squares on the seed's data (n = 4000, SNR 5, rho 0.1, b_x = b_y = 0.5, r = 1.1,
ridge 120), p in {100, 1000, 10000} and s in {5, 10}:

* ``S* certified``: IHT + one-swap local search + the SCIP certificate that no support with
  two or more mistakes is below F(C)(1 - 1e-4) (so C is optimal to relative gap 1e-4);
* ``top-R release``: ``BSSTopRSelector.fit`` end to end (validation, IHT, swaps, certificate,
  sampling);
* ``mistakes release``: the whole work of a mistakes release that passes its test: centre
  certificate and every bucket (``center_and_gap`` + ``mistakes_buckets``), then a draw;
* ``brute force``: all C(p, s) supports with the batched exact solve (run when C(p, s) <= 2e6,
  otherwise extrapolated from 1e6 random supports, and marked so; the per-support cost does
  not depend on p, so the sample is drawn among 2,000 columns and the Gram of X is formed for
  those only -- the O(n p^2) Gram of a real enumeration is left out of the extrapolation);
* ``abess``: the non-private best-subset peer (abess, PyPI; GPL, benchmark only): time and
  whether its support equals our S*.

Every measurement of a case (S*, top-R, mistakes, brute force, abess; each RCV1-width fit)
runs in a forked child process with a wall-clock limit (``--limit`` seconds, also passed to
the MIPs as their time limit). A measurement that reaches the limit is stopped and reported
as "> limit (stopped)", so the script always completes.

Then top-R at RCV1 width: the RCV1-shaped sparse set (20,242 x 47,236, labels -1/+1,
b_x = b_y = 1) -- in process and through ``dpdist.pipelines.best_subset`` on a 2-worker LocalCluster.

``--solver-probe`` measures the solver choice: SCIP with one tree and lazy cuts against
HiGHS (scipy.optimize.milp) re-solving the master after every cut (the seed code's loop), on
the >= 2-mistake optimum (p = 100) and the top-R certificate (p = 1000, 10000).

    .venv/bin/python benchmarks/bss_speed.py [--quick] [--limit 300] [--only table|rcv1] [--solver-probe]
        [--out results/bss]      # writes speed.md (speed-table.md / speed-rcv1.md for one part)
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpdist.data.synthetic import make_synthetic
from dpdist.selection.best_subset import BSSTopRSelector
from dpdist.selection.best_subset.brute_force import all_supports
from dpdist.selection.best_subset.executor import LocalExecutor
from dpdist.selection.best_subset.iht import iht, local_search
from dpdist.selection.best_subset.least_squares import ls_certify
from dpdist.selection.best_subset.mistakes import center_and_gap, mistakes_buckets
from dpdist.selection.best_subset.oa import MasterJob, master_unit, oracle_for, solve_master
from dpdist.selection.best_subset.objective import make_problem
from dpdist.selection.best_subset.samplers import mistakes_sample

os.environ.setdefault("DPDIST_UNACCOUNTED", "1")  # experiments on synthetic or public data: no ledger

TOL = 1e-3


def bss_data(n: int, p: int, s: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    X, y = make_synthetic("bss", seed, n=n, d=p, s=min(s, p // 2)).materialize()
    return X.toarray(), y


def timed(fn, *a, **k) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*a, **k)
    return out, time.perf_counter() - t0


def limited(limit: float, fn, *a, **k) -> tuple[Any, float | None]:
    """(fn(*a, **k), its own seconds) run in a forked child; (None, None) when it passed ``limit`` s.

    ``fn`` returns (result, seconds); the child is stopped at the wall-clock limit.
    """
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child() -> None:
        # stopped at the limit: unwind (closes a LocalCluster's workers) instead of dying
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        try:
            send.send(("ok", fn(*a, **k)))
        except BaseException as e:  # noqa: BLE001 -- reported in the table
            send.send(("error", f"{type(e).__name__}: {e}"))

    proc = ctx.Process(target=child)  # not daemonic: a LocalCluster inside starts worker processes
    proc.start()
    send.close()
    got = recv.poll(limit)
    if not got:
        proc.terminate()
        proc.join(60)
        if proc.is_alive():
            proc.kill()
            proc.join()
        return None, None
    kind, value = recv.recv()
    proc.join()
    if kind == "error":
        return (value, "error"), None
    return value


def fmt_limited(out: tuple[Any, float | None], limit: float, fmt=lambda r: "") -> str:
    res, secs = out
    if res is None and secs is None:
        return f"> {limit:.0f} s (stopped at the limit)"
    if secs is None:
        return f"failed ({res[0]})"
    note = fmt(res)
    shown = f"{secs:.2f} s" if secs < 1e6 else f"{secs:.2e} s"
    return shown + (f" ({note})" if note else "")


def certified_optimum(X, y, s: int, limit: float, rel_gap: float = 1e-4) -> tuple[tuple[tuple[int, ...], str], float]:
    """((S*, certificate status), seconds): IHT, one-swap search, the >= 2-mistake certificate."""
    t0 = time.perf_counter()
    P = make_problem(X, y, s, bounds="clip")
    ex = LocalExecutor(P)
    inner = TOL * P.delta / 10
    center, f0, _ = local_search(ex, iht(P), inner)
    res = master_unit(
        P, MasterJob((center,), inner, center=center, max_common=P.s - 2, objlimit=f0 * (1 - rel_gap), time_limit=limit)
    )
    return (center, res.status), time.perf_counter() - t0


def top_r_release(X, y, s: int, limit: float) -> tuple[dict, float]:
    t0 = time.perf_counter()
    sel = BSSTopRSelector(s=s, epsilon=1.0, bounds="clip", nonprivate_time_limit=limit, random_state=0).fit(X, y)
    return dict(sel.top_r_.stats), time.perf_counter() - t0


def mistakes_release(X, y, s: int, limit: float) -> tuple[str, float]:
    """The work of a mistakes release that passes its test: centre, gap, every bucket, a draw."""
    t0 = time.perf_counter()
    P = make_problem(X, y, s, bounds="clip")
    ex = LocalExecutor(P)
    tau = TOL * P.delta
    c, f0, f1, _, best = center_and_gap(ex, tau, limit)
    buckets = mistakes_buckets(ex, c, f0, f1, tau, 0.5 / (P.delta * (1 + 4 * TOL)), 10.0, limit, best)
    mistakes_sample(c, buckets.values, P.p, 0.5 / P.delta, np.random.default_rng(0))
    return "buckets: " + ", ".join(buckets.stats["kinds"]), time.perf_counter() - t0


def brute_force_seconds(X, y, s: int) -> tuple[bool, float]:
    """(extrapolated?, seconds to evaluate all C(p, s) supports), measured or extrapolated from 1e6."""
    total = math.comb(X.shape[1], s)
    exact = total <= 2_000_000
    # the per-support cost does not depend on p: past enumeration, sample among (at most) 2,000 columns
    P = make_problem(X if exact else X[:, :2000], y, s, bounds="clip")
    gram = P.gram_columns(np.arange(P.p))
    if exact:
        supports, reps = all_supports(P.p, P.s), 1
    else:
        rng = np.random.default_rng(0)
        supports, reps = np.sort(np.argsort(rng.random((100_000, P.p)), axis=1)[:, :s], axis=1), 10
    t0 = time.perf_counter()
    for _ in range(reps):
        for start in range(0, len(supports), 100_000):
            S = supports[start : start + 100_000]
            ls_certify(gram[S[:, :, None], S[:, None, :]], P.Xty[S], P.yty, P.ridge, P.r, TOL * P.delta / 10.0)
    seconds = time.perf_counter() - t0
    return (False, seconds) if exact else (True, seconds * total / (reps * len(supports)))


def abess_peer(X: np.ndarray, y: np.ndarray, s: int) -> tuple[tuple[int, ...] | None, float]:
    """abess on the clipped data (as make_problem clips it), support size s: (support, seconds)."""
    from abess.linear import LinearRegression

    Xc, yc = np.clip(X, -0.5, 0.5), np.clip(y, -0.5, 0.5)
    t0 = time.perf_counter()
    model = LinearRegression(support_size=s)
    model.fit(Xc, yc)
    return tuple(int(j) for j in np.flatnonzero(model.coef_)), time.perf_counter() - t0


def speed_table(ps: list[int], ss: list[int], n: int, limit: float) -> list[str]:
    try:
        import abess  # noqa: F401

        have_abess = True
    except ImportError:
        have_abess = False
        print("abess is not installed (pip install -e '.[bench]'): no peer column", file=sys.stderr)
    lines = [
        "| p | s | S* certified (gap 1e-4) | top-R release | mistakes release (all buckets) | brute force | "
        "abess (non-private) | abess = our S* |",
        "| --- |" * 1 + " --- |" * 7,
    ]
    for p in ps:
        for s in ss:
            if s >= p // 2:
                continue
            X, y = bss_data(n, p, s)
            opt = limited(limit, certified_optimum, X, y, s, limit)
            top = limited(limit, top_r_release, X, y, s, limit)
            mis = limited(limit, mistakes_release, X, y, s, limit)
            bf = limited(limit, brute_force_seconds, X, y, s)
            peer = limited(limit, abess_peer, X, y, s) if have_abess else (("not installed",), None)
            center = opt[0][0] if opt[1] is not None else None
            peer_same = "" if peer[1] is None or center is None else ("yes" if peer[0] == center else "no")
            lines.append(
                f"| {p:,} | {s} | {fmt_limited(opt, limit, lambda r: 'certified' if r[1] == 'infeasible' else r[1])} | "
                f"{fmt_limited(top, limit, lambda r: str(r['extras']) + ' entries beyond the one-swaps')} | "
                f"{fmt_limited(mis, limit, lambda r: r)} | "
                f"{fmt_limited(bf, limit, lambda r: 'extrapolated' if r else '')} | "
                f"{fmt_limited(peer, limit)} | {peer_same} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


def _rcv1_local(X, y, kw: dict) -> tuple[dict, float]:
    t0 = time.perf_counter()
    sel = BSSTopRSelector(**kw).fit(X, y)
    return dict(sel.top_r_.stats), time.perf_counter() - t0


def _rcv1_dask(store: Path, kw: dict) -> tuple[None, float]:
    from distributed import Client, LocalCluster

    from dpdist.pipelines.best_subset import MIP_RESOURCE, select_store

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, resources={MIP_RESOURCE: 1, "solver": 1}, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        t0 = time.perf_counter()
        select_store(client, store, BSSTopRSelector(**kw))
        return None, time.perf_counter() - t0


def rcv1_width(quick: bool, limit: float) -> list[str]:
    from dpdist.data.store import write_store

    n = 5000 if quick else 20_242
    X, y = make_synthetic("rcv1", 0, n=n).materialize()
    lines = [
        "| set | s | in process | Dask (2 workers, mip resource; cluster start not timed) |",
        "| --- | --- | --- | --- |",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        write_store(Path(tmp) / "rcv1", X, y, task="regression")  # least squares on the -1/+1 labels
        for s in (5,) if quick else (5, 10):
            kw = dict(
                s=s,
                epsilon=1.0,
                ridge=120.0,
                x_bound=1.0,
                y_bound=1.0,
                bounds="clip",
                nonprivate_time_limit=limit,
                random_state=0,
            )
            # the MIP's own time limit first (a SolverAborted abort is reported), the wall clock as a backstop
            local = limited(limit + 120, _rcv1_local, X, y, kw)
            dask = limited(limit + 120, _rcv1_dask, Path(tmp) / "rcv1", kw)
            lines.append(
                f"| RCV1-shaped {n:,} x {X.shape[1]:,} (nnz {X.nnz:,}) | {s} | "
                f"{fmt_limited(local, limit, lambda r: str(r['extras']) + ' entries beyond the one-swaps')} | "
                f"{fmt_limited(dask, limit)} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


# ------------------------------------------------------------------------------ solver probe


def highs_oa(P, seeds, center=None, max_common=None, objlimit=None, gap=0.0, time_limit=300.0):
    """The seed code's loop on HiGHS: solve the master MILP, evaluate, add the cut, re-solve."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    oracle = oracle_for(P, TOL * P.delta / 10)
    p, s = P.p, P.s
    shift = oracle.evaluate(seeds[0])[0]
    rows, lbs = [], []

    def add(S):
        cut = oracle.cut(S)
        rows.append(np.r_[-cut.grad, 1.0])
        lbs.append(cut.bound - shift - float(cut.grad[list(cut.support)].sum()))

    for S in seeds:
        add(S)
    t0 = time.perf_counter()
    c = np.r_[np.zeros(p), 1.0]
    integrality = np.r_[np.ones(p), 0.0]
    base = [LinearConstraint(np.r_[np.ones(p), 0.0][None], s, s)]
    if center is not None:
        a = np.zeros(p + 1)
        a[list(center)] = 1.0
        base.append(LinearConstraint(a[None], -np.inf, max_common))
    ub = np.inf if objlimit is None else objlimit - shift
    while True:
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            return "timelimit", time.perf_counter() - t0, len(rows)
        cons = base + [LinearConstraint(np.array(rows), np.array(lbs), np.inf)]
        res = milp(
            c,
            constraints=cons,
            integrality=integrality,
            bounds=Bounds(np.r_[np.zeros(p), -shift], np.r_[np.ones(p), ub]),
            options={"time_limit": left, "mip_rel_gap": 0.0},
        )
        if res.status == 2 or res.x is None and res.status != 1:
            return "infeasible", time.perf_counter() - t0, len(rows)
        if res.x is None:
            return "timelimit", time.perf_counter() - t0, len(rows)
        z, eta = res.x[:p], res.x[p] + shift
        S = tuple(sorted(int(j) for j in np.argsort(-z)[:s]))
        if eta >= oracle.cut(S).bound - max(gap, 1e-9 * abs(shift)):
            return "optimal", time.perf_counter() - t0, len(rows)
        add(S)


def solver_probe(quick: bool) -> list[str]:
    lines = ["| task | SCIP, one tree + lazy cuts | HiGHS, re-solve after each cut |", "| --- | --- | --- |"]
    cases = [
        ("p = 100: optimum over >= 2 mistakes (gap tau/2)", 100, "opt"),
        ("p = 1,000: top-R certificate", 1000, "cert"),
    ]
    if not quick:
        cases.append(("p = 10,000: top-R certificate", 10_000, "cert"))
    for label, p, kind in cases:
        X, y = bss_data(4000, p, 5)
        P = make_problem(X, y, 5, bounds="clip")
        tau = TOL * P.delta
        center, f0, table = local_search(LocalExecutor(P), iht(P), tau / 10)
        kw = dict(center=center, max_common=3)
        if kind == "opt":
            kw["gap"] = tau / 2
        else:
            kw["objlimit"] = float(table[np.isfinite(table)].max()) - tau
        P1 = make_problem(X, y, 5, bounds="clip")
        res, t_scip = timed(solve_master, oracle_for(P1, tau / 10), [center], **kw)
        P2 = make_problem(X, y, 5, bounds="clip")
        status, t_highs, cuts = highs_oa(P2, [center], time_limit=120 if quick else 300, **kw)
        lines.append(
            f"| {label} | {t_scip:.2f} s ({res.status}, {res.cuts} cuts, {res.nodes} nodes) | "
            f"{t_highs:.2f} s ({status}, {cuts} cuts) |"
        )
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--solver-probe", action="store_true", help="only the SCIP vs HiGHS probe")
    ap.add_argument(
        "--limit",
        type=float,
        default=300.0,
        help="wall-clock seconds per measurement (and MIP time limit); stopped ones are reported",
    )
    ap.add_argument("--only", choices=["table", "rcv1"], default=None, help="run one part")
    ap.add_argument("--out", default="results/bss")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    md = [
        f"# BSS speed (this machine: {os.cpu_count()} cores, load average {load:.2f} at start)",
        "",
        f"Command: `{' '.join(['.venv/bin/python', *sys.argv])}`",
        "",
    ]
    if args.solver_probe:
        md += [
            "## Solver choice: SCIP single tree vs HiGHS re-solves (least squares, n = 4000, s = 5)",
            "",
            *solver_probe(args.quick),
            "",
        ]
        (out / "solver_probe.md").write_text("\n".join(md) + "\n")
        print("\n".join(md))
        return
    ps = [100, 1000] if args.quick else [100, 1000, 10_000]
    if args.only in (None, "table"):
        md += [
            "## Least squares, n = 4000 (seed data), one process",
            "",
            f"Each measurement runs in its own process, stopped at {args.limit:.0f} s (also the MIP time limit).",
            "",
            *speed_table(ps, [5, 10], 4000, args.limit),
            "",
            "Targets: top-R at p = 10,000, s = 5 released in < 30 s; a mistakes release at p = 1,000 in < 5 min.",
            "",
        ]
    if args.only in (None, "rcv1"):
        md += [
            "## Top-R at RCV1 width (sparse X, least squares on the -1/+1 labels)",
            "",
            *rcv1_width(args.quick, args.limit),
            "",
        ]
    md += [f"Load average at the end: {os.getloadavg()[0]:.2f}."]
    name = "speed.md" if args.only is None else f"speed-{args.only}.md"  # a part run keeps the other part's file
    (out / name).write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
