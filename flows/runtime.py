"""Where a flow runs: its Dask task runner and, with no Prefect server configured, a temporary one.

Three cluster kinds (``[cluster]`` in the run config):

* ``local``: a ``distributed.LocalCluster`` of worker processes, each holding the
  ``solver=1`` resource so single-process solvers run one per worker (``pipelines.train``);
* ``address``: an existing scheduler (``tcp://host:port``), started by the user;
* ``slurm``: a ``dask_jobqueue.SLURMCluster`` built from a dask-jobqueue YAML file
  (``deploy/jobqueue.yaml``): the ``jobqueue.slurm`` mapping becomes its keyword arguments
  and the cluster is scaled to ``n_workers`` jobs.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml
from prefect import flow
from prefect.context import FlowRunContext
from prefect.logging import get_run_logger
from prefect_dask import DaskTaskRunner

from flows.config import ClusterConfig, ConfigError
from pipelines.train import SOLVER_RESOURCE

__all__ = ["task_runner", "slurm_kwargs", "prefect_api", "on_cluster", "dashboard_link", "cluster_client"]

T = TypeVar("T")


def slurm_kwargs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Keyword arguments of ``SLURMCluster`` from a dask-jobqueue YAML (``jobqueue: slurm: ...``)."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ConfigError(f"cluster.jobqueue: cannot read {p}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"cluster.jobqueue: {p} is not valid YAML: {e}") from None
    try:
        kw = dict(doc["jobqueue"]["slurm"])
    except (KeyError, TypeError):
        raise ConfigError(f"cluster.jobqueue: {p} has no 'jobqueue: slurm:' mapping") from None
    extra = list(kw.get("worker_extra_args") or [])
    if "--resources" not in extra:
        extra += ["--resources", f"{SOLVER_RESOURCE}=1"]
    kw["worker_extra_args"] = extra
    kw.pop("name", None)
    return kw


def task_runner(cluster: ClusterConfig) -> DaskTaskRunner:
    """The ``DaskTaskRunner`` for a ``[cluster]`` section."""
    if cluster.kind == "address":
        return DaskTaskRunner(address=cluster.address)
    if cluster.kind == "slurm":
        return DaskTaskRunner(cluster_class="dask_jobqueue.SLURMCluster", cluster_kwargs=slurm_kwargs(cluster.jobqueue),
                              adapt_kwargs={"minimum": cluster.n_workers, "maximum": cluster.n_workers})
    return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs={
        "n_workers": cluster.n_workers, "threads_per_worker": cluster.threads_per_worker, "processes": True,
        "resources": {SOLVER_RESOURCE: 1}, "dashboard_address": cluster.dashboard_address})


@contextmanager
def prefect_api() -> Iterator[str]:
    """The Prefect API to report to: ``$PREFECT_API_URL`` if set, else a temporary local server.

    Prefect's own ephemeral mode would start one server per process, the flow's and every
    Dask worker's; one server, started here and handed to the workers through the
    environment, serves them all and stops with the run.
    """
    url = os.environ.get("PREFECT_API_URL")
    if url:
        yield url
        return
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server = SubprocessASGIServer()
    server.start(timeout=120)
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            yield server.api_url
    finally:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)  # the run's last log lines reach the server before it stops
        os.environ.pop("PREFECT_API_URL", None)
        server.stop()


@contextmanager
def cluster_client() -> Iterator[Any]:
    """The running flow's Dask client, made current so Dask graphs computed inside run on it.

    Works in the flow and in tasks the flow calls directly (they run in the flow process).
    """
    ctx = FlowRunContext.get()
    runner = getattr(ctx, "task_runner", None)
    if not isinstance(runner, DaskTaskRunner):
        raise RuntimeError("no Dask task runner: call this inside a flow run on a DaskTaskRunner")
    client = runner.client
    with client.as_current():
        yield client


def dashboard_link() -> str | None:
    """The Dask dashboard of the running flow's cluster (None outside a Dask flow run)."""
    try:
        with cluster_client() as client:
            return client.dashboard_link
    except RuntimeError:
        return None


def on_cluster(cfg: Any, name: str, stage: Callable[..., T], *args: Any) -> T:
    """Run ``stage(cfg, *args)`` as a subflow on the cluster of ``cfg.cluster`` (``cfg``: a RunConfig).

    The subflow owns the ``DaskTaskRunner``: its tasks (and the Dask graphs they submit) run on
    that cluster, which starts before the stage and is closed after it. The dashboard link is
    logged (and printed to stderr) as soon as the cluster is up.
    """

    @functools.wraps(stage)
    def run(cfg: Any, *args: Any) -> T:
        link = dashboard_link()
        if link:
            get_run_logger().info("Dask dashboard: %s", link)
            print(f"Dask dashboard: {link}", file=sys.stderr, flush=True)
        return stage(cfg, *args)

    # the stage's return value holds store paths and content hashes: never persisted by Prefect
    return flow(run, name=name, task_runner=task_runner(cfg.cluster), validate_parameters=False,
                persist_result=False)(cfg, *args)
