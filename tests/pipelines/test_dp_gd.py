"""DP-GD and DP-IHT over a 2-worker LocalCluster: the in-process steps, with the rows spread."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client, LocalCluster

from dpdist.data.store import write_store
from dpdist.gradient_models import DPGDClassifier, DPIHTClassifier
from dpdist.pipelines.dp_gd import dp_gd_store, fit_dask
from dpdist.solvers.dp_iht import dp_iht
from dpdist.solvers.dp_sgd import dp_sgd

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    X = sp.random(1200, 50, density=0.2, random_state=1, format="csr")
    y = np.where(X[:, 0].toarray().ravel() > X[:, 1].toarray().ravel(), 1.0, -1.0)
    path = tmp_path_factory.mktemp("s") / "store"
    write_store(path, X, y, task="binary", block_rows=100, labels=[-1.0, 1.0])
    return path, X, y


@pytest.fixture(scope="module")
def wide_store(tmp_path_factory):
    """Rows over few of many columns: each group holds fewer columns than the model (most in one or two rows,
    laid out by first use; the frequent ones by frequency), blocks of several sizes."""
    rng = np.random.default_rng(4)
    X = sp.random(1200, 3000, density=0.004, random_state=2, format="csr")
    X[:, :3] = rng.random((1200, 3)) < 0.5  # frequent columns beside the rare ones
    X = sp.csr_matrix(X)
    y = np.where(rng.random(1200) < 0.5, 1.0, -1.0)
    path = tmp_path_factory.mktemp("w") / "store"
    write_store(path, X, y, task="binary", block_rows=70, labels=[-1.0, 1.0])
    return path, X, y


@pytest.mark.parametrize("data", ["store", "wide_store"])
@pytest.mark.parametrize("cls, s", [(DPGDClassifier, None), (DPIHTClassifier, 5)])
def test_the_cluster_takes_the_in_process_steps(client, request, data, cls, s):
    path, X, y = request.getfixturevalue(data)
    kw = {"s": s} if s else {}
    model = cls(epsilon=2.0, max_iter=15, lr=20.0, n_records=1200, classes=[-1.0, 1.0], **kw)
    plan = model.sgd_plan(1200, model.privacy_charge(1200).details["noise_multiplier"])
    Xp = model.map_records(X, y)[0]
    local = dp_iht(Xp, y, plan, s, np.random.default_rng(3)) if s else dp_sgd(Xp, y, plan, np.random.default_rng(3))
    spread = dp_gd_store(client, path, plan, np.random.default_rng(3), "l2", 1.0, s)
    np.testing.assert_allclose(spread[0], local[0], rtol=1e-7, atol=1e-9)  # the same noise; sums in another order
    assert spread[1] == pytest.approx(local[1], rel=1e-7, abs=1e-9)
    seen: list[tuple[int, int]] = []
    out = fit_dask(client, str(path), model, 1200, 3, [-1.0, 1.0], lambda d, t: seen.append((d, t)))
    assert out["classes"] == [-1.0, 1.0] and out["path"] == [] and (s is None or len(out["indices"]) <= s)
    assert seen == [(t, plan.steps) for t in range(1, plan.steps + 1)]  # each step, for the run's display


def test_a_worker_lost_between_steps_changes_nothing_in_the_fit(store):
    """A worker killed as a step ends (its rows and the next iterate's copy lost with it) is survived: the
    fit ends with the same weights as with no loss (its lost groups are read again, the iterate sent
    again). The iterate was a broadcast scatter, whose replication asked the killed worker for ever."""
    import os
    import signal

    path, X, _ = store
    model = DPGDClassifier(epsilon=2.0, max_iter=12, lr=20.0, n_records=1200, classes=[-1.0, 1.0])
    plan = model.sgd_plan(1200, model.privacy_charge(1200).details["noise_multiplier"])
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        reference = dp_gd_store(c, path, plan, np.random.default_rng(5), "l2", 1.0)
        pids = c.run(os.getpid)
        victim = sorted(pids)[-1]
        killed: list[str] = []

        def kill_once(done: int, steps: int) -> None:
            if done == 4 and not killed:
                os.kill(pids[victim], signal.SIGKILL)
                killed.append(victim)

        survived = dp_gd_store(c, path, plan, np.random.default_rng(5), "l2", 1.0, progress=kill_once)
        assert killed and victim not in c.scheduler_info()["workers"]  # the worker was lost (its nanny restarts one)
    np.testing.assert_allclose(survived[0], reference[0], rtol=1e-12, atol=0)
    assert survived[1] == reference[1]


def _received(client) -> dict[str, list]:
    """The keys each worker has fetched from another worker so far."""
    return client.run(lambda dask_worker: [sorted(t["keys"]) for t in dask_worker.transfer_incoming_log])


def test_no_rows_move_between_workers_when_one_is_busy_as_the_fit_starts(client, store):
    """A worker busy when the fit starts: Dask's work stealing moved a step's task, and its group's rows, to
    the idle worker (as a step's sums did on the multi-node cluster). A group's tasks run where it lies only."""
    import time

    path, X, y = store
    model = DPGDClassifier(epsilon=2.0, max_iter=8, lr=20.0, n_records=1200, classes=[-1.0, 1.0])
    plan = model.sgd_plan(1200, model.privacy_charge(1200).details["noise_multiplier"])
    reference = dp_gd_store(client, path, plan, np.random.default_rng(7), "l2", 1.0)
    before = _received(client)
    busy = client.submit(time.sleep, 3.0, workers=sorted(before)[:1], allow_other_workers=False, pure=False)
    time.sleep(0.3)
    spread = dp_gd_store(client, path, plan, np.random.default_rng(7), "l2", 1.0)
    busy.result()
    assert _received(client) == before
    np.testing.assert_allclose(spread[0], reference[0], rtol=1e-12, atol=0)


def _times_out(group, *args):
    raise TimeoutError("a task's own timeout")


def test_a_task_that_raises_timeouterror_fails_the_fit_at_once(client, store):
    """A group task's own TimeoutError (an NFS read, say) is its error, raised: not taken for the watchdog's
    timeout, which had the fit wait for ever."""
    import time

    from dpdist.pipelines.dp_gd import _Groups

    groups = _Groups(client, str(store[0]), ("l2", "logistic", 1.0))
    started = time.perf_counter()
    with pytest.raises(TimeoutError, match="own timeout"):
        groups.map("timeout", _times_out, [()] * len(groups.futures))
    assert time.perf_counter() - started < 30


def _slow_sum(group, w):
    import time

    time.sleep(1.5)
    return float(w.sum()) + group[1].size


def test_a_worker_lost_during_a_step_has_its_task_sent_again(store):
    """A worker killed while its group's task runs: the iterate sent straight to it is lost with it (the task
    is cancelled by the scheduler), the group is read again on the other worker and the task sent there again
    with its arrays: the same results, and nothing waits for ever."""
    import os
    import signal
    import time

    from dpdist.pipelines.dp_gd import _Groups

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        groups = _Groups(c, str(store[0]), ("l2", "logistic", 1.0))
        args = [(np.full(cols.size, 2.0),) for cols in groups.columns]
        reference = groups.map("slow", _slow_sum, args)
        pids = c.run(os.getpid)
        pending = groups.submit("slow", _slow_sum, args)
        first = pending.tasks[0].key
        victim = groups.where[0]
        time.sleep(0.5)
        os.kill(pids[victim], signal.SIGKILL)
        started = time.perf_counter()
        assert groups.gather(pending) == reference
        assert pending.tasks[0].key != first and groups.where[0] != victim  # sent again, elsewhere
        assert time.perf_counter() - started < 60


def test_an_iterate_that_cannot_be_sent_straight_to_its_worker_goes_in_the_task(client, store, monkeypatch):
    """A worker that is paused or cannot be reached from the flow (a direct send fails while the scheduler lists
    it): the iterate goes in the task, through the scheduler, as before; the same fit."""
    path, X, y = store
    model = DPGDClassifier(epsilon=2.0, max_iter=6, lr=20.0, n_records=1200, classes=[-1.0, 1.0])
    plan = model.sgd_plan(1200, model.privacy_charge(1200).details["noise_multiplier"])
    reference = dp_gd_store(client, path, plan, np.random.default_rng(11), "l2", 1.0)
    tried: list[str] = []

    def refuse(data, workers=None, **kw):
        tried.append(workers[0])
        raise OSError("unreachable from here")

    monkeypatch.setattr(client, "scatter", refuse)
    spread = dp_gd_store(client, path, plan, np.random.default_rng(11), "l2", 1.0)
    assert len(tried) == 2 * plan.steps  # every send tried straight first
    np.testing.assert_array_equal(spread[0], reference[0])
    assert spread[1] == reference[1]
