"""The main job on the multi-node SLURM cluster, measured against the cost model of a DP-GD step.

``deploy/slurm-multi-node.sh start`` (as root) runs slurmctld and one slurmd per network namespace
(dpdist-node1..N, each its own address on the bridge dpmn0); this runs
``dpdist run deploy/slurm-multi-node.toml`` there once, as its user would (SLURM_CONF naming that
cluster, the output in its shared directory, the ledger in the flow's own /tmp), and:

1. snapshots the byte counters of the bridge (the flow's side: what the flow's host sends to and
   receives from the nodes) and of the veth pair of every node (what each node sends and receives,
   from the flow or from another node) at the start and the end of the first full-batch DP-GD fit
   (from its release's "computing" line to its "(computed)" line on the run's stderr), and the CPU
   time of the flow's process tree (the client, the scheduler, the central noise) meanwhile;
2. cancels one worker's SLURM job (``scancel``) as the second DP-GD fit starts: the run must survive
   it (dask-jobqueue starts a new job; the lost tasks run again) with nothing charged twice;
3. reads the run's SLURM jobs back from the accounting (``sacct``): their nodes and states.

Per DP-GD step the cost model (``predicted_step_bytes``; docs/user-guide/clusters.md) says, for G
groups of row blocks (one a worker, ``dpdist.pipelines.dp_gd.row_groups``) whose rows hold c_g
distinct columns: the flow sends each group's task the iterate on its c_g columns and gets back its
c_g sums, 8 sum(c_g) bytes each way, and nothing moves between the nodes. The scheduler runs G tasks
a step.

``tests/flows/test_slurm_multi_node.py`` runs the same measured run and checks it; this script
writes its numbers to ``benchmarks/results/cluster/<UTC date>-multi_node.md``. The fits' times
are the operator's (they go to this terminal and the results file, never to the run's report).

    .venv/bin/python benchmarks/multi_node.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
CLUSTER = Path("/var/lib/dpdist-slurm-multi")
SLURM_CONF = CLUSTER / "etc" / "slurm.conf"
SHARED = CLUSTER / "shared"
CONFIG = REPO / "deploy" / "slurm-multi-node.toml"
BRIDGE = "dpmn0"
LINK = re.compile(r"^Dask dashboard: (\S+)/status")
COMPUTING = re.compile(r"release dp-gd/\S+ under (\S+): computing")
COMPUTED = re.compile(r"release dp-gd/\S+ \(computed\) under (\S+):")


def slurm_env(**extra: str) -> dict[str, str]:
    """This process's environment with SLURM's commands pointed at the multi-node cluster."""
    return {**os.environ, "SLURM_CONF": str(SLURM_CONF), **extra}


def _slurm(*args: str, timeout: float = 60) -> str:
    r = subprocess.run(args, env=slurm_env(), capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def cluster_ready(nodes: int = 2, wait: float = 0) -> str | None:
    """None when the multi-node cluster has ``nodes`` idle nodes (within ``wait`` seconds), else why it
    cannot be used."""
    if not SLURM_CONF.is_file():
        return f"{SLURM_CONF} is missing (run `bash deploy/slurm-multi-node.sh start` as root)"
    if shutil.which("sinfo") is None:
        return "slurm is not installed here"
    deadline = time.time() + wait
    while True:
        try:
            states = _slurm("sinfo", "-h", "-N", "-o", "%N %T", timeout=30).split("\n")
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            return f"sinfo failed: {e}"
        if len([s for s in states if s.endswith((" idle", " mixed"))]) >= nodes:
            return None
        if time.time() > deadline:
            return f"fewer than {nodes} idle nodes (sinfo: {'; '.join(s for s in states if s)})"
        time.sleep(2)


def job_ids() -> set[str]:
    """The ids of every job the cluster's accounting knows."""
    out = _slurm("sacct", "-a", "-X", "-n", "-P", "-S", "now-7days", "-o", "JobID")
    return {line for line in out.split() if line}


def jobs(ids: set[str]) -> list[dict[str, str]]:
    """The accounting's rows (id, name, node, state) of the jobs ``ids``, as ``sacct`` prints them."""
    cols = ["JobID", "JobName", "NodeList", "State", "Elapsed"]
    out = _slurm("sacct", "-a", "-X", "-n", "-P", "-S", "now-7days", "-o", ",".join(cols))
    rows = [dict(zip(cols, line.split("|"), strict=True)) for line in out.splitlines() if line]
    return [r for r in rows if r["JobID"] in ids]


def counters() -> dict[str, tuple[int, int]]:
    """(received, sent) bytes of the bridge and of each node's veth end on the flow's side; a node's
    veth receives what the node sends and sends what the node receives."""
    out = {}
    for dev in sorted(Path("/sys/class/net").iterdir()):
        if dev.name == BRIDGE or dev.name.startswith("dpmn-n"):
            stats = dev / "statistics"
            out[dev.name] = (int((stats / "rx_bytes").read_text()), int((stats / "tx_bytes").read_text()))
    return out


def predicted_step_bytes(columns: list[int]) -> dict[str, float]:
    """The cost model of one full-batch DP-GD step over groups of row blocks whose rows hold ``columns``
    distinct columns each (module docstring): bytes out of and into the flow's host, between the nodes,
    the scheduler's tasks."""
    vec = 8.0 * sum(columns)
    return {"flow_out": vec, "flow_in": vec, "between": 0.0, "tasks": len(columns)}


def dp_gd_columns(store: Path, workers: int) -> list[int]:
    """The distinct columns of each group a DP-GD fit on ``store`` over ``workers`` workers makes
    (``dpdist.pipelines.dp_gd.row_groups``): an operator's measurement, on the benchmark's synthetic rows."""
    from dpdist.data.store import open_store
    from dpdist.pipelines.dp_gd import row_groups

    s = open_store(store)
    return [
        int(np.unique(np.concatenate([s.read_rows(r0, r1).indices for r0, r1 in ranges])).size)
        for ranges in row_groups(list(s.row_bounds()), workers)
    ]


def _tree_cpu(root: psutil.Process) -> float:
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


@dataclass
class Window:
    """Counters and the flow's CPU time at the start and the end of one DP-GD fit."""

    key: str
    start: dict[str, tuple[int, int]]
    cpu_start: float
    t_start: float
    end: dict[str, tuple[int, int]] = field(default_factory=dict)
    cpu_end: float = 0.0
    t_end: float = 0.0

    def bytes(self) -> dict[str, int]:
        """Bytes the flow's host sent to and received from the nodes, and the nodes between themselves."""
        delta = {k: (self.end[k][0] - self.start[k][0], self.end[k][1] - self.start[k][1]) for k in self.start}
        flow_in, flow_out = delta[BRIDGE]
        to_nodes = sum(tx for k, (_, tx) in delta.items() if k != BRIDGE)
        return {"flow_out": flow_out, "flow_in": flow_in, "between": to_nodes - flow_out}


@dataclass
class MultiNodeRun:
    """What one measured run of the main job on the multi-node cluster left."""

    returncode: int
    stdout: str
    stderr: str
    output: Path
    ledger: Path
    jobs: list[dict[str, str]]
    cancelled: dict[str, str] | None  # the job cancelled mid-run: its id and node
    window: Window | None  # the first DP-GD fit
    cancel_fit: str | None  # the release key of the fit during which the job was cancelled
    link: str | None = None  # the dashboard's address, as the run printed it
    dashboard: Any = None  # what ``on_dashboard`` returned
    columns: list[int] = field(default_factory=list)  # the distinct columns of each group of a DP-GD fit on two workers
    files: list[str] = field(default_factory=list)  # what the run wrote in its output
    models: list[dict[str, Any]] = field(default_factory=list)  # its models.json
    node_view: Any = None  # what a node sees of the run's files (the multi-node test's probe)

    def summary(self) -> dict[str, Any]:
        return json.loads(self.stdout) if self.returncode == 0 else {}

    def dp_gd_model(self, key: str) -> dict[str, Any]:
        return next(m for m in self.models if m["key"] == key)["result"]


def _cancel_one(before: set[str]) -> dict[str, str] | None:
    """``scancel`` a running worker job of this run (the newest); its id and node."""
    rows = [line.split() for line in _slurm("squeue", "-h", "-t", "R", "-o", "%i %N").splitlines() if line.strip()]
    mine = [r for r in rows if r[0] not in before]
    if not mine:
        return None
    job, node = max(mine, key=lambda r: int(r[0]))
    _slurm("scancel", job)
    return {"JobID": job, "NodeList": node}


def run_main_job(
    output: Path,
    ledger: Path,
    home: Path,
    cancel_at_fit: int | None = 2,
    on_dashboard: Callable[[str], Any] | None = None,
    timeout: float = 1500,
) -> MultiNodeRun:
    """``dpdist run deploy/slurm-multi-node.toml`` with ``output`` (in the shared directory) and ``ledger``
    (on the flow's side), measured as the module docstring says; ``on_dashboard(link)`` runs in a thread
    once the dashboard's link is printed."""
    env = slurm_env(
        PREFECT_HOME=str(home / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("PREFECT_API_URL", None)
    before = job_ids()
    err_path = home / "stderr.txt"
    cmd = [sys.executable, "-m", "dpdist.cli", "run", str(CONFIG), "--json", "-v"]
    cmd += ["--output", str(output), "--ledger", str(ledger)]
    with open(err_path, "w") as err_file, open(err_path) as err:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err_file, text=True)
        stdout: list[str] = []
        reader = threading.Thread(target=lambda: stdout.append(proc.stdout.read() if proc.stdout else ""))
        reader.start()
        root = psutil.Process(proc.pid)
        window: Window | None = None
        cancelled, cancel_fit, fits = None, None, 0
        seen: dict[str, Any] = {}
        watcher: threading.Thread | None = None
        deadline = time.time() + timeout
        buf = ""
        while True:
            chunk = err.read()
            if not chunk:
                if proc.poll() is not None:
                    break
                if time.time() > deadline:  # SIGTERM: dpdist run stops as on Ctrl-C, its flow and cluster with it
                    proc.terminate()
                    break
                time.sleep(0.05)
                continue
            buf += chunk
            *lines, buf = buf.split("\n")
            for line in lines:
                if (m := LINK.match(line)) and "link" not in seen:
                    seen["link"] = m.group(1)
                    if on_dashboard is not None:
                        watcher = threading.Thread(target=lambda u=m.group(1): seen.update(result=on_dashboard(u)))
                        watcher.start()
                elif m := COMPUTING.search(line):
                    fits += 1
                    if fits == 1:
                        window = Window(m.group(1), counters(), _tree_cpu(root), time.time())
                    if fits == cancel_at_fit:
                        cancelled, cancel_fit = _cancel_one(before), m.group(1)
                elif (m := COMPUTED.search(line)) and window is not None and m.group(1) == window.key:
                    window.end, window.cpu_end, window.t_end = counters(), _tree_cpu(root), time.time()
        proc.wait()
        reader.join()
    if watcher is not None:
        watcher.join(120)
    after: list[dict[str, str]] = []
    for _ in range(60):  # the accounting records the jobs' ends a moment after dask-jobqueue cancels them
        after = jobs(job_ids() - before)
        if after and not any(r["State"] in ("RUNNING", "PENDING") for r in after):
            break
        time.sleep(1)
    train = output / "stores" / "train"
    models = output / "models.json"
    return MultiNodeRun(
        proc.returncode,
        "".join(stdout),
        err_path.read_text(),
        output,
        ledger,
        after,
        cancelled,
        window if window is not None and window.end else None,
        cancel_fit,
        seen.get("link"),
        seen.get("result"),
        dp_gd_columns(train, 2) if train.is_dir() else [],
        sorted(p.name for p in output.iterdir()),
        json.loads(models.read_text()) if models.is_file() else [],
    )


def _fmt_bytes(n: float) -> str:
    return f"{n / 1e6:.3f} MB"


def main() -> int:
    from results_file import header, table, today, topic_dir

    reason = cluster_ready()
    if reason:
        print(f"the multi-node cluster cannot be used: {reason}", file=sys.stderr)
        return 2
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="dpdist-multi-node-") as home:  # the flow's side: ledger, Prefect home
        output = Path(tempfile.mkdtemp(prefix="bench-", dir=SHARED))
        try:
            run = run_main_job(output, Path(home) / "ledger.sqlite", Path(home))
            if run.returncode != 0 or run.window is None:
                print(run.stderr[-4000:], file=sys.stderr)
                return 1
            model = run.dp_gd_model(run.window.key)
        finally:
            shutil.rmtree(output, ignore_errors=True)
    steps, d, workers = int(model["iterations"]), int(model["n_features"]), 2
    got = {k: v / steps for k, v in run.window.bytes().items()}
    want = predicted_step_bytes(run.columns)
    seconds = (run.window.t_end - run.window.t_start) / steps
    cpu = (run.window.cpu_end - run.window.cpu_start) / steps
    rows = [
        ["bytes out of the flow's host", _fmt_bytes(want["flow_out"]), _fmt_bytes(got["flow_out"])],
        ["bytes into the flow's host", _fmt_bytes(want["flow_in"]), _fmt_bytes(got["flow_in"])],
        ["bytes between the nodes", _fmt_bytes(want["between"]), _fmt_bytes(got["between"])],
        ["scheduler tasks", str(want["tasks"]), f"{want['tasks'] / seconds:.0f} per second"],
        ["wall time", "", f"{seconds * 1e3:.1f} ms"],
        ["flow-side CPU (client, scheduler, noise)", "", f"{cpu * 1e3:.1f} ms"],
    ]
    nodes = sorted({r["NodeList"] for r in run.jobs})
    stages = re.findall(r"dpdist run: step (\w+) took ([\d.]+) s", run.stderr)
    md = header(
        "The main job on the multi-node SLURM cluster: one DP-GD step against its cost model",
        f"1 run of deploy/slurm-multi-node.toml on {len(nodes)} nodes ({', '.join(nodes)}), "
        f"{workers} worker jobs, one cancelled mid-run",
        load0,
    )
    md += [
        f"The first DP-GD fit: {steps} steps of a d = {d:,} iterate over {workers} workers and {len(run.columns)} "
        f"groups of row blocks holding {', '.join(f'{c:,}' for c in run.columns)} distinct columns (per step, "
        "the release's window on the run's stderr divided by its steps; the counters are the bridge's and the "
        "nodes' veth pairs').",
        "",
        *table(["per DP-GD step", "cost model", "measured"], rows),
        "",
        "The run's stages (the times `dpdist run -v` prints; the cancelled worker's replacement included):",
        "",
        *table(["stage", "seconds"], stages),
        "",
        "The run's SLURM jobs (`sacct`):",
        "",
        *table(["JobID", "JobName", "NodeList", "State", "Elapsed"], [list(r.values()) for r in run.jobs]),
        "",
        f"Cancelled mid-run: job {run.cancelled['JobID']} on {run.cancelled['NodeList']}, during the DP-GD "
        f"release {run.cancel_fit}; the run ended with exit {run.returncode}."
        if run.cancelled
        else "No job was cancelled.",
        "",
    ]
    path = topic_dir("cluster") / f"{today()}-multi_node.md"
    text = "\n".join(md)
    if path.exists():
        text = path.read_text() + "\n" + text
    path.write_text(text)
    print("\n".join(md))
    print(f"written to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
