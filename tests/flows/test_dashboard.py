"""The Dask dashboard as its user meets it: the link ``dpdist run`` prints, opened in headless Chromium
while the run goes on, serves Dask's status page with the task stream of the run's named tasks.

Without Bokeh (what ``distributed``'s dashboard needs) that page only said "Dask needs bokeh>=3.1.0
for the dashboard".
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser import Chromium, find_chromium
from flow_helpers import flow_env, small_config, stop, write_config

pytestmark = pytest.mark.slow

LINK = re.compile(r"^Dask dashboard: (http://127\.0\.0\.1:\d+/status)$", re.M)


def task_stream(sources: list[dict[str, list]]) -> list[dict[str, list]]:
    """The task stream's data sources among a dashboard page's Bokeh sources (one rectangle a task)."""
    return [s for s in sources if {"name", "key", "duration", "worker_thread"} <= s.keys()]


def watch_tasks(browser: Chromium, proc: subprocess.Popen, wanted: set[str], timeout: float) -> set[str]:
    """The task names (Dask's key prefixes) the open status page's task stream shows, gathered as it
    streams, until ``wanted`` are all seen, the run ends or ``timeout`` passes."""
    seen: set[str] = set()
    deadline = time.time() + timeout
    while not wanted <= seen and proc.poll() is None and time.time() < deadline:
        for source in task_stream(browser.bokeh_sources()):
            seen.update(source["name"])
        time.sleep(0.5)
    return seen


def wait_for_link(proc: subprocess.Popen, stderr: Path, timeout: float = 300) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if m := LINK.search(stderr.read_text()):
            return m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    pytest.fail(f"no dashboard link printed: {stderr.read_text()[-3000:]}")


def test_the_printed_dashboard_link_serves_the_task_stream_during_the_run(prefect_server: dict, tmp_path: Path) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (`apt-get install chromium` as root; .ci/run installs it)")
    cfg = write_config(
        tmp_path, small_config(tmp_path, select={"methods": []}, train={"methods": ["dp-sgd"], "epsilon": [1.0]})
    )
    err = tmp_path / "stderr.txt"
    with open(err, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dpdist.cli", "run", str(cfg), "--json"],
            env=flow_env(tmp_path, prefect_server),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=f,
        )
    try:
        link = wait_for_link(proc, err)
        with Chromium(chromium) as browser:
            page = browser.visit(link, ["Status", "Workers", "Tasks"], timeout=60, settle=1)
            assert "needs bokeh" not in page.text, page.text[:400]
            assert page.problems() == [], page.problems()
            deadline = time.time() + 120  # the page's Bokeh document arrives over its websocket after the page
            while not task_stream(browser.bokeh_sources()) and time.time() < deadline:
                time.sleep(0.5)
            assert task_stream(browser.bokeh_sources()), "no task stream on the status page"
            wanted = {"ingest-source", "train-dp-sgd", "evaluate-dp-sgd"}
            seen = watch_tasks(browser, proc, wanted, timeout=600)
            assert wanted <= seen, f"the task stream showed {sorted(seen)}; the run: {err.read_text()[-3000:]}"
            # no Prefect task runs on a worker (a worker elsewhere cannot reach the flow's Prefect server)
            assert "make_source" not in seen and "split" not in seen, sorted(seen)
        assert proc.wait(600) == 0, err.read_text()[-4000:]
    finally:
        if proc.poll() is None:  # SIGTERM: dpdist run stops as on Ctrl-C, its flow process and workers with it
            stop(proc, timeout=120)
