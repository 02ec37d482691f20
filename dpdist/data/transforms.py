"""Transforms that establish the bounds the privacy proofs assume.

Which transforms are private
----------------------------
A transform that looks at one record only (clipping a row, clipping a label, mapping a
label) is applied to each record independently and costs no privacy. A transform that
computes a statistic over the whole data set (a column maximum, a mean, a Yeo-Johnson
exponent) makes every record depend on the others: it is *not* differentially private, and
a release built on it is only DP relative to the transformed data. The papers do this
([SKDRR24] scales columns and y by their maxima; [KLR25] fits Yeo-Johnson) and say so.

| transform                  | uses data statistics?                  | public alternative          |
| -------------------------- | -------------------------------------- | --------------------------- |
| ``clip_rows``              | no (per record)                        | --                          |
| ``clip_target``            | no (per record)                        | --                          |
| ``map_labels``             | no (per record)                        | --                          |
| ``scale_columns``          | yes, unless ``bounds`` are given       | ``bounds=`` (public maxima) |
| ``scale_target``           | yes, unless ``bound`` is given         | ``bound=`` (public bound)   |
| ``center_columns``         | yes, unless ``means`` are given        | ``means=`` (public means)   |
| ``yeo_johnson``            | yes (fits one exponent per column)     | ``lambdas=`` (public)       |

Every data-dependent call without its public parameter emits a ``DataDependentWarning``.
The algorithms never trust a transform to have run: they check (or clip) the bounds they
need themselves with ``check_row_bound`` / ``check_target_bound``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, TypeAlias, overload

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import PowerTransformer

from dpdist.exceptions import ParameterError
from dpdist.utils.validation import check_positive

__all__ = [
    "BOUND_MODES",
    "DataDependentWarning",
    "center_columns",
    "check_row_bound",
    "check_target_bound",
    "clip_rows",
    "clip_target",
    "enforce_bounds",
    "map_labels",
    "scale_columns",
    "scale_target",
    "value_dtype",
    "yeo_johnson",
]

Matrix: TypeAlias = "np.ndarray | sp.spmatrix | sp.sparray"


class DataDependentWarning(UserWarning):
    """A transform computed a statistic of the data set: the result is not differentially private."""


def _warn(what: str, public: str) -> None:
    warnings.warn(
        f"{what} uses a statistic of the whole data set and is not differentially private; "
        f"pass {public} from public knowledge to avoid this",
        DataDependentWarning,
        stacklevel=3,
    )


def value_dtype(X: Any) -> type:
    """The dtype X's values are held in: float32 when X's are (half the memory of float64; the
    solvers take every product and sum in float64, after an exact conversion), else float64."""
    return np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64


def _csr(X: Matrix) -> sp.csr_matrix:
    """A CSR copy in :func:`value_dtype` with duplicate entries summed: bounds hold for the matrix,
    not per entry."""
    A = sp.csr_matrix(X, dtype=value_dtype(X), copy=True)
    A.sum_duplicates()
    return A


def _values(X: Matrix) -> np.ndarray:
    """The entries of X; a sparse matrix in canonical format (no repeated entry) as it is, without a copy."""
    if isinstance(X, (sp.spmatrix, sp.sparray)):
        if X.format in ("csr", "csc") and X.has_canonical_format:
            return np.asarray(X.data)
        return np.asarray(_csr(X).data)
    return np.asarray(X)


# ------------------------------------------------------------------ per-record (private)


def clip_rows(X: Matrix, bound: float = 1.0, method: str = "clip") -> Matrix:
    """Make every row satisfy ||x_i||_inf <= bound, looking at each row alone.

    ``method="clip"`` clips each entry to [-bound, bound] (the projection onto the
    infinity-norm ball); ``method="scale"`` divides a row by max(1, ||x_i||_inf / bound),
    keeping its direction ([KLR25] / [KLR23] "rows scaled so ||x_i||_inf <= 1").
    Returns a new matrix of the same kind (CSR for sparse input).
    """
    bound = check_positive(bound, "bound")
    if method not in ("clip", "scale"):
        raise ParameterError(f"method must be 'clip' or 'scale', got {method!r}")
    if sp.issparse(X):
        X = _csr(X)
        if method == "clip":
            b = bound if X.dtype == np.float64 else float(np.float32(bound))
            if b > bound:  # float32 values: the largest float32 within the bound, not the nearest
                b = float(np.nextafter(np.float32(bound), np.float32(0)))
            np.clip(X.data, -b, b, out=X.data)
        else:
            row_max = np.zeros(X.shape[0])
            nz = np.diff(X.indptr) > 0
            row_max[nz] = np.maximum.reduceat(np.abs(X.data), X.indptr[:-1][nz])
            factor = np.maximum(1.0, row_max / bound)
            X.data /= np.repeat(factor, np.diff(X.indptr))
        return X
    A = np.array(X, dtype=np.float64)
    if method == "clip":
        return np.clip(A, -bound, bound, out=A)
    factor = np.maximum(1.0, np.abs(A).max(axis=1, initial=0.0) / bound)
    return A / factor[:, None]


def clip_target(y: np.ndarray, bound: float = 1.0) -> np.ndarray:
    """Clip each target to [-bound, bound] (per record; private)."""
    bound = check_positive(bound, "bound")
    return np.clip(np.asarray(y, dtype=np.float64), -bound, bound)


def map_labels(y: np.ndarray, positive: object, negative_value: float = 0.0) -> np.ndarray:
    """Binary labels: 1 where y is in ``positive`` (a value or a collection), else ``negative_value``.

    ``negative_value`` is 0 (BCE, y in {0, 1}) or -1 (y in {-1, +1}). Per record; private.
    """
    if negative_value not in (0.0, -1.0):
        raise ParameterError(f"negative_value must be 0 or -1, got {negative_value!r}")
    pos = np.atleast_1d(
        np.asarray(list(positive) if isinstance(positive, (set, frozenset)) else positive, dtype=np.float64)
    )
    y = np.asarray(y, dtype=np.float64)
    return np.where(np.isin(y, pos), 1.0, negative_value)


# -------------------------------------------------------------------- data-dependent


def scale_columns(X: Matrix, bounds: np.ndarray | None = None) -> tuple[Matrix, np.ndarray]:
    """Divide every column by its bound so that max_i |X_ij| <= 1; returns (X scaled, bounds).

    With ``bounds=None`` the bounds are the columns' maxima of |X_ij| (data-dependent, not
    private; [SKDRR24]'s pre-processing). Values above a public bound are clipped to it
    afterwards, so the result is within [-1, 1] either way. All-zero columns keep bound 1.
    """
    n, d = X.shape
    if bounds is None:
        _warn("scale_columns", "bounds=")
        absX = abs(X)
        bounds = np.asarray(absX.max(axis=0).todense() if sp.issparse(absX) else absX.max(axis=0)).ravel()
        bounds = np.where(bounds > 0, bounds, 1.0)
    else:
        bounds = np.asarray(bounds, dtype=np.float64).ravel()
        if bounds.shape != (d,) or not np.all(np.isfinite(bounds)) or np.any(bounds <= 0):
            raise ParameterError(f"bounds must be {d} finite positive numbers")
    if sp.issparse(X):
        X = _csr(X)
        X.data /= bounds[X.indices]
        np.clip(X.data, -1.0, 1.0, out=X.data)
        return X, bounds
    return np.clip(np.asarray(X, dtype=np.float64) / bounds, -1.0, 1.0), bounds


def scale_target(y: np.ndarray, bound: float | None = None) -> tuple[np.ndarray, float]:
    """Divide y by ``bound`` and clip to [-1, 1]; returns (y scaled, bound).

    ``bound=None`` uses max |y| (data-dependent, not private).
    """
    y = np.asarray(y, dtype=np.float64)
    if bound is None:
        _warn("scale_target", "bound=")
        bound = float(np.max(np.abs(y))) if y.size and np.max(np.abs(y)) > 0 else 1.0
    bound = check_positive(bound, "bound")
    return np.clip(y / bound, -1.0, 1.0), bound


def center_columns(X: np.ndarray, means: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Subtract column means from a dense matrix; returns (X centred, means).

    Centring destroys sparsity, so it is for dense sets only. ``means=None`` uses the
    data's means (data-dependent, not private).
    """
    if sp.issparse(X):
        raise ParameterError("center_columns is for dense matrices: centring a sparse matrix makes it dense")
    A = np.asarray(X, dtype=np.float64)
    if means is None:
        _warn("center_columns", "means=")
        means = A.mean(axis=0)
    means = np.asarray(means, dtype=np.float64)
    if means.shape != (A.shape[1],):
        raise ParameterError(f"means must have {A.shape[1]} entries")
    return A - means, means


def yeo_johnson(X: np.ndarray, lambdas: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Yeo-Johnson power transform per column ([KLR25] applies it to features and target).

    ``lambdas=None`` fits one exponent per column by maximum likelihood (scikit-learn's
    ``PowerTransformer``; data-dependent, not private). No standardisation is applied.
    Returns (X transformed, lambdas).
    """
    A = np.asarray(X, dtype=np.float64)
    squeeze = A.ndim == 1
    A = A.reshape(-1, 1) if squeeze else A
    pt = PowerTransformer(method="yeo-johnson", standardize=False)
    if lambdas is None:
        _warn("yeo_johnson", "lambdas=")
        out = pt.fit_transform(A)
    else:
        lam = np.atleast_1d(np.asarray(lambdas, dtype=np.float64))
        if lam.shape != (A.shape[1],) or not np.all(np.isfinite(lam)):
            raise ParameterError(f"lambdas must be {A.shape[1]} finite numbers")
        pt.lambdas_ = lam
        pt.n_features_in_ = A.shape[1]
        out = pt.transform(A)
    return (out.ravel() if squeeze else out), pt.lambdas_


# ------------------------------------------------------------------------- checks


def _within(values: np.ndarray, bound: float) -> bool:
    """All values finite and |v| <= bound, from the minimum and the maximum: no temporary array
    (np.abs of a KDDA-sized train half is 2 GB); a NaN propagates into both."""
    lo, hi = float(np.min(values)), float(np.max(values))
    return math.isfinite(lo) and math.isfinite(hi) and max(-lo, hi) <= bound


def bound_violation(name: str, what: str, bound: float) -> ParameterError:
    """The error refusing data outside a bound. It names the bound and the parameter only: no
    value, position or count of the data leaves in it (it is shown before any charge)."""
    return ParameterError(
        f"{name} violates the bound {what} <= {bound:g} that the privacy calibration assumes (or is not "
        "finite); clip each record to it (--clip on the command line, bounds='clip' in Python, "
        'data.bounds = "clip" in a run config) or rescale by a public constant'
    )


def _check_bound(values: np.ndarray, bound: float, name: str, what: str) -> None:
    """Refuse values outside the bound (``bound_violation``)."""
    if values.size and not _within(values, bound):
        raise bound_violation(name, what, bound)


def check_row_bound(X: Matrix, bound: float = 1.0, name: str = "X") -> None:
    """Raise ParameterError unless every |X_ij| <= bound (i.e. ||x_i||_inf <= bound)."""
    _check_bound(_values(X), bound, name, "|X_ij|")


def check_target_bound(y: np.ndarray, bound: float, name: str = "y") -> None:
    """Raise ParameterError unless every |y_i| <= bound."""
    _check_bound(np.asarray(y, dtype=np.float64), bound, name, "|y_i|")


BOUND_MODES = ("check", "clip")


@overload
def enforce_bounds(
    X: Matrix,
    y: np.ndarray,
    x_bound: float = ...,
    y_bound: float | None = ...,
    mode: str = ...,
    name: str = ...,
) -> tuple[Matrix, np.ndarray]: ...


@overload
def enforce_bounds(
    X: Matrix,
    y: None = ...,
    x_bound: float = ...,
    y_bound: float | None = ...,
    mode: str = ...,
    name: str = ...,
) -> tuple[Matrix, None]: ...


def enforce_bounds(
    X: Matrix,
    y: np.ndarray | None = None,
    x_bound: float = 1.0,
    y_bound: float | None = 1.0,
    mode: str = "check",
    name: str = "X",
) -> tuple[Matrix, np.ndarray | None]:
    """Make (X, y) satisfy the sensitivity bounds |X_ij| <= x_bound, |y_i| <= y_bound, or refuse.

    ``mode="check"`` raises ParameterError naming the violated bound; ``mode="clip"`` clips
    each entry (a per-record map, so it costs no privacy) into a new matrix, or returns X itself
    when it is a float64 (or float32) CSR matrix whose entries are all within the bound already (no copy: a
    KDDA-sized train half is 3 GB). ``y_bound=None`` leaves y alone.
    """
    if mode not in BOUND_MODES:
        raise ParameterError(f"bounds must be one of {BOUND_MODES}, got {mode!r}")
    if mode == "clip":
        if not (
            isinstance(X, (sp.spmatrix, sp.sparray))
            and X.format == "csr"
            and X.dtype == value_dtype(X)
            and X.has_canonical_format
            and (X.nnz == 0 or _within(X.data, x_bound))
        ):
            X = clip_rows(X, x_bound, "clip")
        # else (a canonical float64 or float32 CSR matrix already within the bound) X itself: clipping
        # would copy it unchanged
        if y is not None and y_bound is not None:
            y = clip_target(y, y_bound)
        return X, y
    check_row_bound(X, x_bound, name)
    if y is not None and y_bound is not None:
        check_target_bound(y, y_bound)
    return X, y
