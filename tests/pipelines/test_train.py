"""The flow's model fits on a worker (``dpdist.pipelines.train.fit_store``) and the exact scoring of a public
test set (``dpdist.flows.evaluate.public_metrics``), run in process: what ``train.methods =
["objective-perturbation"]`` and ``evaluate.public_test`` reach (issue 12 item 8, issue 12 Build)."""

from __future__ import annotations

import numpy as np
import pytest

from dpdist.data.store import write_store
from dpdist.data.synthetic import make_synthetic
from dpdist.evaluation import exact_metrics, sparse_coef
from dpdist.flows.evaluate import public_metrics
from dpdist.methods import get
from dpdist.pipelines.train import STORE_CLASSES, FitJob, fit_store


def fw_job(path, method, lam, iters, seed, **params):
    """The job of a Frank-Wolfe fit at epsilon = 1, delta = 1e-6 on a binary store."""
    params = {"epsilon": 1.0, "delta": 1e-6, "lam": lam, "max_iter": iters, "random_state": seed, **params}
    dtype = params.pop("dtype", "float64")
    return FitJob(str(path), method, {**params, "classes": STORE_CLASSES}, dtype=dtype)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    X, y = make_synthetic("rcv1", random_state=0, n=1200, d=300).materialize()
    root = tmp_path_factory.mktemp("s")
    write_store(root / "train", X[:1000], y[:1000], task="binary")
    write_store(root / "test", X[1000:], y[1000:], task="binary")
    return root, X[1000:].tocsr(), np.where(y[1000:] > 0, 1.0, -1.0)


def test_objective_perturbation_on_a_selection_is_a_model_in_store_columns(stores):
    root, _, _ = stores
    features = [3, 17, 42, 99, 250]
    params = {"epsilon": 1.0, "random_state": 1, "classes": STORE_CLASSES}
    rec = fit_store(FitJob(str(root / "train"), "objective-perturbation", params, features))
    assert rec["indices"] == features and len(rec["values"]) == len(features)
    assert rec["path"] == [] and rec["iterations"] == 0 and rec["n_features"] == 300
    charge = get("objective-perturbation").build("binary", epsilon=1.0).privacy_charge()
    assert charge.mechanism == "objective_perturbation/logistic" and charge.epsilon == pytest.approx(1.0)


def test_a_public_test_set_is_scored_exactly_and_labelled_public(stores):
    root, Xte, yte = stores
    model = {"result": fit_store(fw_job(root / "train", "fast-fw", 50.0, 100, 1)), "lam": 50.0}
    got = public_metrics.fn(str(root / "test"), model)
    w = sparse_coef(model["result"]["indices"], model["result"]["values"], 300)
    assert got["private"] is False and got["accuracy"] == exact_metrics("binary", w, Xte, yte)["accuracy"]
    assert len(got["curve_iterations"]) == len(got["curve_loss"]) > 0


def test_a_private_model_on_a_one_class_half_is_fitted_not_refused(tmp_path):
    """The classes are the store's public label mapping (-1, +1), not the classes a half happens to
    hold: whether a fit is refused must not depend on one record (issue 12: no data-dependent refusal)."""
    X, _ = make_synthetic("rcv1", random_state=0, n=200, d=50).materialize()
    write_store(tmp_path / "one", X, np.ones(200), task="binary", labels=[-1.0, 1.0])
    rec = fit_store(fw_job(tmp_path / "one", "fast-dp-fw", 5.0, 20, 1))
    assert rec["classes"] == [-1.0, 1.0] and len(rec["path"]) == 20


@pytest.mark.parametrize("bounds", ["clip", "check"])
def test_a_fit_on_all_columns_reads_the_stored_csc_copy_and_fits_as_in_memory(tmp_path, monkeypatch, bounds):
    """fit_store on every column: the store's CSC copy, clipped in place, instead of X.tocsc() and a
    clipped copy (the memory of a KDDA-sized fit); the model is the in-memory fit's, step for step."""
    import scipy.sparse as sp

    from dpdist.exceptions import ParameterError

    X, y = make_synthetic("rcv1", random_state=2, n=300, d=80).materialize()
    X = X.tocsr()
    X.data *= 3.0  # entries above the bound: clipped per entry, or refused
    write_store(tmp_path / "s", X, y, task="binary", labels=[-1.0, 1.0])
    est = fw_job(tmp_path / "s", "fast-dp-fw", 10.0, 60, 7, bounds="clip")
    est = get(est.method).build("binary", **est.params)
    est.fit(X, np.where(y > 0, 1.0, -1.0))
    monkeypatch.setattr(sp.csr_matrix, "tocsc", lambda *a, **k: pytest.fail("X converted to CSC"))
    if bounds == "check":
        with pytest.raises(ParameterError, match=r"\|X_ij\| <= 1"):
            fit_store(fw_job(tmp_path / "s", "fast-dp-fw", 10.0, 60, 7, bounds=bounds))
        return
    rec = fit_store(fw_job(tmp_path / "s", "fast-dp-fw", 10.0, 60, 7, bounds=bounds))
    assert rec["path"] == [int(v) for v in est.path_]
    np.testing.assert_array_equal(rec["values"], est.coef_.ravel()[rec["indices"]])


def test_a_float32_fit_on_a_store_is_the_float64_fit_of_the_rounded_values(tmp_path):
    """fit_store(FitJob(dtype="float32")) (the run config's train.dtype) reads both copies as float32 and
    fits the same model as the float64 fit of the values rounded to float32."""
    X, y = make_synthetic("rcv1", random_state=2, n=300, d=80).materialize()
    X = X.tocsr()
    write_store(tmp_path / "s", X, y, task="binary", labels=[-1.0, 1.0])
    X32 = X.astype(np.float32)
    write_store(tmp_path / "r", X32.astype(np.float64), y, task="binary", labels=[-1.0, 1.0])
    a = fit_store(fw_job(tmp_path / "s", "fast-dp-fw", 10.0, 60, 7, dtype="float32"))
    b = fit_store(fw_job(tmp_path / "r", "fast-dp-fw", 10.0, 60, 7))
    assert a == b and len(a["path"]) == 60
    assert (X32 != X).nnz > 0  # the values did round


def test_a_failed_fit_logs_its_task_without_the_split_key(tmp_path):
    """A fit that fails on a worker is logged by Dask with its task's arguments ("Compute Failed ... Task:",
    when its key is short enough for Dask to print them), in the worker's log that the dashboard serves:
    the private search's split key is not among them."""
    from distributed import Client, LocalCluster

    secret = bytes(range(200, 232))
    job = FitJob(
        str(tmp_path / "absent"), "private-search", {"epsilon": 1.0, "delta": 1e-6, "n_records": 100}, split_key=secret
    )
    assert "split_key" not in repr(job) and repr(secret) not in repr(job)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as lc, Client(lc) as client:
        with pytest.raises(Exception):
            client.submit(fit_store, job, key="fit").result()
        logs = "\n".join(line for lines in client.get_worker_logs().values() for _, line in lines)
    assert "Compute Failed" in logs and "private-search" in logs  # the failure was logged, with the job
    assert repr(secret) not in logs and secret.hex() not in logs
