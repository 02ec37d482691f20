"""Peak memory of the train stage's fit (issue 16): ``dpdist.pipelines.train.fit_store`` on a KDDA-shaped store.

At KDDA's full shape the fast DP-FW fit of ``dpdist run`` (all 20,216,830 features) was killed
at ~10.5 GiB per Dask worker. This script writes a store with KDDA's profile and all its
columns but a fraction of its rows (``dpdist.data.synthetic``, once, kept under
``benchmarks/_work/fit-memory``), then runs ``fit_store`` on it in a fresh process per
checkout and reports that process's peak RSS (``getrusage``: the exact peak, no sampling), its
RSS before the fit (imports and the kernel's numba cache loaded by a warm-up fit on a tiny
store), and the data's own size (the CSR arrays as stored). ``--compare DIR`` runs the same
fit with the package of another checkout (e.g. the main branch) in the same invocation, for
the ratio. The fits are private (fast DP-FW, exponential sampler): their times are printed for
this operator only.

The claim is checked by projecting to KDDA's full train half (6,725,014 rows): the same fit also runs
on a store of 2,000 rows with all the columns (the part of the peak that does not grow with the rows),
and the peak is extrapolated linearly in the rows between the two measurements, against the Dask
worker's kill line (95% of ``cluster.memory_limit`` in ``deploy/full-size/kdda.toml``). Writes
``benchmarks/results/scale/<UTC date>-fit_memory.md`` and ``.csv``.

    .venv/bin/python benchmarks/fit_memory.py [--rows 672620] [--iters 200] [--compare /work/main]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_file import header, today, topic_dir, write_one_table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "_work" / "fit-memory"
FULL_ROWS = 6_725_014  # KDDA's train half (80% of 8,407,752 rows)

CHILD = r"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from dpdist.pipelines.train import STORE_CLASSES, FitJob, fit_store
from dpdist.data.store import open_store
path, tiny, iters, bounds = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
fw = {"epsilon": 1.0, "delta": 1e-7, "lam": 50.0, "bounds": bounds, "classes": STORE_CLASSES}
fit_store(FitJob(tiny, "fast-dp-fw", {**fw, "max_iter": 5}))  # imports, numba kernels from the cache
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
t = time.perf_counter()
out = fit_store(FitJob(path, "fast-dp-fw", {**fw, "max_iter": iters, "random_state": 0}))
sec = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
import dpdist
print(json.dumps({"module": dpdist.__file__, "base": base, "peak": peak, "seconds": sec, "path": out["path"][:20]}))
"""


def make_store(path: Path, rows: int, d: int | None = None) -> None:
    from dpdist.data.store import write_blocks
    from dpdist.data.synthetic import make_synthetic

    data = make_synthetic("kdda", random_state=3, n=rows, d=d, block_rows=1 << 16)
    write_blocks(path, data.blocks, data.n_features, task="binary", labels=[-1.0, 1.0])


def run_in_checkout(checkout: Path, child: str, *args: object) -> dict:
    """The Python code ``child`` in a fresh process that imports dpdist from ``checkout`` (its first
    argument; ``args`` after it): the JSON object of its last line of output, checked to come from
    that checkout's dpdist (also used by fw_prefetch.py)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", child, str(checkout), *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"fit in {checkout} failed:\n{out.stderr[-3000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if not Path(r["module"]).resolve().is_relative_to(checkout):
        raise SystemExit(f"the fit imported dpdist from {r['module']}, not from {checkout}")
    return r


def main() -> None:
    from dpdist.data.store import open_store

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=672_620, help="store rows (default: 10%% of KDDA's train half)")
    ap.add_argument("--iters", type=int, default=200, help="fast DP-FW iterations (memory does not depend on it)")
    ap.add_argument("--bounds", choices=["check", "clip"], default="clip", help="as deploy/full-size/kdda.toml")
    ap.add_argument("--compare", type=Path, action="append", default=[], help="another checkout to run the same fit")
    args = ap.parse_args()

    store, tiny = WORK / f"kdda-{args.rows}", WORK / "tiny"
    if not store.exists():
        print(f"writing {store} ...", file=sys.stderr, flush=True)
        make_store(store, args.rows)
    if not tiny.exists():
        make_store(tiny, 2000, d=1000)
    narrow = WORK / "kdda-2000"
    if not narrow.exists():
        make_store(narrow, 2000)
    s = open_store(store)
    n, d = s.shape
    data_gib = (s.nnz * (8 + 4) + (n + 1) * 8) / 2**30  # float64 values, int32 indices, int64 pointers
    load = os.getloadavg()[0]
    rows = []
    for checkout in [ROOT, *args.compare]:
        r = run_in_checkout(checkout.resolve(), CHILD, store, tiny, args.iters, args.bounds)
        rows.append((checkout, r))
        print(
            f"{checkout}: peak {r['peak']:.2f} GiB (before the fit {r['base']:.2f}), fit {r['seconds']:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    same = len({json.dumps(r["path"]) for _, r in rows}) == 1
    print(
        f"\n### fit_store memory, KDDA profile {n:,} x {d:,} ({s.nnz:,} non-zeros; CSR as stored "
        f"{data_gib:.2f} GiB), fast DP-FW T = {args.iters}, bounds = {args.bounds!r}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load 1-min {load:.2f} / {os.getloadavg()[0]:.2f}\n"
    )
    print(
        "| checkout | peak RSS GiB | RSS before the fit GiB | fit peak - before GiB | (peak - before) / CSR size "
        "| fit s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for checkout, r in rows:
        grow = r["peak"] - r["base"]
        print(
            f"| {checkout} | {r['peak']:.2f} | {r['base']:.2f} | {grow:.2f} | {grow / data_gib:.2f} "
            f"| {r['seconds']:.1f} |"
        )
    print(f"\nsame first 20 vertices (seed 0) in every checkout: {same}")
    r0 = run_in_checkout(ROOT, CHILD, narrow, tiny, args.iters, args.bounds)
    print(f"2,000 rows, all columns: peak {r0['peak']:.2f} GiB", file=sys.stderr, flush=True)
    write_results(args, (n, d, s.nnz, data_gib), rows, r0, load, same)


def write_results(args, shape: tuple, rows: list, r0: dict, load: float, same: bool) -> None:
    """The dated results file: the measured peaks, the projection to the full train half, met or not met."""
    n, d, nnz, data_gib = shape
    r = rows[0][1]
    projected = r0["peak"] + (r["peak"] - r0["peak"]) * (FULL_ROWS - 2000) / (n - 2000)
    cfg = tomllib.loads((ROOT / "deploy" / "full-size" / "kdda.toml").read_text())
    limit = float(cfg["cluster"]["memory_limit"].removesuffix("GiB"))
    kill = 0.95 * limit
    md = header("Peak memory of the train stage's fit (fast DP-FW, KDDA profile)", "1 fit per store", load)
    md += [
        "Claim: the train stage's fit (`dpdist.pipelines.train.fit_store`, fast DP-FW over all the columns) fits in "
        f"a Dask worker's memory at KDDA's full shape: the worker's limit is {limit:g} GiB "
        f"(`deploy/full-size/kdda.toml`), killed at 95% = {kill:.1f} GiB. Measured on synthetic KDDA-profile "
        f"stores of {n:,} and 2,000 rows with all {d:,} columns ({nnz:,} non-zeros, CSR as stored "
        f"{data_gib:.2f} GiB, in the larger), fast DP-FW T = {args.iters} (memory does not depend on T), "
        f"bounds = {args.bounds!r}; peak RSS of a fresh process per fit (`getrusage`). The full train half "
        f"({FULL_ROWS:,} rows) is projected linearly in the rows between the two peaks.",
        "",
    ]
    stem = topic_dir("scale") / f"{today()}-fit_memory"
    cells = [
        [
            f"{checkout}",
            f"{n:,}",
            f"{x['peak']:.2f}",
            f"{x['base']:.2f}",
            f"{x['peak'] - x['base']:.2f}",
            f"{x['seconds']:.1f}",
        ]
        for checkout, x in rows
    ]
    cells.append(
        [
            f"{ROOT}",
            "2,000",
            f"{r0['peak']:.2f}",
            f"{r0['base']:.2f}",
            f"{r0['peak'] - r0['base']:.2f}",
            f"{r0['seconds']:.1f}",
        ]
    )
    write_one_table(
        stem,
        md,
        ["checkout", "rows", "peak RSS GiB", "RSS before the fit GiB", "fit peak - before GiB", "fit s"],
        cells,
        [
            f"Same first 20 vertices (seed 0) in every checkout: {same}.",
            "",
            f"Projected peak at the full train half: **{projected:.2f} GiB** against the {kill:.1f} GiB kill line: "
            f"**{'met' if projected < kill else 'not met'}**.",
        ],
    )


if __name__ == "__main__":
    main()
