"""Helpers of the flow tests: run configs, `dpdist` subprocesses, TLS credentials, Prefect's stored logs.

A module of its own, not the conftest: pytest imports every folder's conftest.py as the one module
``conftest`` (each replacing the last), so ``from conftest import`` inside a test finds whichever
folder's conftest was imported last on that worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dpdist.privacy.accountant import Accountant

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def small_config(tmp: Path, **sections: Any) -> dict[str, Any]:
    """A run config small enough for a test: 6,000 x 2,000 RCV1-profile rows, 2 local workers.

    Half the records are held out, and the row counts are released with little epsilon: the
    halves' exact sizes (about 3,000 each) then appear in no published output, and are larger
    than every feature index, so a scan for them cannot hit one by chance.
    """
    cfg: dict[str, Any] = {
        "name": "t",
        "output": str(tmp / "out"),
        "seed": 7,
        "data": {"source": "synth", "name": "rcv1", "n": 6000, "d": 2000, "test_fraction": 0.5, "count_epsilon": 0.001},
        "budget": {"epsilon": 10.0, "delta": 1e-6},
        "cluster": {"kind": "local", "n_workers": 2},
        "select": {"methods": ["dp-sis", "two-stage"], "k": 5, "epsilon": 0.5},
        "train": {"methods": ["fast-dp-fw"], "epsilon": [1.0, 2.0], "lam": 500.0, "iters": 300},
        "evaluate": {"epsilon": 0.1},
    }
    for name, value in sections.items():
        cfg[name] = {**cfg[name], **value} if isinstance(value, dict) and isinstance(cfg.get(name), dict) else value
    return cfg


def write_config(tmp: Path, cfg: dict[str, Any], name: str = "run.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def flow_env(tmp: Path, server: dict[str, str] | None) -> dict[str, str]:
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp / "prefect-client"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "DPDIST_LEDGER": str(tmp / "ledger.sqlite"),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PREFECT_API_URL", None)
    if server is not None:
        env["PREFECT_API_URL"] = server["url"]
    return env


def dpdist(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dpdist.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def start_run(cfg: Path, env: dict[str, str], cwd: Path, *args: str, **popen: Any) -> subprocess.Popen:
    """``dpdist run CFG *args`` started in a child process, its stdout and stderr piped as text (``popen``:
    the child's other settings: its session, umask)."""
    return subprocess.Popen(
        [sys.executable, "-m", "dpdist.cli", "run", str(cfg), *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Stop ``proc`` by ``sig`` (SIGINT as Ctrl-C stops it), killed if it has not exited in ``timeout`` s."""
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def only_dataset(tmp: Path) -> str:
    """The content hash of the one dataset in the test's ledger (ledger internals)."""
    (status,) = Accountant(tmp / "ledger.sqlite").datasets()
    return status.dataset


def tls_credentials(directory: Path) -> dict[str, str]:
    """A fresh CA certificate and key (one self-signed pair, as ``Security.temporary`` makes) written
    owner-only to ``directory``: the run-config keys of a TLS ``address`` cluster."""
    from distributed.security import Security

    directory.mkdir(parents=True, exist_ok=True)
    tmp = Security.temporary()
    paths = {"tls_ca_file": directory / "ca.pem", "tls_cert": directory / "cert.pem", "tls_key": directory / "key.pem"}
    for key, pem in (
        ("tls_ca_file", tmp.tls_ca_file),
        ("tls_cert", tmp.tls_client_cert),
        ("tls_key", tmp.tls_client_key),
    ):
        paths[key].write_text(pem)
        paths[key].chmod(0o600)
    return {k: str(v) for k, v in paths.items()}


def tls_security(creds: dict[str, str]):
    """The ``Security`` of a scheduler, its workers and its clients from :func:`tls_credentials`."""
    from distributed.security import Security

    return Security(
        require_encryption=True,
        tls_ca_file=creds["tls_ca_file"],
        **{
            f"tls_{role}_{part}": creds[f"tls_{part}"]
            for role in ("scheduler", "worker", "client")
            for part in ("cert", "key")
        },
    )


@contextlib.contextmanager
def tls_cluster(directory: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    """A user's own TLS scheduler with one worker process, on loopback: the ``LocalCluster`` and the
    credentials (:func:`tls_credentials`, written to ``directory``) a run config joins it with."""
    from distributed import LocalCluster

    from dpdist.flows.runtime import LOOPBACK

    creds = tls_credentials(directory)
    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host=LOOPBACK,
        dashboard_address=f"{LOOPBACK}:0",
        security=tls_security(creds),
    ) as cluster:
        yield cluster, creds


def assert_refuses_strangers(address: str, ca_file: str) -> None:
    """The scheduler at ``address`` (``tls://``) refuses every peer without the cluster's credentials:
    a Dask client that trusts the cluster's CA but presents its own certificate, a Dask client on
    plain TCP, and a bare TLS handshake with no client certificate."""
    from distributed import Client
    from distributed.security import Security

    assert address.startswith("tls://"), address
    stranger = Security.temporary()
    impostor = Security(
        require_encryption=True,
        tls_ca_file=ca_file,
        tls_client_cert=stranger.tls_client_cert,
        tls_client_key=stranger.tls_client_key,
    )
    with pytest.raises(OSError):
        Client(address, security=impostor, timeout="5s")
    with pytest.raises(OSError):
        Client("tcp://" + address.removeprefix("tls://"), timeout="5s")
    host, port = address.removeprefix("tls://").rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # trusts anything, shows no certificate
    with socket.create_connection((host.strip("[]"), int(port)), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with ctx.wrap_socket(raw) as conn:
                conn.sendall(b"\0" * 8)
                conn.recv(8)


def prefect_cli(
    args: list[str], env: dict[str, str], cwd: Path = REPO, timeout: float = 120
) -> subprocess.CompletedProcess:
    """The `prefect` command, with a terminal wide enough that its tables do not cut names."""
    return subprocess.run(
        [sys.executable, "-m", "prefect", *args],
        env={**env, "COLUMNS": "250"},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ledger_keys(tmp: Path) -> list[str]:
    acc = Accountant(tmp / "ledger.sqlite")
    return [r.key for s in acc.datasets() for r in acc.history(s.dataset)]


def stored_logs(url: str) -> list[dict]:
    """Every log line the Prefect server stored (read back through its API, as its UI shows them)."""
    logs: list[dict] = []
    while True:
        req = urllib.request.Request(
            f"{url}/logs/filter",
            method="POST",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"limit": 200, "offset": len(logs)}).encode(),
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            page = json.loads(resp.read())
        logs += page
        if len(page) < 200:
            return logs


def run_models(output: Path) -> list[dict[str, Any]]:
    """A run's ``models.json`` whole: each model's weights read from its artefact in the output, the digest
    checked (``dpdist.flows.results.write_models``)."""
    from dpdist.released import model_result

    return [{**m, "result": model_result(m)} for m in json.loads((output / "models.json").read_text())]
