"""Task placement (``pipelines._placement.pinned``)."""

from __future__ import annotations

import dask

from pipelines._placement import pinned


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
