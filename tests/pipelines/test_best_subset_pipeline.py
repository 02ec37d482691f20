"""BSS on a real 2-worker LocalCluster: the same releases as in one process; MIPs on ``mip`` workers."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client, LocalCluster

from dpdist.data.store import write_store
from dpdist.data.synthetic import make_synthetic
from dpdist.exceptions import ParameterError
from dpdist.pipelines.best_subset import MIP_RESOURCE, DaskExecutor, ProblemSpec, select_store
from dpdist.privacy.accountant import Accountant
from dpdist.selection.best_subset import BSSMistakesSelector, BSSTopRSelector
from dpdist.selection.best_subset.executor import LocalExecutor
from dpdist.selection.best_subset.top_r import top_r_list


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            resources={MIP_RESOURCE: 1, "solver": 1},
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    X, y = make_synthetic("bss", 0, n=3000, d=20, s=3).materialize()
    path = tmp_path_factory.mktemp("s") / "bss"
    meta = write_store(path, X, y, task="regression")
    return path, X.toarray(), y, meta["dataset_id"]


def test_dask_executor_gives_the_in_process_list(client, store):
    path, X, y, _ = store
    sel = BSSTopRSelector(s=3, bounds="clip")
    spec = ProblemSpec.of(path, sel)
    ex = DaskExecutor(client, spec)
    assert ex.workers == 2 and ex.meta.p == 20
    local = LocalExecutor(sel.make_problem(X, y))
    a = top_r_list(ex, 1e-3 * ex.meta.delta, 60)
    b = top_r_list(local, 1e-3 * local.meta.delta, 60)
    assert a.center == b.center and a.R == b.R
    np.testing.assert_allclose(np.sort(a.listed()[1]), np.sort(b.listed()[1]), rtol=1e-10)


def test_select_store_charges_and_releases(client, store, tmp_path):
    path, _, _, dataset = store
    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget(dataset, 10.0, 1e-5)
    got = select_store(client, path, BSSTopRSelector(s=3, epsilon=2.0, bounds="clip"), acc, dataset)
    assert got.tolist() == [1, 3, 5]
    got = select_store(client, path, BSSMistakesSelector(s=3, epsilon=4.0, bounds="clip"), acc, dataset)
    assert got.tolist() == [1, 3, 5]
    assert acc.status(dataset).epsilon_spent == pytest.approx(6.0)
    with pytest.raises(ParameterError, match="x_bound"):  # validated on a worker before the charge
        select_store(client, path, BSSTopRSelector(s=3, epsilon=1.0), acc, dataset)
    assert acc.status(dataset).epsilon_spent == pytest.approx(6.0)


def test_a_cluster_without_mip_workers_is_an_error_not_a_hang(store):
    class NoMipClient:  # a cluster whose workers were started without `--resources mip=1`
        def scheduler_info(self, n_workers: int = 5) -> dict:
            return {"workers": {"tls://w1": {"resources": {"solver": 1}}, "tls://w2": {"resources": {}}}}

        def submit(self, *args, **kwargs):
            raise AssertionError("nothing may be submitted: a MIP task would wait forever")

    with pytest.raises(ParameterError, match="'mip' resource"):
        DaskExecutor(NoMipClient(), ProblemSpec.of(store[0], BSSTopRSelector(s=3, bounds="clip")))
