"""Flow stage ``select``: DP-SIS, two-stage and best-subset feature selection on the train store.

The raw aggregates (|X^T y| per feature; the per-block LASSO vote counts) are Dask graphs
(``dpdist.pipelines.sis``, ``dpdist.pipelines.two_stage``) that a task in the flow process submits to the
flow's cluster; those tasks are never cached or persisted (``dpdist.flows.release.RAW``). The
selection itself is drawn inside the central ``release`` task, after the charge. Two-stage's
number of blocks is public: ``select.n_blocks``, or floor(sqrt) of the released noisy train
row count.

Best subset selection (``bss-top-r``, ``bss-mistakes``; [DPBSS25]) runs
``dpdist.pipelines.best_subset`` on the flow's cluster: the one-swap evaluations are mapped over the
workers and every MIP runs on a worker holding the ``mip`` resource. Its instance is first
built and validated on such a worker (a bad parameter or a bound the data violate is an error
before any charge); the whole procedure then runs inside the ``release`` task, after the
charge, and a solver limit or a failed propose-test-release check is recorded as the release
(the charge stands; a re-run raises it again).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from prefect import flow, task
from prefect.logging import get_run_logger

from dpdist.data.store import column_ids, open_store
from dpdist.flows.config import BSS_METHODS, RunConfig, load_config
from dpdist.flows.ingest import ingest_stage
from dpdist.flows.plan import make_selector
from dpdist.flows.release import RAW, release
from dpdist.flows.results import write_stage
from dpdist.flows.runtime import cluster_client, on_cluster
from dpdist.pipelines.sis import correlation_scores
from dpdist.pipelines.two_stage import block_vote_counts
from dpdist.privacy.accountant import Accountant
from dpdist.selection.two_stage import blocks_from_count

__all__ = ["select", "select_stage"]


@task(name="xty-scores", retries=1, **RAW)
def xty_scores(path: str, bounds: str) -> np.ndarray:
    """|X^T y| over the store's column ranges on the cluster (un-noised: never leaves the flow)."""
    with cluster_client():
        return correlation_scores(path, bounds=bounds)


@task(name="two-stage-votes", retries=1, **RAW)
def two_stage_votes(path: str, k: int, n_blocks: int, alpha: float, seed: int | None) -> np.ndarray:
    """Per-feature LASSO vote counts over the public number of random row blocks, fitted in parallel (un-noised)."""
    with cluster_client():
        return block_vote_counts(path, k, n_blocks, alpha, random_state=seed)


@task(name="bss-instance", retries=0, **RAW)
def bss_instance(spec: Any) -> int:
    """Build and validate the best-subset instance (a ``dpdist.pipelines.best_subset.ProblemSpec``) on a
    ``mip`` worker, before any charge; returns its public width p."""
    from dpdist.pipelines.best_subset import DaskExecutor

    with cluster_client() as client:
        return DaskExecutor(client, spec).meta.p


def bss_support(spec: Any, selector: Any) -> list[int]:
    """The selector's release computed on the flow's cluster (called inside ``release``, after the charge)."""
    from dpdist.pipelines.best_subset import select_store

    with cluster_client() as client:
        return select_store(client, spec.path, selector).tolist()


def n_blocks(cfg: RunConfig, stores: dict[str, Any]) -> int:
    """Two-stage's public number of blocks (``select.n_blocks``, else from the noisy train count)."""
    if cfg.select.n_blocks is not None:
        return cfg.select.n_blocks
    return blocks_from_count(stores["counts"]["result"]["train"])


def select_stage(cfg: RunConfig, stores: dict[str, Any]) -> dict[str, Any]:
    """Release each ``select.methods`` selection; returns {method: release record}."""
    logger = get_run_logger()
    dataset = stores["dataset"]
    train = stores["train"]["store"]
    s = cfg.select
    out: dict[str, Any] = {}
    for method in s.methods:
        m = n_blocks(cfg, stores) if method == "two-stage" else None

        def make(seed: int | None, method: str = method, m: int | None = m) -> Any:
            return make_selector(cfg, method, n_blocks=m, seed=seed)  # the plan's constructor

        params = make(None).release_params(stores["train"]["n_features"])
        key = cfg.step_key("select", method, params)
        selector = make(cfg.step_seed(key))
        # A release this config recorded already is replayed from the ledger: its raw aggregate is
        # not computed again (a second run of the same config reads nothing). Otherwise
        # it is computed here, as a task, before the charge; the fallback (.fn, in the release)
        # only serves a concurrent run that recorded the key in between.
        replay = _recorded(cfg, dataset, key)
        if method in BSS_METHODS:
            from dpdist.pipelines.best_subset import ProblemSpec

            spec = ProblemSpec.of(train, selector)
            if not replay:
                bss_instance(spec)  # bad input fails here, before the charge
            compute = lambda sel=selector, spec=spec: bss_support(spec, sel)  # noqa: E731
        elif method == "dp-sis":
            raw = None if replay else xty_scores(train, cfg.data.bounds)

            def compute(sel=selector, raw=raw) -> list[int]:
                raw = xty_scores.fn(train, cfg.data.bounds) if raw is None else raw
                return sel.fit_scores(raw).features_.tolist()
        else:
            counts = None if replay else two_stage_votes(train, s.k, selector.n_blocks, s.alpha, selector.random_state)

            def compute(sel=selector, c=counts) -> list[int]:
                c = two_stage_votes.fn(train, s.k, sel.n_blocks, s.alpha, sel.random_state) if c is None else c
                return sel.fit_votes(c, sel.n_blocks).features_.tolist()

        with cluster_client():  # before the release: a missing cluster is never its outcome
            rec = release(cfg.ledger, dataset, selector.privacy_charge(), key, compute, params)
        rec["features"] = sorted(rec.pop("result"))  # store columns (the train stage's --features)
        rec["file_columns"] = column_ids(open_store(train).meta, rec["features"])  # as the source file names them
        rec["k"] = s.k
        out[method] = rec
        logger.info("%s: %d features released", method, len(rec["features"]))
    write_stage(cfg, "selection", out)
    return out


def _recorded(cfg: RunConfig, dataset: str, key: str) -> bool:
    """Whether the ledger holds a recorded result under ``key`` (a replay: nothing to compute)."""
    return any(r.key == key and r.result is not None for r in Accountant(cfg.ledger).history(dataset))


def _select_all(cfg: RunConfig) -> dict[str, Any]:
    return select_stage(cfg, ingest_stage(cfg))


@flow(name="dpdist-select")
def select(config: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Standalone selection flow: ingest and split the config's data, then release the selections."""
    cfg = load_config(config, overrides)
    return on_cluster(cfg, "dpdist-select-stage", _select_all)
