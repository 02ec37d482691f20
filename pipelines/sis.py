"""DP-SIS scores |X^T y| as a Dask tree reduction over the store's row blocks."""

from __future__ import annotations

import os

import dask
import numpy as np
import scipy.sparse as sp
from dask.delayed import Delayed

from dpdist.data.store import open_store
from dpdist.data.transforms import enforce_bounds
from dpdist.selection.sis import store_target


def _block_xty(path: str, r0: int, r1: int, bounds: str) -> sp.csr_matrix:
    """One worker reads rows r0..r1 (X and y) and returns y_b^T X_b under the enforced bounds.

    The partial is a sparse 1 x d row: with 2e7 features a dense partial would be 160 MB per
    block to move between workers, while a block touches only the columns of its non-zeros.
    """
    store = open_store(path)
    X_b = store.read_rows(r0, r1)
    y_b = store_target(store, store.root["y"][r0:r1])
    X_b, y_b = enforce_bounds(X_b, y_b, mode=bounds, name=f"{path} rows {r0}..{r1}")
    return sp.csr_matrix(np.asarray(y_b, dtype=np.float64)[None, :]) @ sp.csr_matrix(X_b)


def _sum(*parts: sp.csr_matrix) -> sp.csr_matrix:
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def xty_graph(path: str | os.PathLike[str], block_rows: int | None = None, bounds: str = "check",
              split_every: int = 8) -> Delayed:
    """The delayed signed X^T y: one read-and-multiply task per row block, then a tree of sums."""
    path = str(path)
    store = open_store(path)
    parts = [dask.delayed(_block_xty, pure=True)(path, r0, r1, bounds, dask_key_name=f"xty-block-{r0}")
             for r0, r1 in store.row_bounds(block_rows)]
    level = 0
    while len(parts) > 1:
        parts = [dask.delayed(_sum, pure=True)(*parts[i:i + split_every], dask_key_name=f"xty-sum-{level}-{i}")
                 for i in range(0, len(parts), split_every)]
        level += 1
    return parts[0]


def correlation_scores(path: str | os.PathLike[str], block_rows: int | None = None, bounds: str = "check",
                       split_every: int = 8) -> np.ndarray:
    """|X^T y| computed on the active Dask scheduler (a distributed Client if one is set)."""
    return np.abs(xty_graph(path, block_rows, bounds, split_every).compute().toarray().ravel())
