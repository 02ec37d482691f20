"""Flow stage ``select``: DP-SIS and two-stage feature selection on the train store.

The raw aggregates (|X^T y| per feature; the per-block LASSO vote counts) are Dask graphs
(``pipelines.sis``, ``pipelines.two_stage``) that a task in the flow process submits to the
flow's cluster; those tasks are never cached or persisted (``flows.release.RAW``). The
selection itself is drawn inside the central ``release`` task, after the charge.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from prefect import flow, task
from prefect.logging import get_run_logger

from dpdist.selection.sis import DPSIS
from dpdist.selection.two_stage import TwoStageSelector
from flows.config import RunConfig, load_config
from flows.ingest import ingest_stage
from flows.release import RAW, ensure_budget, release
from flows.results import write_stage
from flows.runtime import cluster_client, on_cluster
from pipelines.sis import correlation_scores
from pipelines.two_stage import block_vote_counts

__all__ = ["select", "select_stage"]


@task(name="xty-scores", retries=1, **RAW)
def xty_scores(path: str, bounds: str) -> np.ndarray:
    """|X^T y| over the store's row blocks on the cluster (un-noised: never leaves the flow)."""
    with cluster_client():
        return correlation_scores(path, bounds=bounds)


@task(name="two-stage-votes", retries=1, **RAW)
def two_stage_votes(path: str, k: int, alpha: float, seed: int | None) -> tuple[np.ndarray, int]:
    """Per-feature LASSO vote counts over sqrt(n) random row blocks fitted in parallel (un-noised)."""
    with cluster_client():
        return block_vote_counts(path, k, alpha, random_state=seed)


def select_stage(cfg: RunConfig, stores: dict[str, Any]) -> dict[str, Any]:
    """Release each ``select.methods`` selection; returns {method: release record}."""
    logger = get_run_logger()
    dataset = stores["source"]["dataset_id"]
    train = stores["train"]["store"]
    s = cfg.select
    ensure_budget(cfg.ledger, dataset, cfg.budget.epsilon, cfg.budget.delta)
    out: dict[str, Any] = {}
    for method in s.methods:
        params = {"method": method, "k": s.k, "epsilon": s.epsilon, "alpha": s.alpha if method == "two-stage" else None}
        key = cfg.step_key("select", method, params)
        seed = cfg.step_seed(key)
        if method == "dp-sis":
            selector = DPSIS(s.k, s.epsilon, bounds=cfg.data.bounds, random_state=seed)
            raw = xty_scores(train, cfg.data.bounds)
            compute = lambda sel=selector, raw=raw: sel.fit_scores(raw).features_.tolist()  # noqa: E731
        else:
            selector = TwoStageSelector(s.k, s.epsilon, s.alpha, random_state=seed)
            counts, m = two_stage_votes(train, s.k, s.alpha, seed)
            compute = lambda sel=selector, c=counts, m=m: sel.fit_votes(c, m).features_.tolist()  # noqa: E731
        rec = release(cfg.ledger, dataset, *selector.privacy_charge(), key, compute)
        rec["features"] = sorted(rec.pop("result"))
        rec["k"] = s.k
        out[method] = rec
        logger.info("%s: %d features released", method, len(rec["features"]))
    write_stage(cfg, "selection", out)
    return out


def _select_all(cfg: RunConfig) -> dict[str, Any]:
    return select_stage(cfg, ingest_stage(cfg))


@flow(name="dpdist-select")
def select(config: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Standalone selection flow: ingest and split the config's data, then release the selections."""
    cfg = load_config(config, overrides)
    return on_cluster(cfg, "dpdist-select-stage", _select_all)
