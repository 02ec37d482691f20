"""Fast DP-FW's pace with and without the kernel's software prefetch (issue 16): this checkout against
another (``--compare DIR``, e.g. a worktree of the commit before), in the same invocation.

A step of seed 004 Alg. 2 scatters updates over the gradient (and the sampler weights) at the
columns of the moved rows: one random access each into arrays of D doubles (133 MB at Webspam's
16.6M columns), which wait one by one unless the loads are asked for ahead
(``dpdist.utils.prefetch``, used by ``dpdist.solvers.fast_fw.move._move`` and ``.weights._reweight``). This script
writes a set of a profile's shape with all its columns and a part of its rows (``--rows``;
``dpdist.data.synthetic``, kept under ``benchmarks/_work/fw-prefetch``), then in a fresh process
per checkout, alternating the order over ``--rounds``, runs ``--steps`` iterations of fast
DP-FW (Alg. 2 + 4, exponential sampler, the plan of a T = 4,000 run at ``--epsilon``, no refresh,
seed 0) and prints each one's steady pace (seconds per iteration from the progress reports after
the first iteration, as ``fw_full_shape_steps.py``) and the ratio. The same seed gives the same
path and weights, to the bit, in every checkout (a prefetch changes no result: checked). The fits
are private: their times are this operator's only.

``--row-pass N`` instead times the loop of a move's row pass alone (``_move``'s logistic update of
alpha, the marks and the list of moved coordinates, written out here with the look-ahead distance as
a parameter, the cursor of ``dpdist.solvers.fast_fw.move._ahead``) over 300 random sets of N rows of the same
set, at the distances 0 (no prefetch), 32, 64 and 128 entries: the measurement behind
``dpdist.solvers.fast_fw.state._AHEAD``.

The claims, met or not met as computed from the run: with ``--compare`` (a checkout without the
prefetch), this checkout's steady pace is faster (its best pace is, and a one-sided Welch test over the
rounds gives p < 0.05: use ``--rounds 5`` or more) and every run takes the same path and weights;
with ``--row-pass``, the row pass at the shipped distance (``_AHEAD``) is faster than without a
prefetch. Writes ``benchmarks/results/fw/<UTC date>-prefetch-<profile>.md`` (``-prefetch_row_pass-``
with ``--row-pass``) and ``.csv`` (``--out`` another directory).

    .venv/bin/python benchmarks/fw_prefetch.py webspam --rows 60000 --compare /tmp/wt-base [--rounds 5]
    .venv/bin/python benchmarks/fw_prefetch.py kdda --rows 1000000 --compare /tmp/wt-base
    .venv/bin/python benchmarks/fw_prefetch.py webspam --rows 30000 --row-pass 50
    .venv/bin/python benchmarks/fw_prefetch.py kdda --rows 1000000 --row-pass 20000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from fit_memory import run_in_checkout
from results_file import header, today, topic_dir, welch, write_one_table

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "_work" / "fw-prefetch"
ALPHA = 0.05  # "faster": the one-sided Welch test over the rounds at this level

CHILD = r"""
import hashlib, json, sys, time
import numpy as np, scipy.sparse as sp
sys.path.insert(0, sys.argv[1])
import dpdist
import dpdist.solvers.fast_fw.solver as ffw
from dpdist.solvers.frank_wolfe import privacy_plan
path, steps, eps = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
ffw.privacy_plan = lambda epsilon, delta, _steps, *rest: privacy_plan(epsilon, delta, 4000, *rest)  # T = 4,000's eps0
z = np.load(path)
X = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
y = z["y"]
Xc = X.tocsc()
ffw.fast_frank_wolfe(X[:200], y[:200], 50.0, 5, selection="exponential", epsilon=eps, delta=1e-7, random_state=0)
marks = []
res = ffw.fast_frank_wolfe(X, y, 50.0, steps, selection="exponential", epsilon=eps, delta=1e-7, refresh=0,
                           random_state=0, X_csc=Xc, progress=lambda d, _t: marks.append((time.perf_counter(), d)))
seen = [(t, d) for t, d in marks if 1 <= d < steps]
(t1, d1), (t2, d2) = (seen[0], seen[-1]) if len(seen) > 1 else ((0.0, 0), (res.seconds, steps))
counts = np.diff(Xc.indptr)
print(json.dumps({"module": dpdist.__file__, "seconds": res.seconds, "steady": (t2 - t1) / max(1, d2 - d1),
                  "coef": hashlib.sha256(res.coef.tobytes()).hexdigest(),
                  "rows": float(np.mean([counts[abs(v) - 1] for v in res.path])), "path": [int(v) for v in res.path]}))
"""


def make_set(path: Path, profile: str, rows: int) -> None:
    from dpdist.data.synthetic import make_synthetic

    X, y = make_synthetic(profile, random_state=5, n=rows, block_rows=4096).materialize()
    X = X.astype(np.float32) if profile == "webspam" else X  # as deploy/full-size/webspam.toml's train.dtype
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part.npz")
    np.savez(tmp, data=X.data, indices=X.indices, indptr=X.indptr, shape=np.array(X.shape), y=(y > 0).astype(float))
    tmp.replace(path)


def row_pass(args: argparse.Namespace, data: Path) -> None:
    """``--row-pass``: the row pass's loop at several look-ahead distances (module doc)."""
    import numba

    from dpdist.solvers.fast_fw.move import _ahead
    from dpdist.solvers.fast_fw.state import _AHEAD
    from dpdist.utils.prefetch import prefetch

    @numba.njit
    def move(rows, r_ptr, r_idx, r_val, alpha, mark, touched, gam, dist):
        m, n_touched = rows.shape[0], 0
        # the cursor over rows[0], rows[1], ... (rows in the place of column j's row list)
        ap, app, astop = _ahead(r_ptr, rows, m, 0, r_ptr[rows[0]], r_ptr[rows[0] + 1], dist)
        for e in range(m):
            i = rows[e]
            for pp in range(r_ptr[i], r_ptr[i + 1]):
                if dist > 0 and ap < m:
                    prefetch(alpha, r_idx[app])
                    prefetch(mark, r_idx[app])
                    ap, app, astop = _ahead(r_ptr, rows, m, ap, app, astop, 1)
                k = r_idx[pp]
                alpha[k] += gam * r_val[pp]
                touched[n_touched] = k
                n_touched += 1 - mark[k]
                mark[k] = 1
        for p in range(n_touched):
            mark[touched[p]] = 0
        return n_touched

    rows_per_move = args.row_pass
    z = np.load(data)
    n, D = (int(v) for v in z["shape"])
    r_ptr, r_idx, r_val = z["indptr"], z["indices"], z["data"]
    rng = np.random.default_rng(0)
    sets = [np.sort(rng.choice(n, rows_per_move, replace=False)) for _ in range(300)]
    alpha, mark, touched = rng.standard_normal(D), np.zeros(D, np.uint8), np.empty(D + 1, np.int64)
    dists = tuple(sorted({0, 32, 64, 128, _AHEAD}))
    best = dict.fromkeys(dists, np.inf)
    load = os.getloadavg()[0]
    for rnd in range(3):  # round 0 compiles and warms: not counted
        for d in dists:
            t = time.perf_counter()
            for rows in sets:
                move(rows, r_ptr, r_idx, r_val, alpha, mark, touched, 0.01, d)
            if rnd:
                best[d] = min(best[d], (time.perf_counter() - t) / len(sets))
    entries = np.mean([np.sum(r_ptr[s + 1] - r_ptr[s]) for s in sets])
    print(
        f"\n### a move's row pass with prefetch {', '.join(map(str, dists[1:]))} entries ahead and without, "
        f"{data.name} ({n:,} x {D:,}), {rows_per_move:,} random rows a move ({entries:,.0f} entries), best of 2 "
        f"rounds of 300 moves, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load 1-min {load:.2f} / "
        f"{os.getloadavg()[0]:.2f}\n"
    )
    print("| entries ahead | ms a move | speed-up over no prefetch |\n| ---: | ---: | ---: |")
    for d in dists:
        print(f"| {d or 'none'} | {best[d] * 1e3:.3f} | {best[0] / best[d]:.2f}x |")
    md = header(
        f"A fast DP-FW move's row pass with and without software prefetch: {args.profile} profile",
        "best of 2 rounds of 300 moves per distance (a first round compiles and warms, not counted)",
        load,
    )
    md += [
        f"Claim: prefetching alpha_k and the mark `_AHEAD` = {_AHEAD} entries ahead (the distance "
        "`dpdist.solvers.fast_fw.move._move` ships with) makes a move's row pass faster than no prefetch. "
        f"Synthetic {args.profile} profile, {n:,} x {D:,} (`dpdist.data.synthetic`), {rows_per_move:,} random rows "
        f"a move ({entries:,.0f} entries on average); the loop of `_move`'s row pass written out with the "
        "distance as a parameter.",
        "",
    ]
    stem = _stem(args, "prefetch_row_pass")
    fastest = min(dists, key=lambda d: best[d])
    write_one_table(
        stem,
        md,
        ["entries ahead", "ms a move", "speed-up over no prefetch", "shipped"],
        [
            [d or "none", f"{best[d] * 1e3:.3f}", f"{best[0] / best[d]:.2f}x", "yes" if d == _AHEAD else "no"]
            for d in dists
        ],
        [
            f"Target (faster at {_AHEAD} entries ahead than without): {best[0] / best[_AHEAD]:.2f}x; "
            f"**{'met' if best[_AHEAD] < best[0] else 'not met'}**. The fastest distance in this run: "
            + (f"{fastest} entries ahead." if fastest else "no prefetch.")
        ],
    )


def _stem(args: argparse.Namespace, name: str) -> Path:
    """The results file's path without its suffix, its directory created."""
    out = args.out or topic_dir("fw")
    out.mkdir(parents=True, exist_ok=True)
    return out / f"{today()}-{name}-{args.profile}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", choices=["webspam", "kdda", "url", "news20", "rcv1"])
    ap.add_argument("--rows", type=int, default=60_000)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=5, help="each checkout runs once a round, the order alternating")
    ap.add_argument("--compare", type=Path, help="the checkout to compare with (e.g. the commit before)")
    ap.add_argument("--row-pass", type=int, metavar="N", help="time the row pass alone, N rows a move (module doc)")
    ap.add_argument("--out", type=Path, default=None, help="where the results file goes (default results/fw)")
    args = ap.parse_args()
    data = WORK / f"{args.profile}-{args.rows}.npz"
    if not data.exists():
        print(f"writing {data} ...", file=sys.stderr, flush=True)
        make_set(data, args.profile, args.rows)
    if args.row_pass:
        return row_pass(args, data)
    if args.compare is None:
        ap.error("--compare DIR (or --row-pass N) is needed")
    if args.compare.resolve() == ROOT:
        ap.error("--compare DIR must be another checkout than this one")
    compare(args, data)


def compare(args: argparse.Namespace, data: Path) -> None:
    """``--compare``: this checkout's steady pace against the other's, in alternating order (module doc)."""
    load = os.getloadavg()[0]
    checkouts = [ROOT, args.compare.resolve()]
    results: dict[Path, list[dict]] = {c: [] for c in checkouts}
    for r in range(args.rounds):
        for c in checkouts if r % 2 == 0 else checkouts[::-1]:
            res = run_in_checkout(c, CHILD, data, args.steps, args.epsilon)
            results[c].append(res)
            print(
                f"round {r + 1}, {c}: steady {res['steady'] * 1e3:.3f} ms per iteration, whole {res['seconds']:.2f} s",
                file=sys.stderr,
                flush=True,
            )
    z = np.load(data)
    shape, nnz = tuple(z["shape"]), z["data"].size
    same = len({(json.dumps(r["path"]), r["coef"]) for rs in results.values() for r in rs}) == 1
    print(
        f"\n### fast DP-FW with and without prefetch, {args.profile} profile {shape[0]:,} x {shape[1]:,} ({nnz:,} "
        f"non-zeros), epsilon {args.epsilon} (T = 4,000's plan), {args.steps} steps, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load 1-min {load:.2f} / {os.getloadavg()[0]:.2f}\n"
    )
    print("| checkout | steady ms per iteration (each round) | whole run s (each round) | chosen columns' rows |")
    print("| --- | --- | --- | ---: |")
    for c, rs in results.items():
        steady = ", ".join(f"{r['steady'] * 1e3:.3f}" for r in rs)
        whole = ", ".join(f"{r['seconds']:.2f}" for r in rs)
        print(f"| {c} | {steady} | {whole} | {rs[0]['rows']:,.1f} |")
    mine, base = (min(r["steady"] for r in results[c]) for c in checkouts)
    print(
        f"\nbest steady pace: this checkout {mine * 1e3:.3f} ms, {checkouts[1]} {base * 1e3:.3f} ms: "
        f"**{base / mine:.2f}x**; the same path and weights to the bit (seed 0) in every run: {same}"
    )
    md = header(
        f"Fast DP-FW with and without software prefetch: {args.profile} profile",
        f"{args.rounds} round(s), each checkout once a round in alternating order, each in a fresh process",
        load,
    )
    md += [
        "Claim: the kernel's software prefetch (`dpdist.utils.prefetch`, in `dpdist.solvers.fast_fw.move._move` "
        "and `.weights._reweight`) makes fast DP-FW's steady pace faster than the compared checkout's (one "
        "without it) and changes no bit: every run takes the same path and weights. Synthetic "
        f"{args.profile} profile, {shape[0]:,} x {shape[1]:,} ({nnz:,} non-zeros; `dpdist.data.synthetic`); "
        f"[RKL23] Alg. 2 + 4, exponential sampler, epsilon {args.epsilon} in a T = 4,000 run's plan, "
        f"{args.steps} steps, no refresh, seed 0. Steady pace: seconds per iteration between the progress "
        "reports after the first iteration.",
        "",
    ]
    stem = _stem(args, "prefetch")
    cells = [
        [
            "this checkout" if c == ROOT else str(c),
            i + 1,
            f"{r['steady'] * 1e3:.4f}",
            f"{r['seconds']:.2f}",
            f"{r['rows']:,.1f}",
        ]
        for c, rs in results.items()
        for i, r in enumerate(rs)
    ]
    p = welch([r["steady"] for r in results[ROOT]], [r["steady"] for r in results[checkouts[1]]], "less")
    write_one_table(
        stem,
        md,
        ["checkout", "round", "steady ms per iteration", "whole run s", "chosen columns' rows"],
        cells,
        [
            f"Best steady pace: this checkout {mine * 1e3:.4f} ms, `{checkouts[1]}` {base * 1e3:.4f} ms, speed-up "
            f"{base / mine:.2f}x (one-sided Welch p = {p:.3g} over the rounds); the same path and weights in every "
            f"run: {'yes' if same else 'no'}. Target (faster at p < {ALPHA}, the same bits): "
            f"**{'met' if base > mine and p < ALPHA and same else 'not met'}**."
        ],
    )


if __name__ == "__main__":
    main()
