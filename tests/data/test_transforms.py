"""Transforms that establish the privacy bounds."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from dpdist.data.transforms import (
    DataDependentWarning,
    center_columns,
    check_row_bound,
    check_target_bound,
    clip_rows,
    clip_target,
    enforce_bounds,
    map_labels,
    scale_columns,
    scale_target,
    yeo_johnson,
)
from dpdist.exceptions import ParameterError

RNG = np.random.default_rng(0)
DENSE = RNG.normal(scale=3.0, size=(50, 8))
SPARSE = sp.random(60, 40, density=0.1, random_state=1, format="csr", data_rvs=lambda k: RNG.normal(scale=4, size=k))


@pytest.mark.parametrize("X", [DENSE, SPARSE])
def test_clip_rows_clip(X):
    out = clip_rows(X, 1.0)
    A, B = (out.toarray(), X.toarray()) if sp.issparse(X) else (out, X)
    assert np.abs(A).max() <= 1.0
    np.testing.assert_array_equal(A, np.clip(B, -1, 1))
    check_row_bound(out, 1.0)


@pytest.mark.parametrize("X", [DENSE, SPARSE])
def test_clip_rows_scale_keeps_direction(X):
    out = clip_rows(X, 0.5, method="scale")
    A, B = (out.toarray(), X.toarray()) if sp.issparse(X) else (out, X)
    assert np.abs(A).max() <= 0.5 + 1e-15
    for a, b in zip(A, B):
        m = np.abs(b).max()
        np.testing.assert_allclose(a, b / max(1.0, m / 0.5))


def test_per_record_transforms_emit_no_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clip_rows(DENSE)
        clip_target(DENSE[:, 0], 2.0)
        map_labels(np.array([1, 2, 3]), {1, 3})
        scale_columns(SPARSE, bounds=np.full(40, 10.0))
        scale_target(DENSE[:, 0], bound=5.0)


def test_scale_columns_data_dependent_and_public():
    with pytest.warns(DataDependentWarning):
        out, b = scale_columns(SPARSE)
    A = out.toarray()
    np.testing.assert_allclose(np.abs(A).max(axis=0)[np.abs(SPARSE.toarray()).max(axis=0) > 0], 1.0)
    out2, _ = scale_columns(SPARSE, bounds=b / 2)  # a too-small public bound is clipped
    assert np.abs(out2.toarray()).max() <= 1.0
    with pytest.raises(ParameterError):
        scale_columns(DENSE, bounds=np.zeros(8))


def test_scale_and_clip_target():
    y = np.array([-4.0, 2.0, 1.0])
    with pytest.warns(DataDependentWarning):
        ys, b = scale_target(y)
    assert b == 4.0 and ys.tolist() == [-1.0, 0.5, 0.25]
    assert scale_target(y, bound=2.0)[0].tolist() == [-1.0, 1.0, 0.5]
    assert clip_target(y, 1.5).tolist() == [-1.5, 1.5, 1.0]
    check_target_bound(ys, 1.0)
    with pytest.raises(ParameterError, match=r"\|y_i\| <= 1"):
        check_target_bound(y, 1.0)


def test_map_labels():
    y = np.arange(1, 21)
    out = map_labels(y, range(1, 11))
    assert out.tolist() == [1.0] * 10 + [0.0] * 10
    assert map_labels(np.array([-1.0, 1.0]), 1.0, negative_value=-1.0).tolist() == [-1.0, 1.0]


def test_center_columns():
    with pytest.warns(DataDependentWarning):
        C, m = center_columns(DENSE)
    np.testing.assert_allclose(C.mean(axis=0), 0, atol=1e-12)
    with pytest.raises(ParameterError, match="dense"):
        center_columns(SPARSE)


def test_yeo_johnson_matches_scipy_and_public_lambdas():
    X = np.abs(DENSE) ** 1.5 - 1.0
    with pytest.warns(DataDependentWarning):
        T, lam = yeo_johnson(X)
    for j in range(X.shape[1]):
        np.testing.assert_allclose(T[:, j], stats.yeojohnson(X[:, j], lmbda=lam[j]), rtol=1e-10)
    T2, _ = yeo_johnson(X, lambdas=lam)
    np.testing.assert_allclose(T2, T)
    y, lam_y = yeo_johnson(X[:, 0], lambdas=[0.5])
    assert y.shape == (50,) and lam_y.tolist() == [0.5]


def test_check_row_bound_names_the_fix_and_no_value_of_the_data():
    X = np.array([[0.5, 4.52283], [0.1, -0.2]])
    with pytest.raises(ParameterError, match="--clip") as e:
        check_row_bound(X, 1.0)
    assert "4.52" not in str(e.value) and "|X_ij| <= 1" in str(e.value)
    with pytest.raises(ParameterError, match="not finite"):
        check_row_bound(np.array([[np.nan]]), 1.0)
    with pytest.raises(ParameterError) as e:
        check_target_bound(np.array([0.3, -7.25]), 1.0)
    assert "7.25" not in str(e.value) and "|y_i| <= 1" in str(e.value)


def test_duplicate_entries_are_summed_before_bounds():
    # two stored entries at (0, 1) of 0.8 each: the matrix value is 1.6
    X = sp.csr_matrix((np.array([0.8, 0.8]), np.array([1, 1]), np.array([0, 2])), shape=(1, 3))
    with pytest.raises(ParameterError, match="violates"):
        check_row_bound(X, 1.0)
    out = clip_rows(X, 1.0)
    assert out.toarray().tolist() == [[0.0, 1.0, 0.0]]
    check_row_bound(out, 1.0)


def test_clip_mode_copies_only_when_an_entry_is_out_of_bound():
    # within the bound (float64 CSR, canonical): X itself, no 3 GB copy at KDDA's size; else a clipped copy
    inside = sp.random(30, 20, density=0.2, random_state=2, format="csr")
    X, _ = enforce_bounds(inside, None, 1.0, None, mode="clip")
    assert X is inside
    before = SPARSE.copy()
    X, _ = enforce_bounds(SPARSE, None, 1.0, None, mode="clip")
    assert X is not SPARSE and abs(X).max() <= 1.0 and (SPARSE != before).nnz == 0  # the input is untouched
    np.testing.assert_array_equal(X.toarray(), np.clip(before.toarray(), -1.0, 1.0))
    dup = sp.csr_matrix((np.array([0.8, 0.8]), np.array([1, 1]), np.array([0, 2])), shape=(1, 3))
    assert enforce_bounds(dup, None, 1.0, None, mode="clip")[0].toarray().tolist() == [[0.0, 1.0, 0.0]]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -1.5])
def test_bounds_refuse_non_finite_and_out_of_bound_entries_of_a_stored_matrix(bad):
    X = sp.csr_matrix(np.array([[0.5, 0.0, -1.0], [0.0, 1.0, 0.25]]))
    check_row_bound(X, 1.0)
    X.data[2] = bad
    with pytest.raises(ParameterError, match="violates"):
        check_row_bound(X, 1.0)
    with pytest.raises(ParameterError, match="violates"):
        check_row_bound(X.tocsc(), 1.0)


def test_clipping_float32_values_stays_within_a_bound_float32_cannot_hold():
    """float32 X is clipped in float32 to the largest float32 within the bound: 0.1's nearest
    float32 (0.100000001) lies above 0.1, so it would break the bound the calibration assumes."""
    X = sp.csr_matrix(np.array([[0.5, -0.7], [0.05, 0.2]], dtype=np.float32))
    out = clip_rows(X, 0.1)
    assert out.dtype == np.float32 and np.abs(out.data.astype(np.float64)).max() <= 0.1
    assert np.abs(out.data).max() == np.nextafter(np.float32(0.1), np.float32(0))
