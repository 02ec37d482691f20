"""A public train/test split of a store into two stores, streamed block by block.

Which rows go to the test store depends only on the row number and a seed (an independent
Bernoulli(``test_fraction``) draw per row), never on the data, so the split itself reveals
nothing. Both halves stay rows of the *source* dataset: releases computed on either are
charged to the source's dataset id (see ``flows``), not to the ids of the halves.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from dpdist.data.store import open_store, write_blocks
from dpdist.exceptions import ParameterError

__all__ = ["split_mask", "split_store"]


def split_mask(n_rows: int, test_fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of the test rows: one public Bernoulli(test_fraction) draw per row."""
    if not 0.0 < test_fraction < 1.0:
        raise ParameterError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    return np.random.default_rng([int(seed), 0x5D11]).random(int(n_rows)) < test_fraction


def split_store(src: str | os.PathLike[str], train_out: str | os.PathLike[str], test_out: str | os.PathLike[str],
                test_fraction: float, seed: int, force: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write the rows of ``src`` to ``train_out`` and ``test_out`` by :func:`split_mask`.

    Memory is one row block at a time (each half is written by its own pass). Returns the
    metadata of the two stores; each records ``split_of`` (the source dataset id).
    """
    store = open_store(src)
    test = split_mask(store.shape[0], test_fraction, seed)
    if test.all() or not test.any():
        raise ParameterError(f"test_fraction={test_fraction} leaves one side of the split of {src} empty")
    metas = []
    for out, want in ((train_out, False), (test_out, True)):
        def blocks(want: bool = want) -> Iterator[tuple[sp.csr_matrix, np.ndarray]]:
            for r0, X, y in store.iter_row_blocks():
                keep = test[r0:r0 + X.shape[0]] == want
                if keep.any():
                    yield X[keep], np.asarray(y)[keep]

        meta = {"split_of": store.dataset_id, "split": "test" if want else "train", "test_fraction": test_fraction,
                "split_seed": int(seed), "source_meta": {k: store.meta.get(k) for k in ("source", "synthetic",
                                                                                       "true_support")}}
        metas.append(write_blocks(out, blocks(), store.shape[1], task=store.task, force=force, metadata=meta,
                                  block_rows=store.block_rows))
    return metas[0], metas[1]
