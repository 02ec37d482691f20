"""The end-to-end flow: ingest -> select -> train -> evaluate -> report, from one config.

``end_to_end`` is a light parent flow (it only reads the config), so it can be served and
scheduled as a deployment; the stages run in one subflow whose ``DaskTaskRunner`` is built
from the config's ``[cluster]`` section (local, an existing scheduler, or SLURM).
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow
from prefect.context import FlowRunContext
from prefect.logging import get_run_logger

from dpdist.flows.config import RunConfig, load_config
from dpdist.flows.evaluate import evaluate_stage
from dpdist.flows.ingest import ingest_stage
from dpdist.flows.release import SECRET_DURATION
from dpdist.flows.report import write_report
from dpdist.flows.runtime import on_cluster, trim_workers
from dpdist.flows.select import select_stage
from dpdist.flows.train import train_stage
from dpdist.utils import run_display
from dpdist.utils.operator_log import timing

__all__ = ["end_to_end", "pipeline"]


def _flow_run_id() -> str:
    ctx = FlowRunContext.get()
    return str(ctx.flow_run.id) if ctx and ctx.flow_run else "-"


class StepClock:
    """How long each step of a run took, on the operator's terminal only (``timing``): a step that
    computed a release whose duration reveals a secret (``SECRET_DURATION``: the private search's,
    which tells its number of runs) is not timed, nor is the run's running total from it on."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.secret = False

    def done(self, name: str, mechanisms: list[str]) -> None:
        """Step ``name`` ended, having released ``mechanisms``: its time (and the total so far) if it may be shown."""
        now, secret = time.perf_counter(), bool(SECRET_DURATION & set(mechanisms))
        if secret:
            timing("dpdist run: step %s done (not timed: it holds a private search, whose duration is secret)", name)
        elif self.secret:
            timing("dpdist run: step %s took %.1f s", name, now - self.last)
        else:
            timing("dpdist run: step %s took %.1f s (%.1f s in all)", name, now - self.last, now - self.start)
        self.secret |= secret
        self.last = now


def pipeline(cfg: RunConfig, flow_run: str | None = None) -> dict[str, Any]:
    """All stages on the active task runner; returns the run summary (the CLI's JSON).

    ``flow_run`` is the id reported for the run (the parent flow's); default: this flow run.
    The summary is public: the dataset's name, release keys and output paths. The flow's log
    names each step as it ends; how long it took goes to the operator's terminal only (it
    includes the private fits' times: ``dpdist.utils.operator_log``; :class:`StepClock`), never to
    Prefect's run logger, whose lines its server stores.
    """
    logger = get_run_logger()
    flow_run = flow_run or _flow_run_id()
    steps: list[dict[str, Any]] = []
    clock = StepClock()

    def step(name: str, released: list[dict[str, Any]] | None = None, **info: Any) -> None:
        steps.append({"step": name, **info})
        logger.info("step %s done", name)
        clock.done(name, [r["mechanism"] for r in released or []])
        trim_workers(cfg.cluster)  # what the stage freed, given back before the next

    stages = ["ingest", *(["select"] if cfg.select.methods else []), *(["train"] if cfg.train_methods() else [])]
    with run_display.showing([*stages, "evaluate", "report"]):  # the operator's terminal only
        run_display.stage("ingest")
        stores = ingest_stage(cfg)
        step("ingest", dataset=stores["name"], releases=[stores["counts"]["key"]] if stores.get("counts") else [])
        selection = None
        if cfg.select.methods:
            run_display.stage("select")
            selection = select_stage(cfg, stores)
            step("select", releases=[r["key"] for r in selection.values()])
        models = None
        if cfg.train_methods():
            run_display.stage("train")
            models = train_stage(cfg, stores, selection)
            step("train", models, releases=[m["key"] for m in models])
        run_display.stage("evaluate")
        evaluation = evaluate_stage(cfg, stores, selection, models)
        step("evaluate", releases=[m["evaluation_key"] for m in evaluation["models"] if m.get("evaluation_key")])
        run_display.stage("report")
        files = write_report(cfg, flow_run, stores, selection, models, evaluation)
        step("report", **files)
    return {"flow_run": flow_run, "dataset": stores["name"], "steps": steps, **files}


@flow(name="dpdist-end-to-end")
def end_to_end(config: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the whole job described by ``config`` (a TOML/YAML path; None: the embedded defaults)."""
    cfg = load_config(config, overrides)
    get_run_logger().info(
        "config %s: data %s, cluster %s, output %s", cfg.source_file, cfg.data.source, cfg.cluster.kind, cfg.output
    )
    return on_cluster(cfg, "dpdist-pipeline", pipeline, _flow_run_id())
