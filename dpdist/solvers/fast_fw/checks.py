"""The fit's passes over the whole of X outside the kernel: X^T y and the check of a given CSC copy.

Both run serially or on numba's threads (:mod:`dpdist.solvers.fast_fw.threads`) with the same
bits: X^T y adds each column's products in ascending rows, as scipy's ``X.T @ y``, and the digest
of X's entries is a wrap-around sum, the same in any order.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

from dpdist.data.transforms import check_row_bound
from dpdist.exceptions import ParameterError
from dpdist.solvers.fast_fw.columns import _even_ranges
from dpdist.solvers.fast_fw.threads import _serial_and_parallel, _threaded


def _entries_digest(ptr, idx, val, by_rows, parts):  # a body: built by _serial_and_parallel
    """An order-free digest of a sparse matrix's entries: the wrap-around sum over them of a
    splitmix64 mix of (row, column, the value's bits as float64: float32 values convert exactly);
    the same for X in CSR and in CSC form. The threads take ``parts`` runs of rows (or columns)
    of about equal work; a wrap-around sum is the same in any order."""
    total = np.uint64(0)
    bounds = _even_ranges(ptr, parts)
    for r in numba.prange(parts):
        one = np.empty(1)
        bits = one.view(np.uint64)
        part = np.uint64(0)
        for a in range(bounds[r], bounds[r + 1]):
            for p in range(ptr[a], ptr[a + 1]):
                r0, c0 = (np.uint64(a), np.uint64(idx[p])) if by_rows else (np.uint64(idx[p]), np.uint64(a))
                one[0] = val[p]
                z = (r0 * np.uint64(0x9E3779B97F4A7C15)) ^ (c0 * np.uint64(0xC2B2AE3D27D4EB4F)) ^ bits[0]
                z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                part += z ^ (z >> np.uint64(31))
        total += part
    return total


def _column_dots(c_ptr, c_idx, c_val, g, parts):  # a body: built by _serial_and_parallel
    """X^T g from X's CSC form: each column's products added in ascending rows, as scipy's
    ``X.T @ g`` (the same bits); the threads take ``parts`` runs of columns of about equal work.
    The threaded form of :func:`dpdist.solvers.frank_wolfe._csr_matvec` (Alg. 1 keeps that serial
    one, its baseline). Not :func:`~dpdist.solvers.fast_fw.columns._single_pass_sums`: its test for
    g_i = 0 mispredicts on a 0/1 y (benchmarks/fw_full_shape_steps.py measures the passes)."""
    D = c_ptr.shape[0] - 1
    out = np.empty(D)
    bounds = _even_ranges(c_ptr, parts)
    for r in numba.prange(parts):
        for k in range(bounds[r], bounds[r + 1]):
            s = 0.0
            for p in range(c_ptr[k], c_ptr[k + 1]):
                s += c_val[p] * g[c_idx[p]]
            out[k] = s
    return out


_digest_serial, _digest_parallel = _serial_and_parallel(_entries_digest)
_dots_serial, _dots_parallel = _serial_and_parallel(_column_dots)


def _digest(M: sp.spmatrix, by_rows: bool) -> int:
    """:func:`_entries_digest` of a CSR (``by_rows``) or CSC matrix."""
    return _threaded(
        _digest_serial, _digest_parallel, M.nnz, M.indptr.astype(np.int64, copy=False), M.indices, M.data, by_rows
    )


def _check_csc(Xc: sp.spmatrix, X: sp.csr_matrix, private: bool) -> sp.csc_matrix:
    """``X_csc`` as the kernel reads it, checked against X without a copy of either: the format,
    the shape and an order-free digest of the entries (their rows, columns and values; the CSC
    copy of another matrix would break the kernel's invariants, and the equality of _move's two
    update orders) and, for a private run, the bound on every entry."""
    if not (sp.issparse(Xc) and Xc.format == "csc" and Xc.dtype == X.dtype and Xc.has_canonical_format):
        raise ParameterError(
            f"X_csc must be a {X.dtype} CSC matrix (X's dtype) in canonical format (sorted rows, no repeated entry)"
        )
    if Xc.shape != X.shape or Xc.nnz != X.nnz or _digest(Xc, False) != _digest(X, True):
        raise ParameterError("X_csc is not X in CSC form (its shape or its entries differ)")
    if private:
        check_row_bound(Xc.data, name="X_csc")
    return Xc
