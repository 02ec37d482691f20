"""Who can reach a running dpdist: sockets, TLS between client, scheduler and workers, file modes.

* a real ``dpdist run`` on a local cluster (with its temporary Prefect server) listens on
  loopback only, prints the dashboard link it really listens on, speaks TLS, and leaves raw
  data and privacy state owner-only under umask 0022 and 0000;
* the clusters dpdist starts (local) or joins (a ``tls://`` address) refuse peers without the
  run's credentials; the SLURM route's credentials and job scripts are owner-only files,
  removed after the run (the real SLURM run is in test_slurm.py).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import stat
import threading
import time
from pathlib import Path

import psutil
import pytest
from flow_helpers import (
    REPO,
    assert_refuses_strangers,
    flow_env,
    small_config,
    start_run,
    tls_cluster,
    write_config,
)

from dpdist.flows.config import ClusterConfig, load_config
from dpdist.flows.runtime import (
    LOOPBACK,
    _dashboard_link_template,
    client_dashboard_link,
    cluster_security,
    task_runner,
)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def open_to_others(root: Path) -> list[str]:
    paths = [root, *root.rglob("*")] if root.is_dir() else [root]
    return [f"{p} {mode(p):04o}" for p in paths if mode(p) & 0o077]


class Listeners:
    """Polls the listening sockets (TCP LISTEN, unconnected UDP) of a process tree until it ends,
    and the modes of the private paths it writes meanwhile (temporaries, -wal/-shm included)."""

    def __init__(self, pid: int, scratch: Path, private: list[Path]) -> None:
        self.root = psutil.Process(pid)
        self.scratch = scratch
        self.private = private  # directories to walk, or files (a glob pattern's parent and name)
        self.seen: set[tuple[str, int, str]] = set()  # (ip, port, process name)
        self.worker_dirs: dict[str, int] = {}  # Dask worker scratch directories and their modes
        self.modes: dict[str, int] = {}  # every private path seen while the run was writing
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while self.root.is_running() and self.root.status() != psutil.STATUS_ZOMBIE:
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                continue
            for p in procs:
                try:
                    for c in p.net_connections(kind="inet"):
                        if c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr):
                            self.seen.add((c.laddr.ip, c.laddr.port, " ".join(p.cmdline()[:4])))
                except psutil.Error:
                    pass
            for d in self.scratch.glob("**/worker-*"):
                try:
                    if d.is_dir():
                        self.worker_dirs[str(d)] = mode(d)
                except OSError:
                    pass
            for root in self.private:
                try:  # a directory may vanish while it is walked (a temporary renamed into place)
                    paths = [*root.parent.glob(root.name), *(root.rglob("*") if root.is_dir() else [])]
                except OSError:
                    continue
                for p in paths:
                    try:
                        self.modes[str(p)] = mode(p)
                    except OSError:  # gone meanwhile (a temporary renamed, a -wal checkpointed)
                        pass
            time.sleep(0.3)


@pytest.mark.slow
@pytest.mark.parametrize(
    "umask, own_server", [(0o000, True), (0o022, False)], ids=["umask0000-temporary-prefect-server", "umask0022"]
)
def test_local_run_listens_on_loopback_only_and_keeps_raw_data_private(
    prefect_server: dict, tmp_path: Path, umask: int, own_server: bool
) -> None:
    cfg = write_config(
        tmp_path, small_config(tmp_path, select={"methods": ["dp-sis"]}, train={"epsilon": [1.0], "iters": 200})
    )
    scratch = tmp_path / "dask-scratch"
    # with no PREFECT_API_URL the run starts its temporary Prefect server, in the process tree watched
    env = {**flow_env(tmp_path, None if own_server else prefect_server), "DASK_TEMPORARY_DIRECTORY": str(scratch)}
    proc = start_run(cfg, env, tmp_path, "--json", "-v", umask=umask)
    ledger = tmp_path / "ledger.sqlite"
    listeners = Listeners(proc.pid, scratch, [tmp_path / "out" / "stores", Path(f"{ledger}*")])
    stdout, stderr = proc.communicate(timeout=600)
    listeners.thread.join(10)
    assert proc.returncode == 0, stderr[-4000:]

    # sockets: the scheduler, its dashboard, nannies, workers and their HTTP servers, the Prefect
    # server: every one on loopback
    assert len({port for _, port, _ in listeners.seen}) >= 6 + own_server, listeners.seen
    assert not own_server or any("prefect" in cmd or "uvicorn" in cmd for *_, cmd in listeners.seen), listeners.seen
    off_loopback = [s for s in listeners.seen if not ipaddress.ip_address(s[0]).is_loopback]
    assert off_loopback == [], off_loopback
    # the printed dashboard link is where the dashboard really listens
    link = re.search(r"Dask dashboard: http://([\d.]+):(\d+)/status", stderr)
    assert link and (link.group(1), int(link.group(2))) in {(ip, port) for ip, port, _ in listeners.seen}
    # client, scheduler and workers speak TLS
    assert re.search(r"Scheduler at:\s+tls://127\.0\.0\.1:\d+", stderr) and "tcp://" not in stderr

    # files: raw data and privacy state owner-only; published outputs readable as the umask allows
    out = tmp_path / "out"
    assert (out / "stores" / "train").is_dir()
    assert [bad for p in [out / "stores", *tmp_path.glob("ledger.sqlite*")] for bad in open_to_others(p)] == []
    # ... and so was everything seen while the run wrote: the stores, the ledger's -wal/-shm, and each
    # store's temporary directory, 0700 from its creation (zarr creates the files inside it with the
    # umask's mode; they get 0600 before the rename). A temporary lives for moments only:
    # tests/utils/test_files.py checks it deterministically.
    assert any("/stores/" in p for p in listeners.modes)
    temporaries = {p: m for p, m in listeners.modes.items() if re.search(r"/\.[^/]*\.tmp-[0-9a-f]+$", p)}
    assert set(temporaries.values()) <= {0o700}, temporaries
    inside = {p for p in listeners.modes if re.search(r"/\.[^/]*\.tmp-[0-9a-f]+/", p)}
    assert {p: m for p, m in listeners.modes.items() if m & 0o077 and p not in inside} == {}
    assert listeners.worker_dirs and set(listeners.worker_dirs.values()) == {0o700}  # spilled rows stay private
    for name in ("report.md", "models.json", "selection.json", "privacy_utility.png"):
        assert mode(out / name) == 0o666 & ~umask, name
    assert not list(out.glob(".dask-tls-*")) and not list(out.glob("stores/.*"))  # nothing left behind


def test_local_cluster_speaks_tls_and_refuses_clients_without_the_runs_credentials(tmp_path: Path) -> None:
    cluster = ClusterConfig(n_workers=1)
    with cluster_security(cluster, tmp_path / "out") as security, task_runner(cluster, security) as runner:
        client = runner.client
        assert client.scheduler.address.startswith(f"tls://{LOOPBACK}:")
        client.wait_for_workers(1, timeout=60)
        assert all(w.startswith(f"tls://{LOOPBACK}:") for w in client.scheduler_info()["workers"])
        assert client.submit(lambda x: x + 1, 1).result() == 2  # the run's own client is accepted
        assert client.cluster.scheduler.http_server.address == LOOPBACK  # the dashboard too
        ca = tmp_path / "ca.pem"
        ca.write_text(security.tls_ca_file)  # a stranger may even trust the CA: still refused
        assert_refuses_strangers(client.scheduler.address, str(ca))


def test_insecure_opt_out_is_plain_tcp_still_on_loopback(tmp_path: Path) -> None:
    cluster = ClusterConfig(insecure=True)
    with cluster_security(cluster, tmp_path) as security:
        kw = task_runner(cluster, security).cluster_kwargs
    assert security is None and "security" not in kw and kw["host"] == LOOPBACK
    assert kw["dashboard_address"] == f"{LOOPBACK}:0"


def test_address_cluster_joins_a_tls_scheduler_with_the_configs_credentials(tmp_path: Path) -> None:
    with tls_cluster(tmp_path / "tls") as (lc, creds):
        cfg = load_config(overrides={"cluster": {"kind": "address", "address": lc.scheduler_address, **creds}})
        with cluster_security(cfg.cluster, cfg.output) as security, task_runner(cfg.cluster, security) as runner:
            assert runner.client.submit(lambda x: 2 * x, 21).result() == 42
        assert_refuses_strangers(lc.scheduler_address, creds["tls_ca_file"])


def test_slurm_credentials_and_job_scripts_are_owner_only_and_removed(tmp_path: Path) -> None:
    # no SLURM needed: the cluster object starts its scheduler; no job is submitted
    from dask_jobqueue import SLURMCluster

    cluster = ClusterConfig(kind="slurm", n_workers=1, jobqueue=str(REPO / "deploy" / "jobqueue.yaml"))
    old = os.umask(0)  # the most permissive umask: nothing below may depend on it
    try:
        with cluster_security(cluster, tmp_path / "out") as security:
            tls_dir = Path(security.tls_ca_file).parent
            assert tls_dir.parent == (tmp_path / "out").resolve() and mode(tls_dir) == 0o700
            assert sorted(p.name for p in tls_dir.iterdir()) == ["ca.pem", "worker.key", "worker.pem"]
            assert {mode(p) for p in tls_dir.iterdir()} == {0o600}
            kw = task_runner(cluster, security).cluster_kwargs
            with SLURMCluster(**kw) as sc:
                assert sc.scheduler.address.startswith("tls://")
                assert sc.scheduler.http_server.address == LOOPBACK  # dashboard on loopback
                script = sc.job_script()
                assert "tls://" in script and "PRIVATE KEY" not in script  # paths only, never the key
                assert f"--tls-key {tls_dir / 'worker.key'}" in script
                assert "--dashboard-address 127.0.0.1:0" in script
                with sc._dummy_job.job_file() as fn:
                    assert mode(Path(fn)) == 0o600 and Path(fn).read_text() == script
    finally:
        os.umask(old)
    assert not tls_dir.exists()


@pytest.mark.parametrize("where", [f"{LOOPBACK}:0", ":0"])
def test_printed_dashboard_link_is_where_the_dashboard_listens(where: str) -> None:
    import dask
    from distributed import Client, LocalCluster

    cluster = ClusterConfig(dashboard_address=where)
    with (
        dask.config.set(_dashboard_link_template(cluster)),
        LocalCluster(n_workers=0, processes=False, protocol="tcp://", host=LOOPBACK, dashboard_address=where) as lc,
        Client(lc) as client,
    ):
        port = lc.scheduler.http_server.port
        with socket.create_connection((LOOPBACK, port), timeout=5):
            pass
        if where.startswith(":"):  # asked for every interface: the link says so instead of naming loopback
            assert lc.scheduler.http_server.address == "0.0.0.0"
            assert (
                client_dashboard_link(client) == f"http://{socket.getfqdn()}:{port}/status "
                "(listening on all interfaces)"
            )
        else:
            assert client_dashboard_link(client) == client.dashboard_link == f"http://{LOOPBACK}:{port}/status"
