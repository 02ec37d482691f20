"""DP-SIS scores |X^T y| as a Dask reduction over the store's row blocks.

The row blocks are split into one group per worker; a group task reads its blocks from the
store (on the worker) and scatter-adds y_b^T X_b into one dense vector, and the group
vectors are tree-summed. With 2e7 features a dense partial is 160 MB, so there is one per
worker rather than one per block; a per-block partial would cost more to move and add
than the products themselves.
"""

from __future__ import annotations

import os

import dask
import numba
import numpy as np
from dask.delayed import Delayed

from dpdist.data.store import open_store
from dpdist.data.transforms import enforce_bounds
from dpdist.selection.sis import store_target


@numba.njit(cache=True)
def _scatter_xty(acc: np.ndarray, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, y: np.ndarray) -> None:
    for i in range(y.shape[0]):
        yi = y[i]
        if yi == 0.0:
            continue
        for p in range(indptr[i], indptr[i + 1]):
            acc[indices[p]] += data[p] * yi


def _group_xty(path: str, ranges: list[tuple[int, int]], bounds: str) -> np.ndarray:
    """On a worker: sum of y_b^T X_b over its row blocks, each held to the enforced bounds."""
    store = open_store(path)
    acc = np.zeros(store.shape[1])
    for r0, r1 in ranges:
        X_b = store.read_rows(r0, r1)
        y_b = store_target(store, store.root["y"][r0:r1])
        X_b, y_b = enforce_bounds(X_b, y_b, mode=bounds, name=f"store {path}")
        _scatter_xty(acc, X_b.indptr, X_b.indices, X_b.data, np.asarray(y_b, dtype=np.float64))
    return acc


def _sum(*parts: np.ndarray) -> np.ndarray:
    out = parts[0]
    for p in parts[1:]:
        out += p
    return out


def _n_workers() -> int:
    try:
        from distributed import get_client
        return max(1, len(get_client().scheduler_info()["workers"]))
    except (ImportError, ValueError):
        return os.cpu_count() or 1


def xty_graph(path: str | os.PathLike[str], block_rows: int | None = None, bounds: str = "check",
              groups: int | None = None, split_every: int = 8) -> Delayed:
    """The delayed signed X^T y: one task per group of row blocks, then a tree of sums."""
    path = str(path)
    blocks = open_store(path).row_bounds(block_rows)
    g = max(1, min(len(blocks), groups or _n_workers()))
    tok = dask.base.tokenize(path, blocks, bounds, g)  # distinct keys for distinct graphs on one cluster
    parts = [dask.delayed(_group_xty, pure=True)(path, blocks[i::g], bounds, dask_key_name=f"xty-group-{tok}-{i}")
             for i in range(g)]
    level = 0
    while len(parts) > 1:
        parts = [dask.delayed(_sum, pure=True)(*parts[i:i + split_every], dask_key_name=f"xty-sum-{tok}-{level}-{i}")
                 for i in range(0, len(parts), split_every)]
        level += 1
    return parts[0]


def correlation_scores(path: str | os.PathLike[str], block_rows: int | None = None, bounds: str = "check",
                       groups: int | None = None) -> np.ndarray:
    """|X^T y| computed on the active Dask scheduler (a distributed Client if one is set)."""
    return np.abs(xty_graph(path, block_rows, bounds, groups).compute())
