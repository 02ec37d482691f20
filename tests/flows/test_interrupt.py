"""Ctrl-C and SIGTERM during `dpdist run`: an orderly stop, exit 130, a few lines, nothing half-written."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from flow_helpers import flow_env, small_config, start_run, write_config

from dpdist.privacy.accountant import Accountant

pytestmark = pytest.mark.slow


def _run_until_released(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    """Start `dpdist run` as a terminal would (its own process group) and wait for its first release."""
    cfg = write_config(
        tmp_path, small_config(tmp_path, data={"n": 20000}, train={"epsilon": [1.0, 2.0, 3.0], "iters": 3000})
    )
    proc = start_run(cfg, flow_env(tmp_path, None), tmp_path, start_new_session=True)
    ledger = tmp_path / "ledger.sqlite"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if ledger.exists() and any(Accountant(ledger).history(s.dataset) for s in Accountant(ledger).datasets()):
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    family = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    assert len(family) >= 3  # the supervised run, the Prefect server, the Dask workers
    return proc, family


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupted_run_stops_in_order_and_exits_130(tmp_path: Path, how: str) -> None:
    proc, family = _run_until_released(tmp_path)
    t0 = time.time()
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does: the whole foreground process group
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    took = time.time() - t0
    assert proc.returncode == 130, err[-3000:]
    assert took < 60, f"stopping took {took:.0f} s"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if "dpdist run: interrupted" in ln)
    # a few lines (the notice, and the crash notes of tasks the workers were running), no tracebacks
    assert len(lines) - start <= 8, "\n".join(lines[start:])
    assert "Traceback" not in err and "ConnectError" not in err
    alive = [pid for pid in family if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    assert not alive, f"processes left behind: {alive}"
    stores = tmp_path / "out" / "stores"
    assert not list(stores.glob(".*")) if stores.exists() else True  # no half-written store temporaries
    # the releases before the interruption stand, whole: every charge has its recorded result
    acc = Accountant(tmp_path / "ledger.sqlite")
    (status,) = acc.datasets()
    assert status.releases >= 1
