"""Two-stage stage 1 on Dask: route rows to their random blocks, fit one LASSO per block in parallel.

The store's row blocks are read once each, by tasks pinned to workers (round robin, others
allowed if one dies); their pieces stay in worker memory until every block has been fitted.
"""

from __future__ import annotations

import os

import dask
import numpy as np
import scipy.sparse as sp

from dpdist.data.store import open_store
from dpdist.selection.sis import store_target
from dpdist.selection.two_stage import block_labels, block_votes, split_by_label
from dpdist.utils.random import RandomState
from pipelines._placement import pinned, workers


def _split_chunk(path: str, r0: int, r1: int, labels: np.ndarray, m: int) -> list[tuple[sp.csr_matrix, np.ndarray]]:
    """Rows r0..r1 of the store, split by their block label (one piece per block).

    Read past the block cache: these pieces are held by Dask until every block's fit has read
    them, so a cached copy of the rows would double the memory (at full KDDA shape, 6.9 GiB
    per worker and a worker lost to the OOM killer on a 24 GiB machine)."""
    store = open_store(path)
    X = store.read_rows(r0, r1)
    y = store_target(store, store.y[r0:r1])
    return [(X[rows], y[rows]) for rows in split_by_label(labels, m)]


def _fit_block(b: int, k: int, alpha: float, *chunks: list[tuple[sp.csr_matrix, np.ndarray]]) -> np.ndarray:
    X = sp.vstack([c[b][0] for c in chunks], format="csr")
    y = np.concatenate([c[b][1] for c in chunks])
    return block_votes(X, y, k, alpha)


def block_vote_counts(path: str | os.PathLike[str], k: int, n_blocks: int, alpha: float = 0.1,
                      random_state: RandomState = None, block_rows: int | None = None) -> np.ndarray:
    """Votes per feature summed over the public ``n_blocks`` blocks: the input of
    ``TwoStageSelector.fit_votes`` (un-noised; it never leaves the caller)."""
    path = str(path)
    store = open_store(path)
    n, d = store.shape
    m = int(n_blocks)
    labels = block_labels(n, m, random_state)
    tok = os.urandom(8).hex()  # distinct keys per graph; never a hash of the (secret) block labels
    addresses = workers()
    chunks = []
    for i, (r0, r1) in enumerate(store.row_bounds(block_rows)):
        with pinned(i, addresses):
            chunks.append(dask.delayed(_split_chunk, pure=True)(path, r0, r1, labels[r0:r1], m,
                                                                dask_key_name=f"split-{tok}-{i}"))
    votes = [dask.delayed(_fit_block, pure=True)(b, k, alpha, *chunks, dask_key_name=f"lasso-block-{tok}-{b}")
             for b in range(m)]
    counts = np.zeros(d)
    for v in dask.compute(*votes, optimize_graph=False):
        counts[v] += 1
    return counts
