"""A Dask worker's allocator settings and the ingest stage (issue 57: KDDA end to end in 10 minutes).

Dask's nanny starts each worker with ``MALLOC_TRIM_THRESHOLD_=65536``; setting it also fixes glibc's mmap
threshold at 128 KiB, so every array over 128 KiB is a fresh mapping, faulted in page by page as it is first
written. dpdist's clusters unset it (``dpdist.flows.runtime.WORKER_ENVIRON``). This measures what the
ingest stage's two jobs take on a worker of a local cluster like the flow's (2 workers x 1 thread, TLS off:
the jobs send nothing), each arm in a fresh cluster, alternated ``--rounds`` times:

* the svmlight text into a store (``ingest_svmlight``, as the ``ingest-source`` task does);
* that store's keyed split into two stores (``split_store``, as ``ingest-split`` does).

Each job's seconds and its worker's peak RSS (``ru_maxrss`` of the worker process, new for each job). Each arm
runs in a process of its own: a nanny writes its variables into its own process's environment, where the next
cluster's workers would inherit them.
The claim: with dpdist's setting both jobs are faster than with Dask's, in the same run. Writes
``benchmarks/results/scale/<UTC date>-worker_allocator.md`` and ``.csv``.

    .venv/bin/python benchmarks/worker_allocator.py benchmarks/_work/full/kdda.svm [--rounds 1]

(``full_size.py kdda`` writes that text.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dask
from distributed import Client, LocalCluster

from dpdist.flows.runtime import WORKER_ENVIRON

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_file import header, today, topic_dir, write_one_table  # noqa: E402

KDDA_D = 20_216_830
ARMS = {"Dask's (MALLOC_TRIM_THRESHOLD_=65536)": {}, "dpdist's (glibc's defaults)": WORKER_ENVIRON}


def _timed(job: str, src: str, out: str) -> tuple[float, float, str | None]:
    import resource

    from dpdist.data.ingest import ingest_svmlight
    from dpdist.data.split import split_store

    start = time.perf_counter()
    if job == "ingest":
        ingest_svmlight(src, out, force=True, n_features=KDDA_D, task="binary", labels=[0, 1])
    else:
        split_store(src, f"{out}-train", f"{out}-test", 0.2, os.urandom(32), force=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return time.perf_counter() - start, peak, os.environ.get("MALLOC_TRIM_THRESHOLD_")


def _arm(settings: dict[str, Any], text: str, work: Path) -> list[tuple[str, float, float, str | None]]:
    """The arm's two jobs, each on a fresh cluster made under ``settings``."""
    out = []
    with dask.config.set(settings):
        for job, src, dest in (("ingest", text, work / "store"), ("split", str(work / "store"), work / "half")):
            # a fresh cluster per job: each worker's peak is its job's
            with (
                LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="10GiB", dashboard_address=None) as c,
                Client(c) as client,
            ):
                seconds, peak, trim = client.submit(_timed, job, src, str(dest), pure=False).result()
            out.append((job, seconds, peak, trim))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("text", help="an svmlight text of KDDA's shape (full_size.py kdda writes one)")
    ap.add_argument("--rounds", type=int, default=1, help="times each arm runs, alternated")
    ap.add_argument("--workdir", default=None, help="where the stores go (default: a temporary directory)")
    ap.add_argument("--arm", choices=list(ARMS), help=argparse.SUPPRESS)  # one arm, in this process (JSON out)
    args = ap.parse_args()
    if args.arm is not None:
        print(json.dumps(_arm(ARMS[args.arm], args.text, Path(args.workdir))))
        return
    started = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="worker-allocator-", dir=args.workdir))
    rows = []
    try:
        for r in range(args.rounds):
            for name in ARMS:
                cmd = [sys.executable, __file__, args.text, "--arm", name, "--workdir", str(work)]
                lines = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()
                for job, seconds, peak, trim in json.loads(lines[-1]):
                    rows.append([r + 1, name, job, trim or "unset", f"{seconds:.1f}", f"{peak:.2f}"])
                    print(rows[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    jobs = ("ingest", "split")
    best = {(n, j): min(float(x[4]) for x in rows if x[1] == n and x[2] == j) for n in ARMS for j in jobs}
    dask_arm, ours = list(ARMS)
    verdict = []
    for job in jobs:
        a, b = best[(dask_arm, job)], best[(ours, job)]
        verdict.append(
            f"- {job}: {a:.1f} s with Dask's setting, {b:.1f} s with dpdist's (best of {args.rounds}): {a / b:.2f}x"
        )
    met = all(best[(dask_arm, j)] > best[(ours, j)] for j in jobs)
    verdict.append(f"\nBoth jobs faster with dpdist's setting: **{'met' if met else 'not met'}**.")
    size = Path(args.text).stat().st_size / 1e9
    lines = [
        *header("A Dask worker's allocator settings and the ingest stage", f"{args.rounds} round(s) per arm", started),
        "",
        f"The text: `{args.text}`, {size:.2f} GB. Each job on one worker of a fresh 2-worker local cluster.",
        "",
    ]
    columns = ["round", "worker allocator", "job", "MALLOC_TRIM_THRESHOLD_ there", "seconds", "worker peak RSS GiB"]
    write_one_table(topic_dir("scale") / f"{today()}-worker_allocator", lines, columns, rows, verdict)


if __name__ == "__main__":
    main()
