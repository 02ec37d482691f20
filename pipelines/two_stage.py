"""Two-stage stage 1 on Dask: route rows to their random blocks, fit one LASSO per block in parallel.

The store's row blocks are read once each, by tasks pinned to workers (round robin, others
allowed if one dies), and cut into one piece per group of blocks; a group's task stacks its
pieces and fits its blocks one after the other. The pieces stay in worker memory until their
group has been fitted. Groups (a few per worker), not single blocks, are the tasks: with one
task per block, KDDA's train half (103 row blocks x 2,593 LASSO blocks) makes 267k pieces and
edges, and the graph's overhead would cost more than the fits.

Each row's block is drawn uniformly and independently (``block_labels``), by the task that reads
its chunk, from a 128-bit seed per chunk: the distribution of ``assign_blocks``, not its draws.
A fixed seed (experiments only) gives the same blocks on any cluster for the same ``block_rows``,
but not the blocks ``assign_blocks`` (``TwoStageSelector.fit``) draws for that seed.
"""

from __future__ import annotations

import os

import dask
import numpy as np
import scipy.sparse as sp

from dpdist.data.store import open_store
from dpdist.pipelines.placement import pinned, workers
from dpdist.selection.sis import store_target
from dpdist.selection.two_stage import block_labels, block_votes, split_by_label
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count


def _chunk_seeds(n_chunks: int, random_state: RandomState) -> np.ndarray:
    """128 bits of seed per row chunk (OS entropy unless a seed is given, as every draw here)."""
    return check_random_state(random_state).integers(0, 2**64, size=(n_chunks, 2), dtype=np.uint64)


def _chunk_labels(seed: np.ndarray, rows: int, m: int) -> np.ndarray:
    """The blocks of a chunk's rows, each drawn uniformly from the m blocks independently
    (``block_labels``) by the chunk's own generator."""
    return block_labels(rows, m, np.random.default_rng(seed)).astype(np.int32 if m < 2**31 else np.int64)


def _split_chunk(
    path: str, r0: int, r1: int, seed: np.ndarray, m: int, groups: int
) -> list[tuple[sp.csr_matrix, np.ndarray, np.ndarray]]:
    """Rows r0..r1 of the store cut by group of their block (block b is in group b mod ``groups``):
    per group, its rows (ascending), their targets and their block labels (drawn here, from the
    chunk's seed: the graph carries 16 bytes a chunk, not 4 a row -- 27 MB at KDDA's train half,
    past Dask's warning on a graph's size).

    Read past the block cache: these pieces are held by Dask until their group's fits have read
    them, so a cached copy of the rows would double the memory (at full KDDA shape, more than a
    24 GiB machine's workers hold). A group's fit holds its
    pieces and their stack at once, about 1 / (4 workers) of the data each: 0.4 GB at KDDA's
    train half on 2 workers."""
    store = open_store(path)
    X = store.read_rows(r0, r1)
    y = store_target(store, store.y[r0:r1])
    labels = _chunk_labels(seed, r1 - r0, m)
    return [(X[rows], y[rows], labels[rows]) for rows in split_by_label(labels % groups, groups)]


def _fit_group(
    g: int, groups: int, m: int, k: int, alpha: float, *chunks: list[tuple[sp.csr_matrix, np.ndarray, np.ndarray]]
) -> list[np.ndarray]:
    """The votes of blocks g, g + groups, ... from their pieces: each block's rows in ascending
    order, as in the whole matrix (so each vote is the one of ``block_votes`` on X[block])."""
    X = sp.vstack([c[g][0] for c in chunks], format="csr")
    y = np.concatenate([c[g][1] for c in chunks])
    rank = np.concatenate([c[g][2] for c in chunks]) // groups  # block g + rank * groups
    return [block_votes(X[rows], y[rows], k, alpha) for rows in split_by_label(rank, len(range(g, m, groups)))]


def block_vote_counts(
    path: str | os.PathLike[str],
    k: int,
    n_blocks: int,
    alpha: float = 0.1,
    random_state: RandomState = None,
    block_rows: int | None = None,
) -> np.ndarray:
    """Votes per feature summed over the public ``n_blocks`` blocks: the input of
    ``TwoStageSelector.fit_votes`` (un-noised; it never leaves the caller)."""
    path = str(path)
    store = open_store(path)
    d = store.shape[1]
    m = check_count(n_blocks, "n_blocks")
    bounds = store.row_bounds(block_rows)
    seeds = _chunk_seeds(len(bounds), random_state)
    tok = os.urandom(8).hex()  # distinct keys per graph; never a hash of the (secret) block seeds
    addresses = workers()
    groups = min(m, 4 * max(1, len(addresses)))  # public: from n_blocks and the cluster's size
    chunks = []
    for i, (r0, r1) in enumerate(bounds):
        with pinned(i, addresses):
            chunks.append(
                dask.delayed(_split_chunk, pure=True)(
                    path, r0, r1, seeds[i], m, groups, dask_key_name=f"split-{tok}-{i}"
                )
            )
    votes = [
        dask.delayed(_fit_group, pure=True)(g, groups, m, k, alpha, *chunks, dask_key_name=f"lasso-group-{tok}-{g}")
        for g in range(groups)
    ]
    counts = np.zeros(d)
    for group in dask.compute(*votes, optimize_graph=False):
        for v in group:
            counts[v] += 1
    return counts
