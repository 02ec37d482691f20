"""The end-to-end flow on a real SLURM cluster through dask-jobqueue, over TLS.

CI starts the single-node cluster with deploy/slurm-single-node.sh (as root). Where slurm
cannot be installed or started, the tests are skipped and say why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from flow_helpers import REPO, assert_refuses_strangers, dpdist, flow_env, ledger_keys, small_config, write_config

from dpdist.flows.config import ClusterConfig
from dpdist.flows.runtime import LOOPBACK, cluster_security, task_runner
from dpdist.privacy.accountant import Accountant

# one xdist worker runs every test that submits SLURM jobs (one single-node cluster), and this
# module's fixtures once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def _slurm_ready() -> str | None:
    """None when a SLURM partition has an idle node, else the reason it cannot be used."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "slurm is not installed here (run `bash deploy/slurm-single-node.sh start` as root)"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"sinfo failed: {e}"
    if states.returncode != 0 or not any(s.startswith(("idle", "mix")) for s in states.stdout.split()):
        return f"no idle SLURM node (sinfo: {states.stdout.strip() or states.stderr.strip()})"
    return None


def test_end_to_end_flow_on_slurm_workers(prefect_server: dict, tmp_path: Path) -> None:
    reason = _slurm_ready()
    if reason:
        pytest.skip(f"SLURM unavailable: {reason}")
    cfg = write_config(
        tmp_path,
        small_config(
            tmp_path,
            cluster={"kind": "slurm", "n_workers": 2, "jobqueue": str(REPO / "deploy" / "jobqueue.yaml")},
            select={"methods": ["dp-sis", "two-stage"]},
            train={"epsilon": [1.0]},
        ),
    )
    before = subprocess.run(["sacct", "-n", "-X", "-o", "JobID"], capture_output=True, text=True).stdout.split()
    r = dpdist(["run", str(cfg), "--json", "-v"], flow_env(tmp_path, prefect_server), tmp_path, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "SLURMCluster" in r.stderr  # the task runner built the jobqueue cluster
    out = json.loads(r.stdout)
    keys = ledger_keys(tmp_path)
    assert len(keys) == len(set(keys)) == 5  # counts, 2 selections, the model and its evaluation
    acc = Accountant(tmp_path / "ledger.sqlite")
    assert acc.status(acc.resolve(out["dataset"])).releases == len(ledger_keys(tmp_path))
    assert Path(out["report"]).exists()
    assert not list((tmp_path / "out").glob(".dask-tls-*"))  # the run's worker credentials are gone
    after = subprocess.run(["sacct", "-n", "-X", "-o", "JobID"], capture_output=True, text=True).stdout.split()
    if before or after:  # accounting may be off on a minimal slurm.conf; when on, our worker jobs show
        assert len(set(after) - set(before)) >= 1


def test_slurm_workers_speak_tls_and_the_scheduler_refuses_strangers(tmp_path: Path) -> None:
    reason = _slurm_ready()
    if reason:
        pytest.skip(f"SLURM unavailable: {reason}")
    cluster = ClusterConfig(kind="slurm", n_workers=1, jobqueue=str(REPO / "deploy" / "jobqueue.yaml"))
    with cluster_security(cluster, tmp_path / "out") as security, task_runner(cluster, security) as runner:
        client = runner.client
        client.wait_for_workers(1, timeout=300)
        address = client.scheduler.address
        workers = list(client.scheduler_info()["workers"])
        assert address.startswith("tls://") and workers and all(w.startswith("tls://") for w in workers)
        assert client.submit(lambda x: x + 1, 1, resources={"solver": 1}).result() == 2  # a worker job computes
        assert client.cluster.scheduler.http_server.address == LOOPBACK  # the dashboard stays on loopback
        assert_refuses_strangers(address, security.tls_ca_file)
        tls_dir = Path(security.tls_ca_file).parent
    assert not tls_dir.exists()
