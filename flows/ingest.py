"""Flow stage ``ingest``: the source (svmlight file, synthetic set or existing store) as a zarr
store, and its public train/test split, written under ``<output>/stores/``.

The tasks run on Dask workers (the task runner's cluster); they return only store metadata.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.logging import get_run_logger

from dpdist.data.ingest import ingest_svmlight
from dpdist.data.split import split_store
from dpdist.data.store import open_store
from dpdist.data.synthetic import write_synthetic
from dpdist.utils.files import private_dir
from flows.config import RunConfig, load_config
from flows.release import RAW
from flows.runtime import on_cluster

__all__ = ["ingest", "ingest_stage", "store_paths"]

def store_paths(cfg: RunConfig) -> dict[str, str]:
    """Where the stage puts (or finds) the source store and the two halves of the split."""
    root = Path(cfg.output) / "stores"
    source = cfg.data.path if cfg.data.source == "store" else str(root / "source")
    return {"source": str(source), "train": str(root / "train"), "test": str(root / "test")}


def store_summary(path: str) -> dict[str, Any]:
    """What the flow passes on and reports of a store: its public shape and identity (no statistic)."""
    s = open_store(path)
    return {"store": path, "dataset_id": s.dataset_id, "n_rows": s.shape[0], "n_features": s.shape[1],
            "task": s.task, "true_support": s.meta.get("true_support")}


@task(name="ingest-source", retries=1, **RAW)
def make_source(cfg: RunConfig) -> dict[str, Any]:
    """Write the source store (synthetic or svmlight) or check an existing one."""
    out = store_paths(cfg)["source"]
    private_dir(Path(store_paths(cfg)["train"]).parent)  # <output>/stores: raw records, owner-only
    d = cfg.data
    if d.source == "synth":
        write_synthetic(d.name, out, seed=d.data_seed, force=True, n=d.n, d=d.d)
    elif d.source == "svmlight":
        ingest_svmlight(d.path, out, force=True, n_features=d.n_features)
    return store_summary(out)


@task(name="split", retries=1, **RAW)
def split(cfg: RunConfig, source: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The public split (per-row Bernoulli draws from ``split_seed``) into train and test stores."""
    paths = store_paths(cfg)
    split_store(source["store"], paths["train"], paths["test"], cfg.data.test_fraction, cfg.data.split_seed,
                force=True)
    return {"train": store_summary(paths["train"]), "test": store_summary(paths["test"])}


def ingest_stage(cfg: RunConfig) -> dict[str, Any]:
    """Run on the active task runner: source store, then its split. Returns their summaries."""
    logger = get_run_logger()
    source = make_source.submit(cfg).result()
    logger.info("source store %s: %d x %d, dataset %s", source["store"], source["n_rows"], source["n_features"],
                source["dataset_id"])
    halves = split.submit(cfg, source).result()
    logger.info("split: %d train rows, %d test rows", halves["train"]["n_rows"], halves["test"]["n_rows"])
    return {"source": source, **halves}


@flow(name="dpdist-ingest")
def ingest(config: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Standalone ingest flow on the config's cluster."""
    cfg = load_config(config, overrides)
    return on_cluster(cfg, "dpdist-ingest-stage", ingest_stage)
