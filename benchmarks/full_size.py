"""Full size on one machine (issue 16): a full-shape config end to end, wall time per stage and
peak RSS per process.

For ``deploy/full-size/<profile>.toml`` (kdda, url, webspam):

1. writes the synthetic svmlight text of the profile (``dpdist.data.synthetic``, labels as the
   real set's) to the config's ``data.path`` once (atomically; kept for later runs), unless
   the file exists (then it is used as it is: the real file works the same way);
2. runs ``dpdist run <config>`` twice in fresh processes: the first ingests, the second must
   reuse the source store and the split halves (``dpdist.flows.plan.source_fingerprint``);
3. samples the RSS of every process of each run's tree (the flow process, the temporary
   Prefect server, the Dask scheduler's nanny and workers) every 0.5 s with psutil and keeps
   each one's peak;
4. prints a markdown table (the stage times ``dpdist run`` prints on stderr, the peaks, the
   text and store sizes on disk, the load average) and the claim's verdict computed from it, and
   writes them to ``benchmarks/results/scale/<UTC date>-full_size-<profile>.md`` (a later run of
   the same day is appended as a section of its own); each run's whole stderr is kept in the run's
   output directory as ``benchmark-run-<time>-<i>.log`` (owner-only), with a count of its warning
   lines. ``benchmarks/results/full_size.md`` holds the runs made before the dated files.

The claim, for a run that was not stopped: ``dpdist run`` goes from the svmlight text to the report
(the whole command: its steps, ingest included, and the temporary Prefect server and Dask cluster
starting and stopping) in at most 10 minutes for KDDA (issue 57; 30 minutes for URL and Webspam),
and no process of its tree passes 16 GiB (KDDA; Webspam's config gives its one worker 22 GiB for the
train half's two copies, so there the peak is stated, not judged). Each run is ``dpdist run -v``:
the operator's timings on its stderr give, for a full-batch DP-GD fit (``dpdist.pipelines.dp_gd``),
its median step beside the median time of one pass over the train rows in the same fit (the slowest
worker's gradient sums), and the claim on that ratio: at most 1.5.

``--fraction f`` runs the first ``round(f * rows)`` rows of the profile instead (a derived
config beside the text, its own output), for shapes that do not fit the machine or the time;
the fraction is stated in the table. ``--stop-after-step STEP`` interrupts each run (SIGTERM,
which ``dpdist run`` handles as Ctrl-C: a clean stop, exit 130; a SIGINT would be ignored when
this script runs in the background) as soon as it prints that step's time, and
``--stop-after SECONDS`` once it has run that long: the table then shows the steps that finished
and says where the run was stopped (a stage that does not fit the time; the second run's reuse
and time to the first release). The timings are of private fits: they go to this operator's
terminal and the results file, never to the run's report.

    .venv/bin/python benchmarks/full_size.py kdda [--fraction 1.0] [--runs 2]
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import numpy as np
import psutil
from results_file import header, today, topic_dir
from sklearn.datasets import dump_svmlight_file

from dpdist.data.synthetic import SPARSE_PROFILES, make_synthetic
from dpdist.utils.files import open_private

ROOT = Path(__file__).resolve().parent.parent
STEP_NAMES = ("ingest", "select", "train", "evaluate", "report")
WALL_TARGET_S = {"kdda": 10 * 60}  # the text to the report, the whole command; 30 minutes for the others
STEP_PASS_TARGET = 1.5  # a DP-GD step against one pass over the rows, in the same fit
RSS_TARGET_GIB = {"kdda": 16.0}  # per process; the other configs' worker limits are larger
STEP = re.compile(r"dpdist run: step (\w+) took ([0-9.]+) s")
DP_GD = re.compile(r"dp-gd over \d+ groups: median step ([0-9.]+) s, median pass over the rows ([0-9.]+) s")


def write_text(path: Path, profile: str, rows: int, labels: list[float], seed: int = 1) -> float:
    """The profile's first ``rows`` rows as one-based svmlight text (atomic); returns seconds.

    Real values are written with 6 significant digits, as LIBSVM's webspam file prints them
    (``0.0142146``; 17 digits made the Webspam text 37 GB instead of ~25 GB); binary ones as ``1``.
    A path ending in ``.gz`` is written through ``gzip -1`` (another process: the compression runs
    beside the formatting), which ``dpdist ingest`` reads as it is."""
    t = time.perf_counter()
    tmp = path.with_name(path.name + ".part")
    path.parent.mkdir(parents=True, exist_ok=True)
    lo, hi = min(labels), max(labels)
    # blocks of 65,536 rows, or of ~16M non-zeros where rows are long (Webspam: 65,536 rows would be 244M
    # non-zeros, ~23 GB with their text: the OOM killer stopped that); KDDA and URL keep 65,536 (same text)
    block = min(1 << 16, max(256, (1 << 24) // round(SPARSE_PROFILES[profile].row_nnz)))
    data = make_synthetic(profile, random_state=seed, n=rows, block_rows=block)
    done = written = 0
    with open(tmp, "wb") as f:
        gz = subprocess.Popen(["gzip", "-1", "-c"], stdin=subprocess.PIPE, stdout=f) if path.suffix == ".gz" else None
        out = gz.stdin if gz is not None else f
        for X, y in data.blocks:
            if X.nnz and not np.all(X.data == 1.0):
                X = X.copy()
                scale = 10.0 ** (5 - np.floor(np.log10(np.abs(X.data))))
                X.data = np.round(X.data * scale) / scale
            buf = io.BytesIO()
            dump_svmlight_file(X, np.where(y > 0, hi, lo), buf, zero_based=False)
            out.write(buf.getvalue())
            done += X.shape[0]
            written += buf.tell()
            print(
                f"\r  {path.name}: {done:,} / {rows:,} rows, {written / 1e9:.2f} GB of text",
                end="",
                file=sys.stderr,
                flush=True,
            )
        if gz is not None:
            gz.stdin.close()
            if gz.wait() != 0:
                raise SystemExit(f"gzip exited {gz.returncode} writing {tmp}")
    print(file=sys.stderr)
    os.replace(tmp, path)
    return time.perf_counter() - t


def _label(p: psutil.Process, root: int) -> str:
    if p.pid == root:
        return "dpdist launcher"
    try:
        cmd = " ".join(p.cmdline())
    except psutil.Error:
        return "?"
    if "dpdist.cli" in cmd:
        return "flow (python -m dpdist.cli run)"
    if "prefect" in cmd and "server" in cmd:
        return "prefect server"
    if "multiprocessing" in cmd or "spawn" in cmd or "forkserver" in cmd:
        return "dask worker/nanny"
    return (p.name() or "?")[:20]


def run_sampled(
    cmd: list[str], env: dict[str, str], stop_step: str | None = None, stop_after: float | None = None
) -> tuple[int, str, dict[int, tuple[str, float]], float, str | None, float]:
    """Run ``cmd``; (exit code, stderr, {pid: (label, peak RSS GiB)}, wall seconds, why it was stopped or None,
    the least free space on the checkout's disk seen, GB).
    ``stop_step`` / ``stop_after``: interrupt the run once it prints that step's time / after that many seconds."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peaks: dict[int, tuple[str, float]] = {}
    err: list[str] = []
    stopped: list[str] = []

    def stop(why: str) -> None:
        if not stopped and proc.poll() is None:
            stopped.append(why)
            proc.send_signal(signal.SIGTERM)

    def drain() -> None:
        for line in proc.stderr:
            err.append(line)
            if "step" in line or "error" in line.lower():
                print("   ", line.rstrip(), file=sys.stderr, flush=True)
            m = STEP.search(line)
            if stop_step is not None and m and m.group(1) == stop_step:
                stop(f"stopped after step {stop_step}, at {time.perf_counter() - t:.0f} s")

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    root = psutil.Process(proc.pid)
    least_free = shutil.disk_usage(ROOT).free
    while proc.poll() is None:
        least_free = min(least_free, shutil.disk_usage(ROOT).free)
        if stop_after is not None and time.perf_counter() - t > stop_after:
            stop(f"stopped at {stop_after:.0f} s")
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                rss = p.memory_info().rss / 2**30
                # labelled again each time: a worker sampled between its fork and its exec has the
                # flow's command line (one was once reported as a second "flow" process)
                label = _label(p, proc.pid)
            except psutil.Error:
                continue
            before, peak = peaks.get(p.pid, ("?", 0.0))
            peaks[p.pid] = (before if label == "?" else label, max(rss, peak))
        time.sleep(0.5)
    proc.stdout.read()
    reader.join()
    return (
        proc.returncode,
        "".join(err),
        peaks,
        time.perf_counter() - t,
        (stopped[0] if stopped else None),
        least_free / 1e9,
    )


def disk_gb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 1e9
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", choices=["kdda", "url", "webspam"])
    ap.add_argument("--fraction", type=float, default=1.0, help="row fraction of the full shape (stated in the table)")
    ap.add_argument("--runs", type=int, default=2, help="dpdist run repetitions (the 2nd+ must reuse the stores)")
    ap.add_argument("--fresh", action="store_true", help="delete the run's output (stores, ledger) first")
    ap.add_argument(
        "--stop-after-step",
        choices=["ingest", "select", "train", "evaluate"],
        help="interrupt each run once it has finished this step",
    )
    ap.add_argument("--stop-after", type=float, help="interrupt each run after this many seconds")
    args = ap.parse_args()
    if not 0 < args.fraction <= 1:
        ap.error("--fraction must lie in (0, 1]")
    trials = f"{args.runs} `dpdist run` invocation(s) in fresh processes, each section one invocation of this script"

    config = ROOT / "deploy" / "full-size" / f"{args.profile}.toml"
    cfg = tomllib.loads(config.read_text())
    prof = SPARSE_PROFILES[args.profile]
    rows = max(1, round(prof.n * args.fraction))
    text = ROOT / cfg["data"]["path"]
    output = ROOT / cfg["output"]
    if args.fraction < 1:  # a derived config: its own text and output, the fraction in their names
        tag = f"f{args.fraction:g}"
        text = text.with_name(f"{text.stem}-{tag}{text.suffix}")
        output = output.with_name(f"{output.name}-{tag}")
        body = config.read_text()
        body = body.replace(f'path = "{cfg["data"]["path"]}"', f'path = "{text.relative_to(ROOT)}"')
        body = body.replace(f'output = "{cfg["output"]}"', f'output = "{output.relative_to(ROOT)}"')
        config = text.with_name(f"{args.profile}-{tag}.toml")
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(body)
    if args.fresh and output.exists():
        shutil.rmtree(output)

    gen = None
    if not text.exists():
        print(f"writing {rows:,} rows of the {args.profile} profile to {text}", file=sys.stderr)
        gen = write_text(text, args.profile, rows, cfg["data"]["labels"])
    env = {
        **os.environ,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_HOME": str(output.parent / f".prefect-{args.profile}"),
        "DPDIST_LEDGER": str(output / "ledger.sqlite"),
    }  # the benchmark's own ledger, not the user's
    cmd = [str(ROOT / ".venv" / "bin" / "dpdist"), "run", "-v", str(config.relative_to(ROOT))]
    runs = []
    for i in range(args.runs):
        load0 = os.getloadavg()
        print(f"run {i + 1}: {' '.join(cmd)} (load {load0[0]:.2f})", file=sys.stderr, flush=True)
        reused = (output / "stores" / "source").exists()
        free0 = shutil.disk_usage(ROOT).free / 1e9
        code, err, peaks, wall, stopped, least_free = run_sampled(cmd, env, args.stop_after_step, args.stop_after)
        if output.is_dir():  # the whole stderr (operator side: it has the fits' timings)
            log = output / f"benchmark-run-{time.strftime('%Y%m%dT%H%M%S')}-{i + 1}.log"
            try:
                with open_private(log, "w") as f:
                    f.write(err)
                warned = sum("Warning" in line for line in err.splitlines())
                print(f"    its stderr: {log} ({warned} lines with 'Warning')", file=sys.stderr)
            except OSError as e:  # never in place of the run's own error, nor of the table
                print(f"    its stderr was not kept: {e}", file=sys.stderr)
        if code != 0 and not (stopped and code == 130):
            print(err[-4000:], file=sys.stderr)
            raise SystemExit(f"dpdist run exited {code}")
        steps = {m.group(1): float(m.group(2)) for m in STEP.finditer(err)}
        fits = [(float(m.group(1)), float(m.group(2))) for m in DP_GD.finditer(err)]
        runs.append(
            {
                "wall": wall,
                "steps": steps,
                "peaks": peaks,
                "load": (load0, os.getloadavg()),
                "stopped": stopped,
                "reused": reused,
                "disk": (free0, least_free),
                "dp_gd": fits,
            }
        )

    store = output / "stores" / "source"
    lines = [
        f"\n### {args.profile}: {rows:,} x {prof.d:,} rows x columns (fraction {args.fraction:g} of "
        f"{prof.n:,} rows), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n",
        f"`{' '.join(sys.argv[0:1] + sys.argv[1:])}` runs `dpdist run {config.relative_to(ROOT)}` "
        f"{args.runs} times; {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB "
        "(shared with other developers).\n",
        f"- svmlight text: {disk_gb(text):.2f} GB on disk"
        + (" (gzip)" if text.suffix == ".gz" else "")
        + (
            f", written in {gen:.0f} s (before the runs, not timed in them)"
            if gen is not None
            else " (existed: not regenerated)"
        ),
        f"- stores on disk after the runs: source {disk_gb(store):.2f} GB, train "
        f"{disk_gb(output / 'stores' / 'train'):.2f} GB, test {disk_gb(output / 'stores' / 'test'):.2f} GB\n",
        "| run | "
        + " | ".join(f"{s} s" for s in STEP_NAMES)
        + " | wall s | DP-GD step / pass s (ratio) | peak RSS GiB per process | load 1-min before / after "
        "| free disk GB before / least |",
        "| --- | " + " | ".join("---:" for _ in range(6)) + " | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(runs, 1):
        peaks = sorted(r["peaks"].values(), key=lambda v: -v[1])
        top = ", ".join(f"{label} {gb:.2f}" for label, gb in peaks if gb >= 0.1)
        label = f"{i}" + (" (stores existed)" if r["reused"] else "") + (f", {r['stopped']}" if r["stopped"] else "")
        lines.append(
            f"| {label} | "
            + " | ".join(f"{r['steps'][s]:.1f}" if s in r["steps"] else "–" for s in STEP_NAMES)
            + f" | {r['wall']:.1f} | {_step_pass(r['dp_gd'])} | {top} | {r['load'][0][0]:.2f} / {r['load'][1][0]:.2f} "
            f"| {r['disk'][0]:.1f} / {r['disk'][1]:.1f} |"
        )
    lines += ["", *verdicts(args.profile, runs)]
    table = "\n".join(lines) + "\n"
    print(table)
    out = topic_dir("scale") / f"{today()}-full_size-{args.profile}.md"
    opening = "" if out.exists() else "\n".join(header(f"`dpdist run` at {args.profile}'s full shape", trials))
    with open(out, "a", encoding="utf-8") as f:
        f.write(opening + table)
    print(f"written: {out}", file=sys.stderr)


def _step_pass(fits: list[tuple[float, float]]) -> str:
    return "; ".join(f"{step:.2f} / {one:.2f} ({step / one:.2f}x)" for step, one in fits) or "–"


def verdicts(profile: str, runs: list[dict]) -> list[str]:
    """The claim's verdict for each run that went to the report (module docstring)."""
    out = []
    target = WALL_TARGET_S.get(profile, 30 * 60)
    for i, r in enumerate(runs, 1):
        if r["stopped"] or not all(s in r["steps"] for s in STEP_NAMES):
            out.append(f"Run {i}: stopped or incomplete, the claim is not judged on it.")
            continue
        total = sum(r["steps"][s] for s in STEP_NAMES)
        peak = max((gb for _, gb in r["peaks"].values()), default=float("nan"))
        rss_target = RSS_TARGET_GIB.get(profile)
        ratios = [step / one for step, one in r["dp_gd"]]
        met = r["wall"] <= target and (rss_target is None or peak < rss_target)
        met = met and all(x <= STEP_PASS_TARGET for x in ratios)
        rss = f"under {rss_target:g} GiB" if rss_target is not None else "not judged at this shape"
        ratio = (
            f", DP-GD step / pass {', '.join(f'{x:.2f}' for x in ratios)} (target at most {STEP_PASS_TARGET:g})"
            if ratios
            else ""
        )
        out.append(
            f"Run {i}: the text to the report {r['wall']:,.1f} s ({r['wall'] / 60:.1f} min, the whole command; its "
            f"steps {total:,.1f} s; target at most {target / 60:.0f} min), the largest process {peak:.2f} GiB ({rss})"
            f"{ratio}: **{'met' if met else 'not met'}**."
        )
    return out


if __name__ == "__main__":
    main()
