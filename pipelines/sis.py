"""DP-SIS scores |X^T y| as a Dask graph over the store's CSC copy.

Per-feature work reads the column-compressed copy: the features are cut into ranges of
equal width (about ``COLUMN_BLOCK_NNZ`` non-zeros each), one task per range computes
x_j^T y for its columns by a gather from y (a numba loop over the range's entries), and the
client concatenates the ranges. Nothing is summed across tasks and each task returns only
its own slice of the scores, so the data moved is one float per feature, against one dense
D-vector per worker (160 MB at D = 2e7) for a row-block reduction.

The tasks read through the per-worker block cache (``open_store(path, cache=True)``), a
range of binary features as its row indices alone (``SparseStore.column_pattern``: 4 bytes an
entry instead of 12, in the cache and in the loop; the same products), and
each range is pinned to one worker (round robin over the workers in address order, other
workers allowed if it dies), so a second reduction over the same store in the run reads
nothing from disk.

y is read through one-byte codes into its distinct values when it has few (labels), so the
random reads of y stay in the cache (``_coded_target``); the products and sums are the same.

The bounds are those of ``enforce_bounds``: the target is checked or clipped once per
worker; each matrix entry (duplicates summed first, as ``enforce_bounds`` does) is checked
or clipped to [-1, 1] in the loop, and a violation raises ``enforce_bounds``' own error.
"""

from __future__ import annotations

import os

import dask
import numba
import numpy as np
from dask.delayed import Delayed

from dpdist.data.store import SparseStore, open_store
from dpdist.data.transforms import check_target_bound, clip_target, enforce_bounds
from dpdist.exceptions import ParameterError
from dpdist.selection.sis import store_target
from pipelines._placement import pinned, workers

# Non-zeros per task on average (ranges are of equal width): ~200 MB of decompressed CSC data, 67 MB
# if binary. Fewer, larger tasks pay less per task (store metadata, the fresh pages of each slice
# of scores): on the full KDDA shape, 2^24 against 2^22 took 2.1-2.4 s against 3.0 s cold and
# 0.72-0.88 s against 0.97-1.09 s warm on 1 worker (19 against 74 ranges).
COLUMN_BLOCK_NNZ = 1 << 24
_NO_VALUES = np.empty(0)  # every x_ij of the range is 1 (``SparseStore.column_pattern``)
_NO_VALUES.flags.writeable = False  # read-only as the cached values are: one compiled kernel for both


@numba.njit(nogil=True, cache=True)
def _column_xty(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, values: np.ndarray, codes: np.ndarray,
                clip: bool, out: np.ndarray) -> bool:
    """out[j] = sum_i x_ij y_i over each column's entries (rows ascending; duplicates summed
    before the bound), each entry clipped to [-1, 1] (``clip``) or checked; False on a violation.
    x_ij is ``data[p]``, or 1.0 when ``data`` is empty (a binary range, ``column_pattern``).
    y_i is ``values[codes[i]]``, or ``values[i]`` when ``codes`` is empty (see ``_coded_target``)."""
    coded = codes.shape[0] > 0
    unit = data.shape[0] == 0
    for j in range(out.shape[0]):
        s = 0.0
        p, end = indptr[j], indptr[j + 1]
        while p < end:
            i = indices[p]
            v = 1.0 if unit else data[p]
            p += 1
            while p < end and indices[p] == i:
                v += 1.0 if unit else data[p]
                p += 1
            if clip:
                v = min(1.0, max(-1.0, v))
            elif not abs(v) <= 1.0:
                return False
            s += v * (values[codes[i]] if coded else values[i])
        out[j] = s
    return True


@numba.njit(nogil=True, cache=True)
def _small_codes(y: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The distinct values of float64 y ascending (``np.unique``'s, up to which of 0.0 and -0.0
    stands for both), codes[i] the index of y[i] among them, when y has between 1 and 256
    distinct values and no NaN; else an empty array (codes then unspecified). Two passes of a
    binary search (``np.searchsorted``) in the at most 256 values: no sort of y."""
    values = np.empty(256)
    k = 0
    for i in range(y.shape[0]):
        v = y[i]
        if v != v:
            return values[:0]
        at = np.searchsorted(values[:k], v)
        if at < k and values[at] == v:
            continue
        if k == 256:
            return values[:0]
        for m in range(k, at, -1):
            values[m] = values[m - 1]
        values[at] = v
        k += 1
    values = values[:k]
    for i in range(y.shape[0]):
        codes[i] = np.searchsorted(values, y[i])
    return values


def _coded_target(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, codes) with ``values[codes] == y``, codes of one or two bytes when y takes at most
    256 or 65,536 distinct values (labels do), else (y, no codes). The products are y's own (a
    -0.0 may read as 0.0, which changes no sum that starts at 0.0).

    The gather reads y at a random row for every entry of a column; y as float64 (67 MB at
    KDDA's 8.4M rows) does not stay in the cache, its one-byte codes (8.4 MB) do: the
    reduction over KDDA's columns runs ~4x faster, with the same products and sums. Up to 256
    values are coded without sorting y (``_small_codes``: 0.11 s at KDDA's 8.4M rows, with 8 MB
    of fresh memory; ``np.unique`` took 0.07-0.8 s there, most of it the first touch of the
    ~200 MB its sort allocates, which a new worker pays in full).
    """
    if y.dtype == np.float64:  # what the callers pass (an int64 or float32 y would compare wrongly)
        codes = np.empty(y.shape[0], dtype=np.uint8)
        values = _small_codes(y, codes)
        if values.shape[0]:
            return values, codes
    values, inverse = np.unique(y, return_inverse=True)  # more than 256 values (or NaN, or no rows)
    for dtype in (np.uint8, np.uint16):
        if values.shape[0] <= np.iinfo(dtype).max + 1:
            return values, inverse.astype(dtype)
    return y, np.empty(0, dtype=np.uint8)


def _bounded_target(store: SparseStore, bounds: str) -> tuple[np.ndarray, np.ndarray]:
    """The store's target in [-1, 1] (checked or clipped) as ``_coded_target``, cached per worker
    with the blocks."""

    def load() -> tuple[np.ndarray, np.ndarray]:
        y = store_target(store, store.y)
        if bounds == "clip":
            return _coded_target(clip_target(y, 1.0))
        check_target_bound(y, 1.0)
        return _coded_target(np.array(y, dtype=np.float64))  # a copy: never the cached y under a second key

    return store._cached(("target", bounds), load)


def _columns_xty(path: str, c0: int, c1: int, bounds: str) -> np.ndarray:
    """On a worker: x_j^T y for the columns [c0, c1), the bounds enforced."""
    store = open_store(path, cache=True)
    values, codes = _bounded_target(store, bounds)
    data, indices, indptr = store.column_pattern(c0, c1)
    out = np.empty(c1 - c0)
    if not _column_xty(indptr, indices, _NO_VALUES if data is None else data, values, codes, bounds == "clip", out):
        enforce_bounds(store.read_columns(c0, c1), mode="check", name=f"store {path}")
        raise ParameterError(f"store {path}: a matrix entry is outside |X_ij| <= 1")  # never an unfilled score
    return out


def xty_graph(path: str | os.PathLike[str], bounds: str = "check", n_blocks: int | None = None) -> list[Delayed]:
    """Delayed signed x_j^T y, one task per column range (in column order; concatenate them).

    ``n_blocks`` defaults to max(workers, nnz / COLUMN_BLOCK_NNZ) ranges.
    """
    path = str(path)
    store = open_store(path)
    addresses = workers()
    n_blocks = n_blocks or max(len(addresses), 1, -(-store.nnz // COLUMN_BLOCK_NNZ))
    ranges = store.column_bounds(n_blocks)
    tok = os.urandom(8).hex()  # distinct keys per graph; never a hash of the content-derived dataset id
    parts = []
    for i, (c0, c1) in enumerate(ranges):
        with pinned(i, addresses):
            parts.append(dask.delayed(_columns_xty, pure=True)(path, c0, c1, bounds,
                                                                dask_key_name=f"xty-columns-{tok}-{i}"))
    return parts


def correlation_scores(path: str | os.PathLike[str], bounds: str = "check", n_blocks: int | None = None) -> np.ndarray:
    """|X^T y| computed on the active Dask scheduler (a distributed Client if one is set)."""
    parts = xty_graph(path, bounds, n_blocks)
    scores = np.empty(open_store(path).shape[1])
    c0 = 0
    for part in dask.compute(*parts, optimize_graph=False):  # assembled in place: no D-sized temporaries
        np.abs(part, out=scores[c0 : c0 + part.shape[0]])
        c0 += part.shape[0]
    return scores
