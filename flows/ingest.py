"""Flow stage ``ingest``: the source (svmlight file, synthetic set or existing store) as a zarr
store, its budget, its keyed train/test split, and the noisy row counts, under ``<output>/stores/``.

The source, split and public-test tasks run in the flow process and hand their work to a worker of
the task runner's cluster (Dask keys ``ingest-source-…``, ``ingest-split-…``, ``ingest-public-test-…``),
which writes the stores and returns their summaries: no Prefect task runs on a worker, so a worker
needs the scheduler only, never the flow's Prefect server (on loopback, :func:`dpdist.flows.runtime.prefect_api`),
wherever its node is. The split key comes from the ledger (it is the dataset's secret, created with its
budget) and the counts are a release (Laplace, charged). A store's content hash travels between
tasks as ``dataset`` and never leaves the flow; what is shown is the dataset's public name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from prefect import flow, task
from prefect.logging import get_run_logger

from dpdist.data.ingest import ingest_svmlight
from dpdist.data.split import derive_key, key_id, split_store
from dpdist.data.store import check_schema, open_store
from dpdist.data.synthetic import write_synthetic
from dpdist.exceptions import ParameterError
from dpdist.flows.config import RunConfig, load_config, store_paths
from dpdist.flows.release import RAW, ensure_budget, release
from dpdist.flows.runtime import on_a_worker, on_cluster
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.privacy.mechanisms import Laplace
from dpdist.utils.files import private_dir
from dpdist.utils.random import check_random_state

__all__ = ["ingest", "ingest_stage", "store_paths", "store_summary"]


def store_summary(path: str) -> dict[str, Any]:
    """What the flow passes on of a store: its path, public schema and, internally, its content hash.

    ``dataset`` (the content hash whose budget the store is charged to: for a part of a split, its
    source's) is for the ledger only; no row count or statistic is here.
    """
    s = open_store(path)
    return {
        "store": path,
        "dataset": s.budget_id,
        "n_features": s.shape[1],
        "task": s.task,
        "true_support": s.meta.get("true_support"),
    }


@task(name="ingest-source", retries=1, **RAW)
def make_source(cfg: RunConfig) -> dict[str, Any]:
    """Write the source store (synthetic or svmlight) on a worker, unless the store of the same source exists
    already.

    A store records the fingerprint of its source (``dpdist.flows.plan.source_fingerprint``); a second run
    of the same config reuses it instead of generating or ingesting again.
    """
    return on_a_worker("ingest-source", _write_source, cfg)


def _write_source(cfg: RunConfig) -> dict[str, Any]:
    from dpdist.flows.plan import known_source, source_fingerprint

    out = store_paths(cfg)["source"]
    private_dir(Path(store_paths(cfg)["train"]).parent)  # <output>/stores: raw records, owner-only
    d = cfg.data
    if d.source != "store" and known_source(cfg) is None:
        meta = {"source_fingerprint": source_fingerprint(cfg)}
        if d.source == "synth":
            write_synthetic(d.name, out, seed=d.data_seed, force=True, metadata=meta, n=d.n, d=d.d)
        else:
            ingest_svmlight(
                d.path,
                out,
                force=True,
                n_features=d.n_features,
                metadata=meta,
                task=d.task,
                labels=None if d.labels is None else list(d.labels),
                zero_based="yes" if d.zero_based else "no",
            )
    return store_summary(out)


def public_test_store(cfg: RunConfig) -> str:
    """Where the run's public test set is as a store: the configured store, or the run's ingest of the file."""
    path = cfg.evaluate.public_test
    return str(path) if Path(path).is_dir() else store_paths(cfg)["public_test"]


def check_public_test(cfg: RunConfig, public: dict[str, Any], dataset: str) -> None:
    """Refuse a "public" test set that is the run's private data or any data with a privacy budget:
    it is scored exactly and its metrics go into the report uncharged. The same content (the
    private file or store itself, or a half of its split, charged to it) has the same budget id;
    the comparison stays here and the message names the key, not the data."""
    if public["dataset"] == dataset or Accountant(cfg.ledger).has_budget(public["dataset"]):
        raise ParameterError(
            f"{cfg.source_file}: evaluate.public_test: {cfg.evaluate.public_test} holds data with a "
            "privacy budget (this run's data, a part of it, or another private set): its exact "
            "metrics would be released uncharged; give a test set that is public, or leave "
            "evaluate.public_test out for private evaluation"
        )


@task(name="public-test", retries=1, **RAW)
def public_test(cfg: RunConfig, n_features: int) -> dict[str, Any]:
    """The user's public test set (a separate file or store), as a store (written on a worker)."""
    return on_a_worker("ingest-public-test", _public_test, cfg, n_features)


def _public_test(cfg: RunConfig, n_features: int) -> dict[str, Any]:
    path, out = cfg.evaluate.public_test, public_test_store(cfg)
    if out == str(path):  # a store already
        return store_summary(out)
    # public data, read with the source's declared columns (an svmlight source's index base; LIBSVM's otherwise)
    ingest_svmlight(path, out, force=True, n_features=n_features, zero_based="yes" if cfg.data.zero_based else "no")
    return store_summary(out)


@task(name="split", retries=1, **RAW)
def split(cfg: RunConfig, source: dict[str, Any], key: bytes) -> dict[str, dict[str, Any]]:
    """The keyed split (each record's side from its own content and the secret key) into two stores.

    The split is a function of the source and the key only: halves a previous run wrote from the
    same source, fraction and key are reused. Written on a worker.
    """
    return on_a_worker("ingest-split", _split, cfg, source, key)


def _split(cfg: RunConfig, source: dict[str, Any], key: bytes) -> dict[str, dict[str, Any]]:
    paths = store_paths(cfg)
    own = open_store(source["store"]).dataset_id
    if not all(_is_split_of(paths[h], own, cfg.data.test_fraction, key_id(key)) for h in ("train", "test")):
        split_store(source["store"], paths["train"], paths["test"], cfg.data.test_fraction, key, force=True)
    return {"train": store_summary(paths["train"]), "test": store_summary(paths["test"])}


def _is_split_of(path: str, dataset: str, test_fraction: float, key: str) -> bool:
    try:
        meta = open_store(path).meta
    except Exception:  # noqa: BLE001 - absent or unreadable: written anew
        return False
    return (
        meta.get("split_source", meta.get("split_of")) == dataset
        and meta.get("test_fraction") == test_fraction
        and meta.get("split_key_id") == key
    )  # halves without it (older) are split again


def _count_rows(cfg: RunConfig, stores: dict[str, Any], dataset: str) -> dict[str, Any]:
    """Release (n_train, n_test) + Lap(1/count_epsilon) each: one record is on one side (l1-sensitivity 1)."""
    eps = cfg.data.count_epsilon
    halves = [h for h in ("train", "test") if stores.get(h)]
    params = {"epsilon": eps, "halves": halves, "test_fraction": cfg.data.test_fraction}
    key = cfg.step_key("counts", "laplace", params)
    rng = check_random_state(cfg.step_seed(key))

    def compute() -> dict[str, float]:
        exact = np.array([open_store(stores[h]["store"]).shape[0] for h in halves], dtype=np.float64)
        noisy = Laplace(eps, 1.0, random_state=rng).randomise(exact)
        return {h: float(v) for h, v in zip(halves, np.atleast_1d(noisy))}

    return release(cfg.ledger, dataset, Charge(PrivacyLoss.laplace(eps), "counts/laplace"), key, compute, params)


def ingest_stage(cfg: RunConfig) -> dict[str, Any]:
    """Run on the active task runner: source store, budget, split, noisy counts. Returns their summaries."""
    logger = get_run_logger()
    source = make_source(cfg)
    store = open_store(source["store"])
    check_schema(store)  # a declared task and classes, before any charge
    dataset = source["dataset"]
    status = ensure_budget(cfg.ledger, dataset, cfg.budget.epsilon, cfg.budget.delta, cfg.budget.name)
    acc = Accountant(cfg.ledger)
    acc.budget_of(store)  # a half's legacy budget of its own counts too (here, in the flow process: the ledger's)
    logger.info("source store %s: dataset %s, %d features", source["store"], status["dataset"], source["n_features"])
    halves: dict[str, Any]  # each half's store summary (the test half None without a split)
    if cfg.data.test_fraction > 0:
        key = acc.split_key(dataset)
        if store.dataset_id != dataset:  # a part of a split splits again, by another key
            key = derive_key(key, "dpdist run")
        halves = split(cfg, source, key)
        for h in ("train", "test"):
            acc.budget_of(open_store(halves[h]["store"]))
    else:
        halves = {"train": source, "test": None}
    out = {
        "source": source,
        **halves,
        "dataset": dataset,
        "name": status["dataset"],
        "counts": None,
        "public_test": public_test(cfg, source["n_features"]) if cfg.evaluate.public_test else None,
    }
    if out["public_test"] is not None:
        check_public_test(cfg, out["public_test"], dataset)
    if cfg.data.count_epsilon > 0:
        out["counts"] = _count_rows(cfg, out, dataset)
        logger.info("noisy row counts: %s", ", ".join(f"{k} {v:.0f}" for k, v in out["counts"]["result"].items()))
    return out


@flow(name="dpdist-ingest")
def ingest(config: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Standalone ingest flow on the config's cluster (returns the public part of the summaries)."""
    cfg = load_config(config, overrides)
    stores = on_cluster(cfg, "dpdist-ingest-stage", ingest_stage)
    return {
        "dataset": stores["name"],
        "stores": {k: stores[k]["store"] for k in ("source", "train", "test") if stores.get(k)},
    }
