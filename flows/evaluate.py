"""Flow stage ``evaluate``: held-out metrics of the released models and selections.

One task per model runs on the cluster: it reads the test store and scores the released
weights, and rebuilds the iterates from the released vertex path for the convergence curve.
Selections are scored against the true support when the data is synthetic.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, task
from prefect.logging import get_run_logger

from dpdist.data.store import open_store
from dpdist.evaluation import model_metrics, path_losses, sparse_coef, support_recall
from dpdist.selection.sis import store_target
from flows.config import RunConfig, load_config
from flows.ingest import store_paths, store_summary
from flows.release import RAW
from flows.results import read_stage, write_stage
from flows.runtime import on_cluster

__all__ = ["evaluate", "evaluate_stage"]


@task(name="evaluate-model", retries=1, **RAW)
def evaluate_model(test_path: str, model: dict[str, Any]) -> dict[str, Any]:
    """Held-out metrics and the held-out loss along the path of one released model."""
    store = open_store(test_path)
    X, y = store.csr(), store_target(store)
    r = model["result"]
    w = sparse_coef(r["indices"], r["values"], store.shape[1])
    its, losses = path_losses(store.task, r["path"], model["lam"], X, y)
    return {**model_metrics(store.task, w, X, y), "curve_iterations": its, "curve_loss": losses}


def evaluate_stage(cfg: RunConfig, stores: dict[str, Any], selection: dict[str, Any] | None,
                   models: list[dict] | None) -> dict[str, Any]:
    """Score every model and selection of the run; returns the evaluation record."""
    logger = get_run_logger()
    truth = stores["source"].get("true_support")
    sel_eval = {m: {"features": rec["features"], "true_support_recall": support_recall(rec["features"], truth)}
                for m, rec in (selection or {}).items()}
    futures = [evaluate_model.submit(stores["test"]["store"], m) for m in (models or [])]
    model_eval = []
    for m, fut in zip(models or [], futures):
        metrics = fut.result()
        r = m["result"]
        model_eval.append({"method": m["method"], "epsilon": m["target_epsilon"], "charged_epsilon": m["epsilon"],
                           "delta": m["delta"], "key": m["key"], "replayed": m["replayed"], "features": m["features"],
                           "nnz_weights": len(r["indices"]), "iterations": r["iterations"], "seconds": r["seconds"],
                           "seconds_per_iter": r["seconds"] / max(1, r["iterations"]), **metrics})
        logger.info("%s epsilon=%g: %s", m["method"], m["target_epsilon"],
                    ", ".join(f"{k} {metrics[k]:.4f}" for k in ("accuracy", "auc", "mse") if k in metrics))
    out = {"selections": sel_eval, "models": model_eval, "true_support": truth}
    write_stage(cfg, "evaluation", out)
    return out


def _evaluate_saved(cfg: RunConfig) -> dict[str, Any]:
    paths = store_paths(cfg)
    stores = {name: store_summary(p) for name, p in paths.items()}
    selection = read_stage(cfg, "selection") if cfg.select.methods else None
    models = read_stage(cfg, "models") if cfg.train.methods else None
    return evaluate_stage(cfg, stores, selection, models)


@flow(name="dpdist-evaluate")
def evaluate(config: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Standalone evaluation of a finished run's releases (``selection.json``, ``models.json``)."""
    cfg = load_config(config, overrides)
    return on_cluster(cfg, "dpdist-evaluate-stage", _evaluate_saved)
