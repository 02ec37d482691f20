"""The main job on a real multi-node SLURM cluster: `dpdist run deploy/slurm-multi-node.toml` with its Dask
workers started by dask-jobqueue as SLURM jobs on nodes of their own, one of them cancelled mid-run.

CI starts the cluster with deploy/slurm-multi-node.sh (as root): slurmctld and slurmdbd on the flow's side,
one slurmd per network namespace (dpdist-node1, dpdist-node2, each its own address on a bridge, its own
hostname and /tmp), sharing the network and the directory of the stores. Where it is not running, the
tests are skipped and say why. One measured run (benchmarks/multi_node.py, which writes the same
measurements to a dated results file) serves every test here:

* its workers ran on >= 2 distinct nodes (sacct), and every party spoke TLS;
* a worker job cancelled (scancel) while a DP-GD release computes over both nodes is survived: the run
  ends well and the ledger holds each planned release once, its spend the plan's;
* the ledger stays on the flow's side (a node cannot see it), the stores in the shared directory;
* the dashboard's Workers page lists the workers of both nodes (headless Chromium);
* a DP-GD step moves the bytes the cost model of docs/user-guide/clusters.md says.
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from browser import Chromium, find_chromium
from flow_helpers import REPO

from dpdist.privacy.accountant import Accountant

sys.path.insert(0, str(REPO / "benchmarks"))
import multi_node as mn  # noqa: E402

# its own xdist group: the multi-node cluster runs beside the single-node one (test_slurm.py's group)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm-multi")]

NODE_ADDRESS = re.compile(r"^dpdist-node(\d+)$")


def node_address(node: str) -> str:
    """A node's address on the bridge (deploy/slurm-multi-node.sh: dpdist-node<i> is 10.213.57.<10 + i>)."""
    m = NODE_ADDRESS.match(node)
    assert m, node
    return f"10.213.57.{10 + int(m.group(1))}"


def workers_on_dashboard(chromium: str, base: str, timeout: float = 300) -> dict:
    """The worker addresses the dashboard's Workers page lists once it lists two hosts (or ``timeout``)."""
    with Chromium(chromium) as browser:
        page = browser.visit(f"{base}/workers", ["Workers"], timeout=60, settle=1)
        addresses: set[str] = set()
        deadline = time.time() + timeout
        while time.time() < deadline:
            for source in browser.bokeh_sources():
                if {"address", "nthreads", "memory"} <= source.keys():
                    addresses.update(a for a in source["address"] if isinstance(a, str) and "://" in a)
            if len({a.split("://")[1].rsplit(":", 1)[0] for a in addresses}) >= 2:
                break
            time.sleep(1)
    return {"addresses": sorted(addresses), "problems": page.problems(), "text": page.text[:300]}


def _measure(tmp_path_factory: pytest.TempPathFactory) -> mn.MultiNodeRun | str:
    """The measured run (or why it cannot run), with what a node sees of the flow's and the shared files,
    looked at before its output (in the shared directory) is removed."""
    reason = mn.cluster_ready(wait=120)  # the nodes of a run just ended may still be releasing its jobs
    if reason:
        return reason
    home = tmp_path_factory.mktemp("multi-node")  # the flow's side, in its /tmp: no node sees it
    output = Path(tempfile.mkdtemp(prefix="test-", dir=mn.SHARED))  # the stores, where the nodes read them
    chromium = find_chromium()
    try:
        run = mn.run_main_job(
            output,
            home / "ledger.sqlite",
            home,
            cancel_at_fit=2,
            on_dashboard=(lambda base: workers_on_dashboard(chromium, base)) if chromium else None,
        )
        nodes = sorted({r["NodeList"] for r in run.jobs if NODE_ADDRESS.match(r["NodeList"])})
        if nodes:  # a node's view: the ledger, the stores
            run.node_view = subprocess.run(
                ["srun", "-N1", "-w", nodes[0], "sh", "-c", 'test -e "$1" && echo ledger; test -d "$2" && echo stores']
                + ["probe", str(run.ledger), str(output / "stores" / "train")],
                env=mn.slurm_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
        return run
    finally:
        shutil.rmtree(output, ignore_errors=True)


@pytest.fixture(scope="session")
def measured(tmp_path_factory: pytest.TempPathFactory) -> mn.MultiNodeRun:
    """One measured run for the session: made by the first test process that asks, under a lock, and read by
    any other from the session's shared temporary directory (``--dist loadgroup`` keeps this module's tests in
    one process; a plain ``-n 2`` would spread them)."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if uid is None:
        run = _measure(tmp_path_factory)
    else:
        shared = tmp_path_factory.getbasetemp().parent
        with open(shared / f"multi-node-{uid}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            cache = shared / f"multi-node-{uid}.pickle"
            if cache.exists():
                run = pickle.loads(cache.read_bytes())
            else:
                run = _measure(tmp_path_factory)
                cache.write_bytes(pickle.dumps(run))
    if isinstance(run, str):
        pytest.skip(f"the multi-node SLURM cluster is unavailable: {run}")
    return run


def _sacct_lines(run: mn.MultiNodeRun) -> str:
    return "\n".join(" ".join(r.values()) for r in run.jobs)


def test_the_main_job_runs_its_workers_on_two_nodes(measured: mn.MultiNodeRun) -> None:
    assert measured.returncode == 0, measured.stderr[-4000:]
    assert "SLURMCluster" in measured.stderr  # the task runner built the jobqueue cluster
    workers = [r for r in measured.jobs if r["JobName"].startswith("dask-work")]
    nodes = {r["NodeList"] for r in workers}
    assert len(nodes) >= 2 and all(NODE_ADDRESS.match(n) for n in nodes), _sacct_lines(measured)
    assert {"report.md", "models.json", "stores"} <= set(measured.files)


def test_every_party_speaks_tls(measured: mn.MultiNodeRun) -> None:
    # the scheduler on the flow's side of the bridge, the workers on their nodes' addresses
    assert re.search(r"Scheduler at:\s+tls://10\.213\.57\.1:\d+", measured.stderr), measured.stderr[-3000:]
    workers = set(re.findall(r"Register worker addr: tls://(10\.213\.57\.\d+):\d+", measured.stderr))
    assert len(workers) >= 2 and "10.213.57.1" not in workers, workers
    assert "tcp://" not in measured.stderr
    assert not [f for f in measured.files if f.startswith(".dask-tls-")]  # the run's worker credentials are gone


def test_a_worker_cancelled_mid_run_is_survived_with_nothing_charged_twice(
    measured: mn.MultiNodeRun, tmp_path: Path
) -> None:
    assert measured.returncode == 0, measured.stderr[-4000:]
    assert measured.cancelled is not None, "no worker job was running at the second DP-GD fit"
    job = next(r for r in measured.jobs if r["JobID"] == measured.cancelled["JobID"])
    assert job["State"].startswith("CANCELLED"), _sacct_lines(measured)
    # the job was cancelled while a DP-GD release computed on both nodes: its worker was lost inside it
    err = measured.stderr
    start = err.index(f"under {measured.cancel_fit}: computing")
    lost = err.find(f"Remove worker addr: tls://{node_address(measured.cancelled['NodeList'])}:", start)
    done = err.index(f"(computed) under {measured.cancel_fit}:", start)
    assert start < lost < done, err[start : done + 200]
    # a new worker job replaced it: more worker jobs than the cluster's two
    assert len([r for r in measured.jobs if r["JobName"].startswith("dask-work")]) >= 3, _sacct_lines(measured)
    # the ledger holds each planned release once, and spent what the plan says a fresh run spends
    plan = subprocess.run(
        [sys.executable, "-m", "dpdist.cli", "run", str(mn.CONFIG), "--plan", "--json"]
        + ["--ledger", str(tmp_path / "fresh.sqlite")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plan.returncode == 0, plan.stderr[-2000:]
    planned = json.loads(plan.stdout)["plan"]
    acc = Accountant(measured.ledger)
    (status,) = acc.datasets()
    keys = [r.key for r in acc.history(status.dataset)]
    assert len(keys) == len(set(keys)) == len(planned["releases"]) == status.releases
    assert status.epsilon_spent == pytest.approx(planned["epsilon_after"], rel=1e-9)
    assert status.epsilon_basic == pytest.approx(planned["epsilon_basic"], rel=1e-9)
    summary = measured.summary()
    assert sorted(k for s in summary["steps"] for k in s.get("releases", [])) == sorted(keys)


def test_the_ledger_stays_on_the_flows_side_and_the_stores_are_shared(measured: mn.MultiNodeRun) -> None:
    assert measured.returncode == 0, measured.stderr[-4000:]
    probe = measured.node_view
    assert probe is not None and probe.returncode == 0, probe
    assert probe.stdout.split() == ["stores"]  # a node reads the stores; the ledger is not there for it
    assert measured.ledger.is_file()


def test_the_dashboard_lists_the_workers_of_both_nodes(measured: mn.MultiNodeRun) -> None:
    assert measured.link and re.match(r"http://127\.0\.0\.1:\d+$", measured.link), measured.link  # on loopback
    if find_chromium() is None:
        pytest.skip("chromium is not installed (`apt-get install chromium` as root; .ci/run installs it)")
    seen = measured.dashboard
    assert seen is not None, "the dashboard was not opened"
    hosts = {a.split("://")[1].rsplit(":", 1)[0] for a in seen["addresses"]}
    nodes = {node_address(r["NodeList"]) for r in measured.jobs if NODE_ADDRESS.match(r["NodeList"])}
    assert len(hosts) >= 2 and hosts <= nodes, seen
    assert seen["problems"] == [], seen


def test_a_dp_gd_step_moves_what_the_cost_model_says(measured: mn.MultiNodeRun) -> None:
    assert measured.window is not None, "the first DP-GD fit was not seen"
    model = measured.dp_gd_model(measured.window.key)
    steps = int(model["iterations"])
    got = {k: v / steps for k, v in measured.window.bytes().items()}
    assert len(measured.columns) >= 2  # the rows are spread: a group on each node
    want = mn.predicted_step_bytes(measured.columns)
    # the vectors, plus what carries them (TCP/IP and TLS framing, Dask's messages): at most half again
    assert want["flow_out"] <= got["flow_out"] <= 1.5 * want["flow_out"], (got, want)
    assert want["flow_in"] <= got["flow_in"] <= 1.5 * want["flow_in"], (got, want)
    # nothing between the nodes: a tenth of one direction's vectors would be a group's sum or iterate moved
    assert got["between"] <= 0.1 * want["flow_out"], (got, want)
