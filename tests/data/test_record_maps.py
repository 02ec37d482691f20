"""Per-record maps: each row's image depends on that row alone and meets the map's bound."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpdist.data.record_maps import ROW_MAPS, apply_row_map
from dpdist.exceptions import ParameterError


@pytest.mark.parametrize("name", [m for m in ROW_MAPS if m is not None])
def test_each_row_depends_on_itself_alone_and_meets_its_bound(name):
    rng = np.random.default_rng(0)
    X = rng.normal(scale=1e4, size=(30, 12)) * (rng.random((30, 12)) < 0.6)
    X[4] = 0.0
    out = apply_row_map(X, name)
    alone = np.vstack([apply_row_map(X[i : i + 1], name) for i in range(30)])
    np.testing.assert_allclose(out, alone)  # adding or removing rows changes no other row's image
    if name in ("l2", "sqrt-l2"):
        assert np.all(np.linalg.norm(out, axis=1) <= 1.0 + 1e-12)
    else:
        assert np.all(np.abs(out) <= 1.0 + 1e-12)
    if name != "rank":  # sparse rows stay sparse, with the same image
        np.testing.assert_allclose(apply_row_map(sp.csr_matrix(X), name).toarray(), out)


def test_sqrt_l2_is_the_same_on_raw_and_on_normalised_rows_and_ranks_ignore_monotone_maps():
    rng = np.random.default_rng(1)
    X = rng.exponential(size=(5, 8)) * 1e3
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_allclose(apply_row_map(X, "sqrt-l2"), apply_row_map(unit, "sqrt-l2"))
    np.testing.assert_allclose(apply_row_map(np.log(X), "rank"), apply_row_map(X, "rank"))
    r = apply_row_map(np.array([[3.0, 1.0, 2.0, 2.0]]), "rank")
    np.testing.assert_allclose(r, [[1.0, -1.0, 0.0, 0.0]])  # ties share their mean rank


def test_bad_maps_are_refused():
    with pytest.raises(ParameterError, match="row_norm"):
        apply_row_map(np.ones((2, 2)), "l1")
    with pytest.raises(ParameterError, match="dense"):
        apply_row_map(sp.csr_matrix(np.ones((2, 2))), "rank")
