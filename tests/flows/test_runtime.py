"""``dpdist.flows.runtime.on_cluster``: what a stage's cluster has when the stage starts.

The effect of :class:`dpdist.pipelines.placement.LooseRestrictionRescue` is tested on a bare
LocalCluster (tests/pipelines/test_placement.py); here, that the stages of a run get it: on the
schedulers dpdist starts, and not on a user's scheduler joined by address (which may not have
dpdist installed to unpickle it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from flow_helpers import tls_cluster

from dpdist.flows.config import load_config
from dpdist.flows.runtime import cluster_client, on_cluster
from dpdist.pipelines.placement import LooseRestrictionRescue

pytestmark = pytest.mark.slow


def _scheduler_plugins(cfg) -> list[str]:
    with cluster_client() as client:
        return client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.plugins))


def _on_cluster(url: str, cluster: dict, tmp: Path, stage=_scheduler_plugins):
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

    cfg = load_config(overrides={"output": str(tmp / "out"), "cluster": cluster})
    with temporary_settings({PREFECT_API_URL: url, PREFECT_HOME: tmp / "prefect-client"}):
        try:
            return on_cluster(cfg, "probe-plugins", stage)
        finally:
            APILogWorker.drain_all(timeout=10)  # the flow's logs sent while the test server runs


def test_stages_on_a_local_cluster_get_the_rescue_plugin(prefect_server: dict, tmp_path: Path) -> None:
    names = _on_cluster(prefect_server["url"], {"kind": "local", "n_workers": 1}, tmp_path)
    assert LooseRestrictionRescue.name in names


def _workers_allocator(cfg) -> dict:
    """Each worker's MALLOC_TRIM_THRESHOLD_, and its RSS after a fragmented heap is freed, then after trim_workers."""
    from dpdist.flows.runtime import trim_workers

    def rss() -> int:
        import psutil

        return psutil.Process().memory_info().rss

    def fragment(dask_worker) -> None:
        import numpy as np

        arrays = [np.ones(12_000) for _ in range(8_000)]  # 0.77 GB of 96 KB arrays: on the heap, under 128 KiB
        dask_worker.dpdist_test_kept = arrays[-1]  # the heap's top stays in use: freeing the rest cannot shrink it
        arrays.clear()

    with cluster_client() as client:
        env = client.run(lambda: __import__("os").environ.get("MALLOC_TRIM_THRESHOLD_"))
        client.run(fragment)
        before = client.run(rss)
        trim_workers(cfg.cluster)
        return {"env": env, "before": before, "after": client.run(rss)}


def test_a_local_clusters_workers_keep_glibcs_thresholds_and_give_memory_back_between_stages(
    prefect_server: dict, tmp_path: Path, monkeypatch
) -> None:
    """Dask's nanny would set MALLOC_TRIM_THRESHOLD_ (an earlier nanny of this process may have left it in the
    environment the workers inherit: not so in a dpdist run). What a stage freed is given back between stages."""
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    seen = _on_cluster(prefect_server["url"], {"kind": "local", "n_workers": 1}, tmp_path, _workers_allocator)
    assert set(seen["env"].values()) == {None}
    (worker,) = seen["before"]
    assert seen["before"][worker] - seen["after"][worker] > 400e6  # of the 0.77 GB freed, held by the heap


def test_a_scheduler_joined_by_address_is_left_as_it_is(prefect_server: dict, tmp_path: Path) -> None:
    with tls_cluster(tmp_path / "tls") as (lc, creds):
        names = _on_cluster(
            prefect_server["url"], {"kind": "address", "address": lc.scheduler_address, **creds}, tmp_path
        )
    assert names and LooseRestrictionRescue.name not in names


@pytest.mark.parametrize("output", ["under a file", "report.md a directory"])
def test_a_stage_whose_results_cannot_be_written_is_refused_before_its_cluster_or_any_charge(tmp_path, output):
    """Every flow (the run, a deployment, a stage's own flow) starts its stages through on_cluster: an
    output the results cannot be written to is refused there, before a cluster, a task or a charge."""
    from dpdist.exceptions import ParameterError

    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "out" if output == "under a file" else tmp_path / "out"
    if output != "under a file":
        (out / "report.md").mkdir(parents=True)
    cfg = load_config(overrides={"output": str(out), "ledger": str(tmp_path / "l.sqlite")})
    ran = []
    with pytest.raises(ParameterError, match="output: .*nothing was charged"):
        on_cluster(cfg, "never", lambda cfg: ran.append(cfg))
    assert ran == [] and not (tmp_path / "l.sqlite").exists()


def test_the_split_key_handed_to_a_worker_has_no_repr_of_it(monkeypatch):
    """A BaseException on the worker logs the task's arguments ("Compute Failed"): none shows the key."""
    from dpdist.flows import ingest

    handed: list[tuple] = []
    monkeypatch.setattr(ingest, "on_a_worker", lambda name, fn, *args: handed.append(args))
    key = bytes(range(32))
    ingest.split.fn(None, {"store": "s"}, key)
    (args,) = handed
    shown = repr(args) + str(args)
    assert key.hex() not in shown and repr(key) not in shown and str(list(key)) not in shown
    assert any(getattr(a, "value", None) == key for a in args)  # the worker still gets it
