"""Fixtures of the flow tests: a real Prefect server on loopback (helpers in flow_helpers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest
from flow_helpers import free_port, stop


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """`prefect server start` on 127.0.0.1 with its own PREFECT_HOME; yields its API URL and home."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    # the port through the setting, not only --port: the UI's API address is built from the setting
    # (with --port alone the UI served here would call 127.0.0.1:4200)
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_API_PORT": str(port),
    }
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.time() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    yield {"url": url, "home": str(home)}
    stop(proc)
    log.close()
