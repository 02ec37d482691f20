"""The public train/test split of a store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dpdist.data.split import split_mask, split_store
from dpdist.data.store import open_store, write_store
from dpdist.exceptions import ParameterError


def test_split_is_public_and_partitions_the_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    X = sp.random(500, 40, density=0.1, format="csr", random_state=1)
    y = np.where(rng.random(500) < 0.5, -1.0, 1.0)
    write_store(tmp_path / "src", X, y, block_rows=64)
    tr, te = split_store(tmp_path / "src", tmp_path / "tr", tmp_path / "te", 0.3, seed=5)
    mask = split_mask(500, 0.3, 5)
    assert np.array_equal(mask, split_mask(500, 0.3, 5))  # a function of (n, fraction, seed) only
    a, b = open_store(tmp_path / "tr"), open_store(tmp_path / "te")
    assert a.shape == (int((~mask).sum()), 40) and b.shape == (int(mask.sum()), 40)
    assert (a.csr() != X[~mask]).nnz == 0 and (b.csr() != X[mask]).nnz == 0
    assert np.array_equal(a.y, y[~mask]) and np.array_equal(b.y, y[mask])
    src_id = open_store(tmp_path / "src").dataset_id
    assert tr["split_of"] == te["split_of"] == src_id  # releases are charged to the source


def test_bad_fraction_fails_fast(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="test_fraction"):
        split_mask(10, 1.0, 0)
    write_store(tmp_path / "src", sp.eye(3, format="csr"), np.array([1.0, -1.0, 1.0]))
    with pytest.raises(ParameterError, match="empty"):
        split_store(tmp_path / "src", tmp_path / "a", tmp_path / "b", 0.01, seed=0)
    assert not (tmp_path / "a").exists()
