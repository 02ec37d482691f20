"""Flow stage ``evaluate``: held-out metrics of the released models, released privately.

The test half of the split holds records of the source dataset, so each model's metrics and
convergence curve leave only through :class:`dpdist.evaluation.PrivateEvaluation` (Laplace on
class-wise margin histograms / clipped sums, and on clipped losses at a few checkpoints of the
released path), charged to the source's budget (``evaluate.epsilon`` per model) in the
central ``release`` task; the work itself runs on a cluster worker inside the release.

A test file the user declares public (``evaluate.public_test``) is scored exactly, and the
report labels those numbers so. Selections are scored against the true support of a synthetic
set (public: the generator's parameters).
"""

from __future__ import annotations

import os
from typing import Any

from prefect import flow, task
from prefect.logging import get_run_logger

from dpdist.data.store import open_store
from dpdist.evaluation import PrivateEvaluation, exact_metrics, path_losses, support_recall
from dpdist.exceptions import ParameterError
from dpdist.flows.config import RunConfig, load_config, store_paths
from dpdist.flows.ingest import check_public_test, public_test_store, store_summary
from dpdist.flows.plan import evaluation
from dpdist.flows.release import release
from dpdist.flows.results import read_models, read_stage, write_stage
from dpdist.flows.runtime import cluster_client, on_cluster
from dpdist.selection.sis import store_target

__all__ = ["evaluate", "evaluate_stage"]


def _private_metrics(test_path: str, result: dict[str, Any], lam: float, ev: PrivateEvaluation) -> dict[str, Any]:
    """On a worker: the noisy metrics (and curve) of one released model (run after the charge)."""
    store = open_store(test_path)
    return ev.evaluate_model(result, store.csr(), store_target(store), lam)


def _with_arrays(result: dict[str, Any]) -> dict[str, Any]:
    """A released model's result with its weights as two arrays: sent to a worker as two buffers, where a
    dense model of KDDA's width as lists was 40M Python numbers to pickle and unpickle (tens of seconds)."""
    import numpy as np

    indices = np.asarray(result["indices"], dtype=np.int64)
    return {**result, "indices": indices, "values": np.asarray(result["values"], dtype=np.float64)}


@task(name="evaluate-public", retries=1)
def public_metrics(test_path: str, model: dict[str, Any]) -> dict[str, Any]:
    """Exact metrics and curve on a test set the user declared public."""
    store = open_store(test_path)
    X, y = store.csr(), store_target(store)
    r = model["result"]
    its, losses = (
        path_losses(store.task, r["path"], model["lam"], X, y, screened=r.get("screened")) if r["path"] else ([], [])
    )
    return {**exact_metrics(store.task, r, X, y), "curve_iterations": its, "curve_loss": losses, "private": False}


def _ceiling(Xtr: Any, ytr: Any, Xte: Any, yte: Any, task: str) -> dict[str, Any]:
    """The non-private ceiling every private learner is measured against: scikit-learn's L1-penalised
    logistic regression (C = 1), or its Lasso for regression, on the same (public) rows."""
    import numpy as np
    from sklearn.linear_model import Lasso, LogisticRegression

    if task == "regression":
        m = Lasso(alpha=1e-4, max_iter=5000).fit(Xtr, ytr)
        pred = m.predict(Xte)
        var = float(((yte - yte.mean()) ** 2).sum())
        mse = float(np.mean((yte - pred) ** 2))
        return {"mse": mse, "r2": 1.0 - mse * yte.size / var if var > 0 else None, "what": "scikit-learn Lasso"}
    m = LogisticRegression(C=1.0, l1_ratio=1.0, solver="liblinear").fit(Xtr, ytr)
    return {
        **exact_metrics(
            task,
            {
                "indices": list(range(Xtr.shape[1])),
                "values": m.coef_.ravel().tolist(),
                "intercept": float(m.intercept_[0]),
            },
            Xte,
            yte,
        ),
        "what": "scikit-learn L1 logistic (C = 1)",
    }


@task(name="reference", retries=1)
def reference(train_path: str, test_path: str, lam: float, iters: int) -> dict[str, Any]:
    """Exact references on *public* data only (a synthetic set): a non-private fast FW fit at the run's
    lambda and T, the non-private ceiling (scikit-learn), and the majority class (classification) or the
    train mean (regression)."""
    import numpy as np

    from dpdist.methods import get
    from dpdist.selection.sis import STORE_CLASSES

    train, test = open_store(train_path), open_store(test_path)
    Xtr, ytr = train.csr(), store_target(train)
    Xte, yte = test.csr(), store_target(test)
    model = get("fast-fw").build(train.task, lam=lam, max_iter=iters, classes=STORE_CLASSES).fit(Xtr, ytr)
    out = {
        "non_private": exact_metrics(test.task, model.coef_.ravel(), Xte, yte),
        "ceiling": _ceiling(Xtr, ytr, Xte, yte, test.task),
    }
    if test.task == "regression":
        out["baseline"] = {"mse": float(np.mean((yte - ytr.mean()) ** 2)), "r2": 0.0, "what": "the train mean"}
    else:
        major = 1.0 if (ytr > 0).mean() >= 0.5 else -1.0
        out["baseline"] = {
            "accuracy": float(np.mean(yte == major)),
            "balanced_accuracy": 0.5,
            "auc": 0.5,
            "what": "the majority class",
        }
    return out


def _reference(cfg: RunConfig, stores: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The public references and what they were computed on (a digest of the train and test stores' ids, lambda
    and T: synthetic, public data only): read back from the run's last evaluation when it was computed on the
    same (a replayed run recomputes nothing: minutes of non-private fits), else computed."""
    import hashlib
    import json

    train, test = stores["train"]["store"], stores["test"]["store"]
    ids = [open_store(train).dataset_id, open_store(test).dataset_id, cfg.train.lam, cfg.train.iters]
    basis = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
    try:
        last = read_stage(cfg, "evaluation")
    except (ParameterError, ValueError):  # no earlier evaluation, or an unreadable one: computed
        last = {}
    if isinstance(last, dict) and last.get("reference_of") == basis and last.get("reference"):
        return last["reference"], basis
    return reference(train, test, cfg.train.lam, cfg.train.iters), basis


def evaluate_stage(
    cfg: RunConfig, stores: dict[str, Any], selection: dict[str, Any] | None, models: list[dict] | None
) -> dict[str, Any]:
    """Score every model and selection of the run; returns the evaluation record."""
    logger = get_run_logger()
    truth = stores["source"].get("true_support")
    sel_eval = {
        m: {"features": rec["features"], "true_support_recall": support_recall(rec["features"], truth)}
        for m, rec in (selection or {}).items()
    }
    e = cfg.evaluate
    model_eval = []
    for m in models or []:
        r = m["result"]
        if stores.get("public_test"):
            metrics = public_metrics(stores["public_test"]["store"], m)
            charge_info = {"evaluation_key": None, "evaluation_epsilon": 0.0}
        else:
            params = {"model": m["key"], "epsilon": e.epsilon, "bins": e.bins, "points": e.points}
            key = cfg.step_key("evaluate", m["method"], params)
            seed = cfg.step_seed(key)
            ev = evaluation(cfg, stores["test"]["task"], m["method"], seed)

            def compute(m: dict = m, ev: PrivateEvaluation = ev) -> dict[str, Any]:
                key = f"evaluate-{m['method']}-{os.urandom(6).hex()}"  # named for the Dask dashboard
                test = stores["test"]["store"]
                return client.submit(
                    _private_metrics, test, _with_arrays(m["result"]), m["lam"], ev, pure=False, key=key
                ).result()

            with cluster_client() as client:  # before the release: a missing cluster is never its outcome
                rec = release(cfg.ledger, stores["dataset"], ev.privacy_charge(), key, compute, params)
            metrics = rec["result"]
            charge_info = {"evaluation_key": key, "evaluation_epsilon": rec["epsilon"]}
        model_eval.append(
            {
                "method": m["method"],
                "learner": r.get("learner"),  # the learner auto ran (a choice on public values)
                "epsilon": m["target_epsilon"],
                "charged_epsilon": m["epsilon"],
                "delta": m["delta"],
                "form": m.get("form"),
                "key": m["key"],
                "replayed": m["replayed"],
                "features": m["features"],
                "nnz_weights": len(r["indices"]),
                "density": len(r["indices"]) / max(int(r.get("n_features") or 0), 1),
                "iterations": r["iterations"],
                **charge_info,
                **metrics,
            }
        )
        logger.info(
            "%s epsilon=%g: %s (%s)",
            m["method"],
            m["target_epsilon"],
            ", ".join(f"{k} {metrics[k]:.4f}" for k in ("accuracy", "auc", "mse", "r2") if metrics.get(k) is not None),
            "private" if metrics["private"] else "public test set, exact",
        )
    ref, basis = None, None
    if models and cfg.data.source == "synth" and stores.get("test"):  # public data: references cost no privacy
        ref, basis = _reference(cfg, stores)
    out = {"selections": sel_eval, "models": model_eval, "true_support": truth, "reference": ref}
    if basis is not None:
        out["reference_of"] = basis
    write_stage(cfg, "evaluation", out)
    return out


def _evaluate_saved(cfg: RunConfig) -> dict[str, Any]:
    from dpdist.privacy.accountant import Accountant

    paths = store_paths(cfg)
    source = store_summary(paths["source"])
    acc = Accountant(cfg.ledger)
    stores = {
        "source": source,
        "dataset": source["dataset"],
        "name": acc.name(source["dataset"]),
        "test": store_summary(paths["test"]) if cfg.data.test_fraction > 0 else None,
        "public_test": store_summary(public_test_store(cfg)) if cfg.evaluate.public_test else None,
    }
    if stores["public_test"] is not None:
        check_public_test(cfg, stores["public_test"], source["dataset"])
    selection = read_stage(cfg, "selection") if cfg.select.methods else None
    models = read_models(cfg) if cfg.train_methods() else None
    return evaluate_stage(cfg, stores, selection, models)


@flow(name="dpdist-evaluate")
def evaluate(config: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Standalone evaluation of a finished run's releases (``selection.json``, ``models.json``)."""
    cfg = load_config(config, overrides)
    return on_cluster(cfg, "dpdist-evaluate-stage", _evaluate_saved)
