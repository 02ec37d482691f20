"""``dpdist.flows.runtime.on_cluster``: what a stage's cluster has when the stage starts.

The effect of :class:`dpdist.pipelines.placement.LooseRestrictionRescue` is tested on a bare
LocalCluster (tests/pipelines/test_placement.py); here, that the stages of a run get it: on the
schedulers dpdist starts, and not on a user's scheduler joined by address (which may not have
dpdist installed to unpickle it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from flow_helpers import tls_credentials, tls_security

from dpdist.flows.config import load_config
from dpdist.flows.runtime import LOOPBACK, cluster_client, on_cluster
from dpdist.pipelines.placement import LooseRestrictionRescue

pytestmark = pytest.mark.slow


def _scheduler_plugins(cfg) -> list[str]:
    with cluster_client() as client:
        return client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.plugins))


def _on_cluster(url: str, cluster: dict, tmp: Path) -> list[str]:
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

    cfg = load_config(overrides={"output": str(tmp / "out"), "cluster": cluster})
    with temporary_settings({PREFECT_API_URL: url, PREFECT_HOME: tmp / "prefect-client"}):
        try:
            return on_cluster(cfg, "probe-plugins", _scheduler_plugins)
        finally:
            APILogWorker.drain_all(timeout=10)  # the flow's logs sent while the test server runs


def test_stages_on_a_local_cluster_get_the_rescue_plugin(prefect_server: dict, tmp_path: Path) -> None:
    names = _on_cluster(prefect_server["url"], {"kind": "local", "n_workers": 1}, tmp_path)
    assert LooseRestrictionRescue.name in names


def test_a_scheduler_joined_by_address_is_left_as_it_is(prefect_server: dict, tmp_path: Path) -> None:
    from distributed import LocalCluster

    creds = tls_credentials(tmp_path / "tls")
    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host=LOOPBACK,
        dashboard_address=f"{LOOPBACK}:0",
        security=tls_security(creds),
    ) as lc:
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
