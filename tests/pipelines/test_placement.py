"""Task placement (``dpdist.pipelines.placement.pinned``)."""

from __future__ import annotations

import dask

from dpdist.pipelines.placement import pinned


def _annotations(addresses: list[str], i: int) -> dict:
    with pinned(i, addresses):
        task = dask.delayed(sum)([1, 2])
    return dict(task.dask.layers[task.key[0] if isinstance(task.key, tuple) else task.key].annotations or {})


def test_blocks_are_pinned_loosely_to_one_of_several_workers():
    a = _annotations(["tls://w1:1", "tls://w2:2"], 3)
    assert a == {"workers": ["tls://w2:2"], "allow_other_workers": True}


def test_nothing_is_pinned_to_a_single_worker():
    """A restriction to the only worker outlives it: when its nanny restarts it under a new
    address, distributed keeps the task in "no-worker" for ever (the full-shape Webspam run hung)."""
    assert _annotations(["tls://w1:1"], 0) == {}
    assert _annotations([], 0) == {}


def test_a_loosely_pinned_task_left_without_its_worker_runs_on_a_new_one():
    """A task pinned (loosely) to a worker that is gone while no worker runs goes to "no-worker";
    distributed lets it out only for the worker it names, so a new worker never takes it. The
    rescue plugin dpdist registers on its schedulers sends it to a running worker."""
    import time

    from distributed import Client, LocalCluster

    from dpdist.pipelines.placement import LooseRestrictionRescue

    def state(key):
        return client.run_on_scheduler(lambda dask_scheduler: getattr(dask_scheduler.tasks.get(key), "state", None))

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster, Client(cluster) as client:
        fut = client.submit(sum, [1, 2], workers=["tcp://127.0.0.1:9"], allow_other_workers=True, pure=False)
        deadline = time.monotonic() + 10
        while state(fut.key) != "no-worker" and time.monotonic() < deadline:  # no worker runs: it waits there
            time.sleep(0.05)
        cluster.scale(1)
        client.wait_for_workers(1)
        time.sleep(1.0)
        assert state(fut.key) == "no-worker"  # distributed alone: stuck beside a running worker
        client.register_plugin(LooseRestrictionRescue(interval=0.1))
        assert fut.result(timeout=10) == 3
