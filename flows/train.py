"""Flow stage ``train``: private models on the train store, one per (method, epsilon).

Each fit is one process (``dpdist.pipelines.train.fit_on_solver``): it runs on a worker holding the
``solver`` resource, inside the central ``release`` task and therefore after the charge. DP-GD
and DP-IHT instead run their full-batch steps over the whole cluster (``dpdist.pipelines.dp_gd``): the
workers sum the clipped gradients of their row blocks, the release task adds the noise.
With ``train.features`` naming a selection method, the model is fitted on the columns that
selection released (post-processing of a release: no extra charge); objective perturbation
(two-stage's stage 2) always is.
"""

from __future__ import annotations

import functools
from typing import Any

from prefect import flow
from prefect.logging import get_run_logger

from dpdist.data.split import derive_key
from dpdist.exceptions import ParameterError
from dpdist.flows.config import RunConfig, load_config
from dpdist.flows.ingest import ingest_stage
from dpdist.flows.plan import train_model, train_params
from dpdist.flows.release import release
from dpdist.flows.results import read_stage, write_models
from dpdist.flows.runtime import cluster_client, on_cluster
from dpdist.flows.select import select_stage
from dpdist.methods import get
from dpdist.pipelines.dp_gd import fit_dask
from dpdist.pipelines.train import FitJob, fit_on_solver
from dpdist.privacy.accountant import Accountant
from dpdist.utils import run_display

__all__ = ["fit_params", "train", "train_stage"]


def fit_params(
    cfg: RunConfig, task: str, method: str, epsilon: float, features: list[int] | None, n_records: int | None = None
) -> dict[str, Any]:
    """The release parameters of one fit (hashed into its key): the estimator's, the features, the
    method and the values' dtype -- the dtype only when set away from float64, so that the keys of
    configs written before it stay the same; a gradient learner's public count of its records."""
    est = train_model(cfg, task, method, epsilon, n_records)
    if get(method).counted:
        params = est.release_params(len(features) if features else 0, n_records)
        return {**params, "features": features, "method": method}
    params = {**est.release_params(), "features": features, "method": method}
    if cfg.train.dtype != "float64":
        params["dtype"] = cfg.train.dtype
    return params


def train_stage(cfg: RunConfig, stores: dict[str, Any], selection: dict[str, Any] | None = None) -> list[dict]:
    """Release one model per (train method, epsilon); returns the release records."""
    logger = get_run_logger()
    dataset = stores["dataset"]
    train_store = stores["train"]
    t = cfg.train
    features = None
    if t.features != "all":
        features = (selection or read_stage(cfg, "selection"))[t.features]["features"]
    n_features = len(features) if features is not None else train_store["n_features"]
    n_records = cfg.train_records((stores.get("counts") or {}).get("result"))
    task = train_store["task"]
    for method in cfg.train_methods():
        if get(method).counted and n_records is None:
            raise ParameterError(
                f"{method} needs a public count of the training records (train.n_records, or a synthetic source's n)"
            )
    estimators = {(m, e): train_model(cfg, task, m, e, n_records) for m in cfg.train_methods() for e in t.epsilon}
    for est in estimators.values():  # every model's public width, before the first model is charged
        est.check_width(n_features)
    out: list[dict] = []
    for method in cfg.train_methods():
        entry = get(method)
        for eps in t.epsilon:
            params = fit_params(cfg, task, method, eps, features, n_records)
            key = cfg.step_key("train", method, params)
            seed = cfg.step_seed(key)
            logger.info(
                "%s at epsilon=%g on %s",
                method,
                eps,
                "all features" if features is None else f"the {len(features)} {t.features} features",
            )
            # the private search's validation split: a secret key derived from the dataset's (never logged)
            split_key = (
                derive_key(Accountant(cfg.ledger).split_key(dataset), f"{key} validation") if entry.own_split else None
            )
            job = FitJob(
                train_store["store"],
                method,
                train_params(cfg, task, method, eps, n_records, seed),
                features=features,
                dtype=t.dtype,
                split_key=split_key,
            )

            def compute(job: FitJob = job) -> dict[str, Any]:
                if get(job.method).row_blocks and job.features is None:  # full-batch steps over the row blocks
                    model = get(job.method).build(train_store["task"], **job.params)
                    classes = model.get_params().get("classes")
                    shown = functools.partial(run_display.work, f"train {job.method} at epsilon={model.epsilon:g}")
                    return fit_dask(
                        client, train_store["store"], model, n_records, job.params["random_state"], classes, shown
                    )
                return fit_on_solver(client, job)

            # its iterations follow from the worker; no clock for the private search (its duration is secret)
            run_display.work(f"train {method} at epsilon={eps:g}", timed=not entry.secret_duration)
            charge = estimators[method, eps].privacy_charge(n_features=n_features)  # as train_charge plans it
            with cluster_client() as client:  # before the release: a missing cluster is never its outcome
                rec = release(cfg.ledger, dataset, charge, key, compute, params)
            rec.update(method=method, target_epsilon=eps, lam=t.lam, iters=t.iters, features=t.features)
            out.append(rec)
            logger.info("%s at epsilon=%g: %d non-zero weights", method, eps, len(rec["result"]["indices"]))
    write_models(cfg, out)
    return out


def _train_all(cfg: RunConfig) -> list[dict]:
    stores = ingest_stage(cfg)
    selection = select_stage(cfg, stores) if cfg.train.features != "all" else None
    return train_stage(cfg, stores, selection)


@flow(name="dpdist-train")
def train(config: str | None = None, overrides: dict[str, Any] | None = None) -> list[dict]:
    """Standalone training flow: ingest and split, (select if the model needs it), train."""
    cfg = load_config(config, overrides)
    return on_cluster(cfg, "dpdist-train-stage", _train_all)
