"""Pinning tasks that read store blocks to workers, so the per-worker block cache is reused."""

from __future__ import annotations

from contextlib import AbstractContextManager

import dask


def workers() -> list[str]:
    """The addresses of the active distributed Client's workers (sorted), or [] without one."""
    try:
        from distributed import get_client
        return sorted(get_client().scheduler_info()["workers"])
    except (ImportError, ValueError):
        return []


def host_threads() -> dict[str, int]:
    """The active distributed Client's Dask threads per host, summed over the host's workers
    ({} without a Client)."""
    try:
        from distributed import get_client
        info = get_client().scheduler_info()["workers"]
    except (ImportError, ValueError):
        return {}
    threads: dict[str, int] = {}
    for w in info.values():
        threads[w["host"]] = threads.get(w["host"], 0) + int(w["nthreads"])
    return threads


def pinned(i: int, addresses: list[str]) -> AbstractContextManager:
    """Annotate the tasks built inside: block ``i`` runs on worker ``i mod W`` (others allowed
    if that one is gone), so the same block lands on the same worker every time in a run."""
    if not addresses:
        return dask.annotate()
    return dask.annotate(workers=[addresses[i % len(addresses)]], allow_other_workers=True)
