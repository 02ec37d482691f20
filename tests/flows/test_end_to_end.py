"""The end-to-end flow against a real Prefect server on loopback, on real Dask clusters.

Each test runs the real thing: `dpdist run` in a subprocess (or a `flow.serve` deployment),
a LocalCluster of worker processes, the SQLite ledger; the assertions read the ledger, the
files and the Prefect API afterwards.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from flow_helpers import (
    REPO,
    dpdist,
    flow_env,
    ledger_keys,
    prefect_cli,
    run_models,
    small_config,
    start_run,
    stop,
    stored_logs,
    tls_credentials,
    tls_security,
    write_config,
)

from dpdist.privacy.accountant import Accountant
from dpdist.privacy.filter import PrivacyFilter

pytestmark = pytest.mark.slow


def _api(url: str, coro_fn):  # run one async Prefect client call against the test server
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def go():
        async with get_client() as client:
            return await coro_fn(client)

    with temporary_settings({PREFECT_API_URL: url}):
        return asyncio.run(go())


def _persisted_results(home: Path) -> list:
    from prefect.results import ResultRecord

    storage = home / "storage"
    files = [p for p in storage.rglob("*") if p.is_file()] if storage.exists() else []
    out = []
    for p in files:  # a JSON record (metadata + result) or a bare base64 pickle of the result
        data = p.read_bytes()
        if data.lstrip().startswith(b"{"):
            rec = json.loads(data)
            if "result" in rec:
                out.append(ResultRecord.deserialize(data).result)
        else:
            out.append(pickle.loads(base64.b64decode(data)))
    return out


def _artifacts(url: str) -> list[dict]:
    req = urllib.request.Request(
        f"{url}/artifacts/filter",
        method="POST",
        headers={"Content-Type": "application/json"},
        data=json.dumps({"limit": 200}).encode(),
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _published(out_dir: Path, stdout: str, artifacts: list[dict]) -> dict[str, str]:
    """Everything a run publishes: its output files but the stores (raw data), the CLI JSON, the artifacts."""
    texts = {
        str(p): p.read_text(errors="replace")
        for p in out_dir.rglob("*")
        if p.is_file() and "stores" not in p.relative_to(out_dir).parts and p.suffix != ".png"
    }
    texts["stdout"] = stdout
    for a in artifacts:
        texts[f"artifact {a['key']}"] = json.dumps(a.get("data"))
    return texts


def test_main_job_on_the_server_releases_once_and_replays(prefect_server: dict, tmp_path: Path) -> None:
    # a budget the run fits once but not twice: the re-run's pre-flight must count its replays as free
    cfg = write_config(tmp_path, small_config(tmp_path, budget={"epsilon": 4.0, "delta": 1e-6}))
    env = {**flow_env(tmp_path, prefect_server), "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true"}
    r = dpdist(["run", str(cfg), "--json", "-v"], env, tmp_path)  # -v: the flows' INFO lines reach the server
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout)
    assert [s["step"] for s in out["steps"]] == ["ingest", "select", "train", "evaluate", "report"]
    assert "Dask dashboard: http" in r.stderr and "step train took" in r.stderr  # timings: the terminal only
    report = Path(out["report"])
    text = report.read_text()
    for png in ("privacy_utility.png", "convergence.png", "selected_features.png"):
        assert (report.parent / png).stat().st_size > 1000 and png in text

    # one charge per release: the row counts, 2 selections, 2 models and their 2 private evaluations
    keys = ledger_keys(tmp_path)
    assert len(keys) == len(set(keys)) == 7
    acc = Accountant(tmp_path / "ledger.sqlite")
    dataset = acc.resolve(out["dataset"])
    status = acc.status(dataset)
    losses = [h.privacy_loss for h in acc.history(dataset)]
    assert status.releases == 7 and status.epsilon_basic == pytest.approx(0.001 + 0.5 + 0.5 + 1.0 + 2.0 + 0.1 + 0.1)
    spent = PrivacyFilter.for_budget(status.epsilon_total, 1e-6).spent(losses)[
        0
    ]  # the ledger's filter (dpdist.privacy.filter)
    assert status.epsilon_spent == pytest.approx(spent) and status.epsilon_spent <= status.epsilon_basic
    models = run_models(tmp_path / "out")
    recorded = {h.key: acc.result(h) for h in acc.history(dataset)}  # a model whole: from its artefact
    for raw in json.loads((tmp_path / "out" / "models.json").read_text()):  # the weights in a binary file beside it
        ref = raw["result"]["__dpdist_artefact__"]
        assert "values" not in raw["result"] and (tmp_path / "out" / "artefacts" / ref["file"]).is_file()
    for m in models:
        assert recorded[m["key"]] == m["result"]  # what the flow wrote is what the ledger recorded
        assert "seconds" not in m["result"]

    # the server saw the run complete, with its artifacts
    run = _api(prefect_server["url"], lambda c: c.read_flow_run(out["flow_run"]))
    assert run.state.is_completed()
    arts = [
        a
        for a in _artifacts(prefect_server["url"])
        if out["flow_run"] in (a.get("data") or "") or a["key"] == "dpdist-models"
    ]
    assert {a["key"] for a in arts} == {"dpdist-report", "dpdist-models"}
    assert any("## Models" in (a.get("data") or "") for a in arts)
    # the server's stored logs name the steps, the releases and their public parameters, and hold no
    # duration of a private computation: those reach the operator's terminal only (above)
    logs = [entry["message"] for entry in stored_logs(prefect_server["url"])]
    assert any("step train done" in m for m in logs) and any(
        m.startswith("released frank_wolfe/fast-dp-fw") for m in logs
    )
    for m in logs:
        assert not re.search(r"\btook\b|\d ?s\b|seconds|ms/iter", m), f"a duration in Prefect's stored logs: {m}"

    # nothing published is a function of the data but a release: no content hash of any store, no
    # exact row count, no solver time -- in the files, the CLI JSON and the artifacts
    from dpdist.data.store import open_store

    stores = {k: open_store(tmp_path / "out" / "stores" / k) for k in ("source", "train", "test")}
    secrets_ = {f"content hash of {k}": s.dataset_id for k, s in stores.items()}
    # a row count equal to a published column index (a selected feature, the synthetic set's public true
    # support, a model's weight) cannot be told apart from it in the text: only the other counts are searched
    sel = json.loads((tmp_path / "out" / "selection.json").read_text())
    columns = {int(j) for rec in sel.values() if isinstance(rec, dict) for j in rec.get("features") or []}
    columns |= {int(j) for m in models for j in m["result"]["indices"]}
    columns |= set(stores["source"].meta.get("true_support") or [])
    secrets_.update(
        {f"row count of {k}": str(stores[k].shape[0]) for k in ("train", "test") if stores[k].shape[0] not in columns}
    )
    texts = _published(tmp_path / "out", r.stdout, arts)
    assert {Path(p).name for p in texts if p.startswith("/")} >= {
        "report.md",
        "results.json",
        "models.json",
        "selection.json",
        "evaluation.json",
    }
    for where, body in texts.items():
        for what, value in secrets_.items():
            # a noisy count's integer part may equal the exact one (2982.54 for 2982 rows): a value, not a leak
            assert not re.search(rf"(?<![\w.]){re.escape(value)}(?!\w)(?!\.\d*[1-9])", body), (
                f"{what} published in {where}"
            )
        assert not re.search(r"seconds|ms/iter|per_iter|\bfit_time", body), f"a timing published in {where}"
    assert out["dataset"] == status.name and not re.fullmatch(r"[0-9a-f]{64}", out["dataset"])

    # persistence was on by default (env below), yet Prefect stored only the flows' public summaries:
    # no raw aggregate (X^T y, block votes), no model outside the ledger, no content hash
    persisted = _persisted_results(tmp_path / "prefect-client")
    assert persisted and all(isinstance(p, dict) and set(p) >= {"flow_run", "dataset", "steps"} for p in persisted), [
        type(p) for p in persisted
    ]
    assert all(stores["source"].dataset_id not in json.dumps(p, default=str) for p in persisted)

    # the same config again: every release is replayed from the ledger, nothing is charged
    def references() -> int:  # the server's task runs of the public references (non-private fits)
        from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

        named = TaskRunFilter(name=TaskRunFilterName(like_="reference"))
        runs = _api(prefect_server["url"], lambda c: c.read_task_runs(task_run_filter=named))
        return sum(t.name.startswith("reference") for t in runs)

    before = references()
    assert before >= 1
    first_sel = json.loads((tmp_path / "out" / "selection.json").read_text())
    r2 = dpdist(["run", str(cfg), "--json"], env, tmp_path)
    assert r2.returncode == 0, r2.stderr[-4000:]
    assert "plan: 7 releases (7 replayed from the ledger)" in r2.stderr
    assert ledger_keys(tmp_path) == keys
    assert acc.status(dataset).epsilon_spent == status.epsilon_spent
    second_sel = json.loads((tmp_path / "out" / "selection.json").read_text())
    for m in first_sel:
        assert second_sel[m]["features"] == first_sel[m]["features"] and second_sel[m]["replayed"]
    # ... and recomputes none of the public references (minutes at full size): the first run's are read back
    assert references() == before
    assert json.loads((tmp_path / "out" / "evaluation.json").read_text())["reference"]


def test_budget_refused_before_and_mid_flow_exits_3_and_releases_nothing(prefect_server: dict, tmp_path: Path) -> None:
    # an svmlight source (ingested by the flow)
    from sklearn.datasets import dump_svmlight_file

    from dpdist.data.ingest import ingest_svmlight
    from dpdist.data.synthetic import make_synthetic

    X, y = make_synthetic("rcv1", random_state=3, n=3000, d=2000).materialize()
    dump_svmlight_file(X, y, str(tmp_path / "data.svm"))  # zero-based, scikit-learn's default
    data = {
        "source": "svmlight",
        "path": str(tmp_path / "data.svm"),
        "n_features": 2000,
        "zero_based": True,
        "task": "binary",
        "labels": [-1, 1],
    }
    out = tmp_path / "out"

    # 1. the plan (0.001 + 2 x 0.5 + 1.0 + 0.1) cannot fit a budget of 1.3: refused before any work
    cfg = write_config(
        tmp_path, small_config(tmp_path, budget={"epsilon": 1.3, "delta": 1e-6}, data=data, train={"epsilon": [1.0]})
    )
    r = dpdist(["run", str(cfg), "--json"], flow_env(tmp_path, prefect_server), tmp_path)
    assert r.returncode == 3 and r.stdout == "" and "budget refused" in r.stderr, r.stderr[-4000:]
    assert not out.exists() and (
        not (tmp_path / "ledger.sqlite").exists() or Accountant(tmp_path / "ledger.sqlite").datasets() == []
    )

    # 2. the same data was ingested and given a budget of 1.3 elsewhere; the config asks for 20, which
    # the pre-flight accepts for data it has not seen, but the ledger's budget is the one that counts:
    # the selections are released, the model is refused, nothing of it is charged
    ingest_svmlight(
        tmp_path / "data.svm", tmp_path / "elsewhere", n_features=2000, task="binary", labels=[-1, 1], zero_based="yes"
    )
    from dpdist.data.store import open_store

    Accountant(tmp_path / "ledger.sqlite").init_budget(open_store(tmp_path / "elsewhere").dataset_id, 1.3, 1e-6)
    cfg = write_config(
        tmp_path, small_config(tmp_path, budget={"epsilon": 20.0, "delta": 1e-6}, data=data, train={"epsilon": [1.0]})
    )
    r = dpdist(["run", str(cfg), "--json"], flow_env(tmp_path, prefect_server), tmp_path)
    assert r.returncode == 3, r.stderr[-4000:]
    assert r.stdout == ""  # nothing printed as a result
    assert "budget refused" in r.stderr
    acc = Accountant(tmp_path / "ledger.sqlite")
    (status,) = acc.datasets()
    keys = [h.key for h in acc.history(status.dataset)]
    assert len(keys) == 3 and all("/select/" in k or "/counts/" in k for k in keys)  # the refused step: no charge
    assert status.epsilon_basic == pytest.approx(1.001) and status.epsilon_total == 1.3
    assert (out / "selection.json").exists()  # the releases before the refusal stand
    assert not (out / "models.json").exists() and not (out / "report.md").exists()


def test_a_disk_that_refuses_the_runs_writes_is_one_line_exit_1_and_leaves_nothing(
    prefect_server: dict, tmp_path: Path, file_size_limit
) -> None:
    """The run's processes (the supervisor, the flow, its local workers) under a file-size limit
    (RLIMIT_FSIZE: the kernel refuses writes past 256 KiB of a file, EFBIG, as a full disk refuses
    with ENOSPC): the source store's first large chunk is refused. The terminal gets Prefect's
    one-line failure records and dpdist's line, no traceback; exit 1; no store, no temporary."""
    cfg = write_config(tmp_path, small_config(tmp_path))
    r = subprocess.run(
        [sys.executable, "-m", "dpdist.cli", "run", str(cfg)],
        env=flow_env(tmp_path, prefect_server),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=file_size_limit(256 << 10),
    )
    assert r.returncode == 1, r.stderr[-4000:]
    assert "Traceback" not in r.stderr, r.stderr[-4000:]
    assert r.stderr.splitlines()[-1] == f"dpdist: error: File too large (the run's output: {tmp_path / 'out'})"
    assert "Task run failed with exception: OSError('File too large')" in r.stderr
    assert [p.name for p in (tmp_path / "out").rglob("*") if p.is_file() or ".tmp-" in p.name] == []


def test_worker_killed_mid_fit_flow_completes_with_one_charge_per_release(prefect_server: dict, tmp_path: Path) -> None:
    from distributed import Client, LocalCluster

    # a scheduler started by the user, with TLS: the run joins it with the config's credentials
    creds = tls_credentials(tmp_path / "tls")
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            resources={"solver": 1},
            dashboard_address="127.0.0.1:0",
            security=tls_security(creds),
        ) as cluster,
        Client(cluster) as client,
    ):
        assert cluster.scheduler_address.startswith("tls://")
        # the standard DP-FW (Alg. 1) on 20,000 x 47,236 rows: long enough to be killed mid-fit
        cfg = write_config(
            tmp_path,
            small_config(
                tmp_path,
                data={"n": 20000, "d": 47236},
                cluster={"kind": "address", "address": cluster.scheduler_address, **creds},
                select={"methods": ["dp-sis"]},
                train={"methods": ["dp-fw"], "epsilon": [1.0], "iters": 2500},
            ),
        )
        proc = start_run(cfg, flow_env(tmp_path, prefect_server), tmp_path, "--json")
        victim = None
        deadline = time.time() + 300
        while victim is None and time.time() < deadline and proc.poll() is None:
            for worker, keys in client.processing().items():
                if any(str(k).startswith("train-") for k in keys):
                    victim = worker
            time.sleep(0.2)
        assert victim is not None, "the fit never started"
        time.sleep(2.0)  # well inside the fit
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-4000:]
    out = json.loads(stdout)
    keys = ledger_keys(tmp_path)
    assert len(keys) == len(set(keys)) == 4  # counts + dp-sis + dp-fw + its evaluation, each charged once
    acc = Accountant(tmp_path / "ledger.sqlite")
    dataset = acc.resolve(out["dataset"])
    assert acc.status(dataset).epsilon_basic == pytest.approx(0.001 + 0.5 + 1.0 + 0.1)
    (model,) = run_models(tmp_path / "out")
    recorded = {h.key: acc.result(h) for h in acc.history(dataset)}  # a model whole: from its artefact
    assert recorded[model["key"]] == model["result"] and model["result"]["iterations"] == 2500


def test_deployment_served_with_flow_serve_runs_the_flow(prefect_server: dict, tmp_path: Path) -> None:
    # the model is fitted on the columns DP-SIS released (train.features = "dp-sis")
    cfg = write_config(
        tmp_path, small_config(tmp_path, select={"methods": ["dp-sis"]}, train={"epsilon": [1.0], "features": "dp-sis"})
    )
    env = flow_env(tmp_path, prefect_server)
    log = open(tmp_path / "serve.log", "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dpdist.flows.serve",
            "--name",
            "test-deploy",
            "--cron",
            "0 2 * * *",
            "--config",
            str(cfg),
        ],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = prefect_server["url"]
        deadline = time.time() + 120
        dep = None
        while dep is None:
            try:
                dep = _api(url, lambda c: c.read_deployment_by_name("dpdist-end-to-end/test-deploy"))
            except Exception:  # noqa: BLE001 - not registered yet
                assert time.time() < deadline and server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
                time.sleep(1.0)
        assert dep.schedules and dep.schedules[0].schedule.cron == "0 2 * * *"
        # as a user would: list it, run it and watch the run, find the run among the completed ones
        assert "dpdist-end-to-end/test-deploy" in prefect_cli(["deployment", "ls"], env).stdout
        r = prefect_cli(
            ["deployment", "run", "dpdist-end-to-end/test-deploy", "--watch", "--watch-timeout", "600"],
            env,
            timeout=660,
        )
        assert r.returncode == 0 and "finished successfully in 'Completed'" in r.stdout, (
            r.stdout[-2000:] + (tmp_path / "serve.log").read_text()[-4000:]
        )
        (run_id,) = set(re.findall(r"UUID: ([0-9a-f-]{36})", r.stdout))
        assert run_id in prefect_cli(["flow-run", "ls", "--state", "COMPLETED"], env).stdout
    finally:
        stop(server, signal.SIGINT)
        log.close()
    keys = ledger_keys(tmp_path)
    assert len(keys) == 4 and len(set(keys)) == 4  # counts, dp-sis, the model and its evaluation
    assert (tmp_path / "out" / "report.md").exists()
    selected = json.loads((tmp_path / "out" / "selection.json").read_text())["dp-sis"]["features"]
    (model,) = run_models(tmp_path / "out")
    assert model["result"]["indices"] and set(model["result"]["indices"]) <= set(selected)
    assert {abs(v) - 1 for v in model["result"]["path"]} <= set(selected)  # vertices in store columns


def test_screened_models_in_the_flow(prefect_server: dict, tmp_path: Path) -> None:
    """rnm-screen and adp-screen as train.methods: charged as FW + screening, their zeroings released in store
    columns (here on DP-SIS's columns), evaluated along the screened path, sparsity beside the metrics."""
    cfg = write_config(
        tmp_path,
        small_config(
            tmp_path,
            select={"methods": ["dp-sis"]},
            train={
                "methods": ["rnm-screen", "adp-screen"],
                "epsilon": [1.0],
                "features": "dp-sis",
                "screen_epsilon": 0.5,
                "screen_delta": 1e-7,
                "n_max": 10000,
                "screen_schedule": 20,
            },
        ),
    )
    planned = dpdist(["run", str(cfg), "--plan", "--json"], flow_env(tmp_path, prefect_server), tmp_path)
    assert planned.returncode == 0, planned.stderr[-4000:]
    plan = json.loads(planned.stdout)["plan"]
    r = dpdist(["run", str(cfg), "--json"], flow_env(tmp_path, prefect_server), tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout)
    acc = Accountant(tmp_path / "ledger.sqlite")
    history = acc.history(acc.resolve(out["dataset"]))
    # the pre-flight plan listed every release the run charged, each at its exact charge, and the same total
    assert sorted((p["mechanism"], p["epsilon"], p["delta"]) for p in plan["releases"]) == sorted(
        (h.mechanism, h.epsilon, h.delta) for h in history
    )
    assert plan["epsilon_after"] == pytest.approx(acc.status(acc.resolve(out["dataset"])).epsilon_spent, rel=1e-12)
    mechanisms = {h.mechanism for h in history}
    assert {"frank_wolfe/fast-dp-fw+rnm-screen", "frank_wolfe/fast-dp-fw+adp-screen"} <= mechanisms
    selected = json.loads((tmp_path / "out" / "selection.json").read_text())["dp-sis"]["features"]
    models = run_models(tmp_path / "out")
    assert sorted(m["method"] for m in models) == ["adp-screen", "rnm-screen"]
    for m in models:
        assert all(t % 20 == 0 and j in selected for t, j in m["result"]["screened"])
        assert 1.0 < m["epsilon"] < 1.5  # FW (1.0) composed with the screening (0.5)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| non-zeros | density |" in report and "rnm-screen" in report


def test_gradient_learners_in_the_flow_are_charged_as_planned(prefect_server: dict, tmp_path: Path) -> None:
    """select-train (on a solver worker), DP-GD (a reduction over the cluster's row blocks) and auto as
    train.methods: each charged its exact planned loss at the synthetic source's public count, the
    released models carry their intercept and row normalisation, their evaluation has no curve part,
    and the report names the learner auto ran."""
    cfg = write_config(
        tmp_path,
        small_config(
            tmp_path, select={"methods": []}, train={"methods": ["select-train", "dp-gd", "auto"], "epsilon": [1.0]}
        ),
    )
    planned = dpdist(["run", str(cfg), "--plan", "--json"], flow_env(tmp_path, prefect_server), tmp_path)
    assert planned.returncode == 0, planned.stderr[-4000:]
    plan = json.loads(planned.stdout)["plan"]
    r = dpdist(["run", str(cfg), "--json"], flow_env(tmp_path, prefect_server), tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    acc = Accountant(tmp_path / "ledger.sqlite")
    dataset = acc.resolve(json.loads(r.stdout)["dataset"])
    history = acc.history(dataset)
    assert sorted((p["mechanism"], p["epsilon"], p["delta"]) for p in plan["releases"]) == sorted(
        (h.mechanism, h.epsilon, h.delta) for h in history
    )
    assert {"select-train/logistic", "dp-gd/logistic", "auto/logistic"} <= {h.mechanism for h in history}
    models = run_models(tmp_path / "out")
    for m in models:
        assert m["result"]["row_norm"] == "l2" and "intercept" in m["result"] and m["result"]["path"] == []
    assert len(next(m for m in models if m["method"] == "select-train")["result"]["indices"]) <= 100
    evaluation = json.loads((tmp_path / "out" / "evaluation.json").read_text())
    assert all(e["curve_iterations"] == [] and 0.0 <= e["accuracy"] <= 1.0 for e in evaluation["models"])
    assert [h.mechanism for h in history].count("evaluation/binary") == 3
    auto = next(m for m in models if m["method"] == "auto")["result"]["learner"]
    assert auto == "dp-sgd"  # a few thousand rows: the screening's noise is too large beside the count
    assert f"| auto ({auto}) |" in (tmp_path / "out" / "report.md").read_text()
