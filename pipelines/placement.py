"""Pinning tasks that read store blocks to workers, so the per-worker block cache is reused."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any

import dask
from distributed.diagnostics.plugin import SchedulerPlugin
from tornado.ioloop import PeriodicCallback


def worker_info(client: Any = None) -> dict[str, Any]:
    """{address: info} of every worker of ``client`` (default: the active distributed Client; {}
    without one). ``n_workers=-1``: some distributed releases list only the first 5 by default."""
    try:
        from distributed import get_client

        client = client or get_client()
    except (ImportError, ValueError):
        return {}
    try:
        return client.scheduler_info(n_workers=-1)["workers"]
    except TypeError:  # a distributed release whose scheduler_info lists every worker
        return client.scheduler_info()["workers"]


def workers() -> list[str]:
    """The addresses of the active distributed Client's workers (sorted), or [] without one."""
    return sorted(worker_info())


def host_threads(info: dict[str, Any] | None = None) -> dict[str, int]:
    """The Dask threads per host, summed over the host's workers, of ``info`` (``worker_info``'s;
    default: the active distributed Client's, {} without one)."""
    threads: dict[str, int] = {}
    for w in (worker_info() if info is None else info).values():
        threads[w["host"]] = threads.get(w["host"], 0) + int(w["nthreads"])
    return threads


def pinned(i: int, addresses: list[str]) -> AbstractContextManager:
    """Annotate the tasks built inside: block ``i`` runs on worker ``i mod W`` (others allowed
    if that one is gone), so the same block lands on the same worker every time in a run.

    Nothing with one worker (or none): there is nothing to choose, and a restriction to it
    outlives it. When the last worker is lost (a nanny restarting it past its memory limit), its
    tasks wait for a worker in "no-worker", and distributed lets them out for a new worker only if
    the restriction names it: a loose one naming the old address never does (the full-shape
    Webspam run hung so, in its two-stage select, on one worker restarted under a new address)."""
    if len(addresses) <= 1:
        return dask.annotate()
    return dask.annotate(workers=[addresses[i % len(addresses)]], allow_other_workers=True)


class LooseRestrictionRescue(SchedulerPlugin):
    """Runs the scheduler's "no-worker" tasks whose worker restriction is loose (:func:`pinned`'s)
    as soon as any worker is running, every ``interval`` seconds.

    distributed takes a "no-worker" task out only for a worker its restriction names
    (``bulk_schedule_unrunnable_after_adding_worker``), ignoring ``allow_other_workers``: a task
    pinned to a worker that was lost while no other was running -- all lost at once, or the
    others paused past their memory threshold -- waited for ever (dask/distributed#7346). Sent to
    "processing", the scheduler's ``decide_worker`` honours the loose restriction and picks any
    running worker. Registered on the schedulers dpdist starts (local, SLURM)."""

    name = "dpdist-loose-restriction-rescue"

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._callback: PeriodicCallback | None = None

    async def start(self, scheduler: Any) -> None:
        self._callback = PeriodicCallback(lambda: self.rescue(scheduler), self.interval * 1000)
        self._callback.start()

    async def close(self) -> None:
        if self._callback is not None:
            self._callback.stop()

    @staticmethod
    def rescue(scheduler: Any) -> None:
        if not scheduler.running:
            return
        # only worker restrictions: a loose task's fallback ignores resource and host restrictions
        stuck = sorted(
            (
                ts
                for ts in scheduler.unrunnable
                if ts.loose_restrictions and not ts.resource_restrictions and not ts.host_restrictions
            ),
            key=lambda ts: ts.priority,
            reverse=True,
        )  # recommendations run LIFO
        if stuck:
            scheduler.transitions(
                {ts.key: "processing" for ts in stuck}, stimulus_id=f"dpdist-loose-restriction-rescue-{time.time()}"
            )
