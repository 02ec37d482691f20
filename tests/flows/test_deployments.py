"""Scheduled deployments as a user runs them, against a real Prefect server on loopback.

What `deploy/prefect.yaml`'s header tells a user to do, through the `prefect` CLI: create the
process work pool, `prefect deploy --prefect-file deploy/prefect.yaml --all`, list deployments
and flow runs, start a worker, run the nightly deployment (with a small run config as a
run-time parameter) and see it Completed with its releases in the ledger; then the Prefect UI
(V2, where the server's front page leads, and the V1 pages the CLI links to) in headless
Chromium, with no API error. One server, one worker and one nightly run serve every test here.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from browser import Chromium, find_chromium
from flow_helpers import REPO, flow_env, ledger_keys, prefect_cli, small_config, stop, write_config
from test_slurm import _slurm_ready

from dpdist.privacy.accountant import Accountant

# one xdist worker runs every test that submits SLURM jobs (one single-node cluster), and this
# module's fixtures once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]

POOL = "dpdist-local"  # the work pool deploy/prefect.yaml names


def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(
        url, method="POST", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()[:2000]


def _ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"{r.args[3:]} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def deployed(prefect_server: dict, tmp_path_factory: pytest.TempPathFactory):
    """The work pool, both deployments of deploy/prefect.yaml and a process worker on the pool."""
    tmp = tmp_path_factory.mktemp("deployments")
    env = {**flow_env(tmp, prefect_server), "DPDIST_HOME": str(REPO)}
    _ok(prefect_cli(["work-pool", "create", POOL, "--type", "process"], env))
    out = _ok(prefect_cli(["--no-prompt", "deploy", "--prefect-file", "deploy/prefect.yaml", "--all"], env))
    log = open(tmp / "worker.log", "w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL],
        env={**env, "PREFECT_WORKER_QUERY_SECONDS": "2"},
        cwd=tmp,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield {"env": env, "tmp": tmp, "deploy_output": out, "worker_log": tmp / "worker.log"}
    finally:
        stop(worker, signal.SIGINT)
        log.close()


def _run_deployment(deployed: dict, name: str, config: Path, timeout: int = 600) -> tuple[str, str]:
    """`prefect deployment run NAME --param config=... --watch`; returns (flow run id, CLI output)."""
    r = prefect_cli(
        ["deployment", "run", name, "--param", f"config={config}", "--watch", "--watch-timeout", str(timeout)],
        deployed["env"],
        timeout=timeout + 60,
    )
    assert r.returncode == 0, (
        f"{r.stdout[-3000:]}\n{r.stderr[-2000:]}\nworker log:\n{deployed['worker_log'].read_text()[-4000:]}"
    )
    assert "Flow run finished successfully in 'Completed'" in r.stdout
    (run_id,) = set(re.findall(r"UUID: ([0-9a-f-]{36})", r.stdout))
    return run_id, r.stdout


@pytest.fixture(scope="module")
def nightly_run(deployed: dict) -> dict[str, Any]:
    """One run of the nightly deployment on the worker, with a small config given at run time."""
    tmp = deployed["tmp"]
    cfg = write_config(tmp, small_config(tmp, select={"methods": ["dp-sis"]}, train={"epsilon": [1.0]}))
    run_id, out = _run_deployment(deployed, "dpdist-end-to-end/nightly-demo", cfg)
    return {"id": run_id, "output": out, "tmp": tmp}


def test_null_optional_fields_are_accepted_by_the_api(prefect_server: dict) -> None:
    # issue 18: under fastapi 0.151-0.154 the server answered 422 to explicit nulls, which the CLI
    # and the UI send for every optional filter field
    url = prefect_server["url"]
    for path, body in [
        ("deployments/filter", {"limit": None, "sort": None}),
        ("flow_runs/filter", {"limit": None, "sort": None, "offset": 0}),
        ("work_pools/filter", {"limit": None}),
    ]:
        status, answer = _post(f"{url}/{path}", body)
        assert status == 200 and isinstance(answer, list), (path, status, answer)


def test_deploy_creates_both_deployments_and_the_cli_lists_them(deployed: dict, prefect_server: dict) -> None:
    assert "dpdist-end-to-end/nightly-demo" in deployed["deploy_output"]
    assert "dpdist-end-to-end/weekly-slurm" in deployed["deploy_output"]
    listed = _ok(prefect_cli(["deployment", "ls"], deployed["env"]))
    assert "dpdist-end-to-end/nightly-demo" in listed and "dpdist-end-to-end/weekly-slurm" in listed
    _ok(prefect_cli(["flow-run", "ls"], deployed["env"]))
    _ok(prefect_cli(["work-pool", "inspect", POOL], deployed["env"]))
    status, deps = _post(f"{prefect_server['url']}/deployments/filter", {})
    assert status == 200
    by_name = {d["name"]: d for d in deps if d["work_pool_name"] == POOL}
    assert by_name["nightly-demo"]["schedules"][0]["schedule"]["cron"] == "0 2 * * *"
    assert by_name["weekly-slurm"]["schedules"][0]["schedule"]["cron"] == "0 3 * * 0"
    assert by_name["weekly-slurm"]["parameters"] == {"config": "deploy/slurm.toml"}
    # runs start in the checkout named by $DPDIST_HOME at deploy time
    assert by_name["nightly-demo"]["pull_steps"] == [
        {"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}
    ]


def test_nightly_deployment_completes_on_the_worker_with_its_releases(nightly_run: dict, deployed: dict) -> None:
    tmp = nightly_run["tmp"]
    keys = ledger_keys(tmp)
    # the row counts, dp-sis, one model and its private evaluation
    assert len(keys) == len(set(keys)) == 4 and sum("/select/" in k for k in keys) == 1
    (status,) = Accountant(tmp / "ledger.sqlite").datasets()
    assert status.epsilon_basic == pytest.approx(0.001 + 0.5 + 1.0 + 0.1)
    assert (tmp / "out" / "report.md").exists() and (tmp / "out" / "models.json").exists()
    runs = _ok(prefect_cli(["flow-run", "ls", "--state", "COMPLETED"], deployed["env"]))
    assert nightly_run["id"] in runs
    inspected = _ok(prefect_cli(["flow-run", "inspect", nightly_run["id"]], deployed["env"]))
    assert "'Completed'" in inspected or "COMPLETED" in inspected


def test_prefect_ui_pages_load_without_api_errors(nightly_run: dict, deployed: dict, prefect_server: dict) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (`apt-get install chromium` as root; .ci/run installs it)")
    api = prefect_server["url"]
    base = api.removesuffix("/api")
    # the artifacts belong to the stages' subflow run, a child of the deployment's run
    status, subs = _post(
        f"{api}/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": [nightly_run["id"]]}}}
    )
    assert status == 200 and len(subs) == 1, subs
    sub = subs[0]["id"]
    _, runs = _post(f"{api}/flow_runs/filter", {"flow_runs": {"id": {"any_": [nightly_run["id"]]}}})
    run_name = runs[0]["name"]
    status, deps = _post(f"{api}/deployments/filter", {"deployments": {"name": {"any_": ["nightly-demo"]}}})
    dep_id = deps[0]["id"]
    pages = [  # (path, texts the loaded page shows)
        ("/", ["Dashboard", "Flow Runs"]),  # redirects to the V2 UI
        ("/v2/runs", [run_name]),
        ("/v2/deployments", ["nightly-demo", "weekly-slurm"]),
        (f"/v2/deployments/deployment/{dep_id}", ["nightly-demo", run_name]),
        (f"/v2/runs/flow-run/{nightly_run['id']}", [run_name, "Completed", "nightly-demo"]),
        (f"/v2/runs/flow-run/{sub}?tab=Artifacts", ["dpdist-report", "dpdist-models"]),
        ("/v2/artifacts", ["dpdist-report", "dpdist-models"]),
        ("/runs", [run_name]),  # V1, whose links the CLI prints
        ("/deployments", ["nightly-demo", "weekly-slurm"]),
        (f"/runs/flow-run/{nightly_run['id']}", [run_name, "Completed"]),
    ]
    failures = []
    with Chromium(chromium) as browser:
        for path, expect in pages:
            report = browser.visit(base + path, expect, timeout=30, settle=1.5)
            missing = [s for s in expect if s not in report.text]
            if missing or report.problems():
                failures.append(f"{path}: missing {missing}; {report.problems()}; page text: {report.text[:400]!r}")
    assert not failures, "\n".join(failures)


def test_weekly_slurm_deployment_runs_on_slurm_workers(deployed: dict) -> None:
    reason = _slurm_ready()
    if reason:
        pytest.skip(f"SLURM unavailable: {reason}")
    tmp = deployed["tmp"] / "slurm"
    tmp.mkdir()
    # the deployment's own config is the 200k-row main job; the same cluster section on small data
    cfg = write_config(
        tmp,
        small_config(
            tmp,
            name="weekly-slurm",
            cluster={"kind": "slurm", "n_workers": 2, "jobqueue": str(REPO / "deploy" / "jobqueue.yaml")},
            select={"methods": ["dp-sis"]},
            train={"epsilon": [1.0]},
        ),
    )
    before = subprocess.run(["sacct", "-n", "-X", "-o", "JobID"], capture_output=True, text=True).stdout.split()
    t0 = time.time()
    _run_deployment(deployed, "dpdist-end-to-end/weekly-slurm", cfg, timeout=900)
    keys = [k for k in ledger_keys(deployed["tmp"]) if k.startswith("weekly-slurm/")]
    assert len(keys) == len(set(keys)) == 4  # counts, dp-sis, one model and its evaluation, charged once each
    assert (tmp / "out" / "report.md").stat().st_mtime >= t0
    after = subprocess.run(["sacct", "-n", "-X", "-o", "JobID"], capture_output=True, text=True).stdout.split()
    if before or after:  # accounting may be off on a minimal slurm.conf; when on, our worker jobs show
        assert len(set(after) - set(before)) >= 1
    assert "SLURMCluster" in deployed["worker_log"].read_text()
