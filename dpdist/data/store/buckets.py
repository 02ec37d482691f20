"""The on-disk CSC buckets the writer fills while rows stream in, and the numba kernels that sort them.

Every appended entry is also written, as (value, row << 24 | column in bucket), to a bucket file of a fixed
column range; the writer's ``finish`` counting-sorts each bucket by column (rows stay ascending) and appends
it to the CSC arrays. Bucket files are owner-only (0600, :func:`dpdist.utils.files.open_private`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numba
import numpy as np
from numcodecs import Blosc

from dpdist.utils.files import open_private

__all__ = [
    "COL_BITS",
    "MAX_BUCKETS",
    "RECORD_BYTES",
    "bucket_counts",
    "bucket_records",
    "column_groups",
    "partition_by_group",
    "read_frames",
    "scatter_columns",
    "sort_bucket",
    "write_frame",
]

COL_BITS = 24  # a CSC bucket spans at most 2^24 columns; its records pack (row << 24 | column in bucket)
_FRAME_CODEC = Blosc(cname="lz4", clevel=1, shuffle=Blosc.SHUFFLE)  # bucket files: ~3.6 bytes/entry on KDDA, not 16
MAX_BUCKETS = 4096
RECORD_BYTES = 32  # per entry while a bucket is sorted: (value, key) and its sorted row and value


@numba.njit(nogil=True, cache=True)
def bucket_records(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    row0: int,
    shift: int,
    n_buckets: int,
    v_out: np.ndarray,
    k_out: np.ndarray,
) -> np.ndarray:
    """Entries as (value, row << 24 | column - bucket start), grouped by bucket (stable: row
    order within a bucket). Returns each bucket's start in the output (n_buckets + 1)."""
    starts = np.zeros(n_buckets + 1, dtype=np.int64)
    for p in range(indices.shape[0]):
        starts[(indices[p] >> shift) + 1] += 1
    for b in range(n_buckets):
        starts[b + 1] += starts[b]
    pos = starts[:-1].copy()
    mask = (1 << shift) - 1
    for i in range(indptr.shape[0] - 1):
        key_row = (row0 + i) << 24
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            q = pos[c >> shift]
            v_out[q] = data[p]
            k_out[q] = key_row | (c & mask)
            pos[c >> shift] = q + 1
    return starts


@numba.njit(nogil=True, cache=True)
def bucket_counts(k: np.ndarray, lo: int, counts: np.ndarray) -> None:
    """counts[c - lo] += 1 for each record's bucket column c."""
    mask = (1 << 24) - 1
    for p in range(k.shape[0]):
        counts[(k[p] & mask) - lo] += 1


@numba.njit(nogil=True, cache=True)
def scatter_columns(
    v: np.ndarray, k: np.ndarray, lo: int, hi: int, cursor: np.ndarray, rows_out: np.ndarray, vals_out: np.ndarray
) -> None:
    """Entries of bucket columns [lo, hi) into their CSC positions (cursor: next slot per column)."""
    mask = (1 << 24) - 1
    for p in range(v.shape[0]):
        c = k[p] & mask
        if lo <= c < hi:
            q = cursor[c - lo]
            rows_out[q] = k[p] >> 24
            vals_out[q] = v[p]
            cursor[c - lo] = q + 1


@numba.njit(nogil=True, cache=True)
def partition_by_group(
    v: np.ndarray, k: np.ndarray, ends: np.ndarray, v_out: np.ndarray, k_out: np.ndarray
) -> np.ndarray:
    """Records stably partitioned by column group (group g: bucket columns from ends[g - 1] and
    below ends[g]; the last group has no end); returns each group's start in the output
    (len(ends) + 2)."""
    mask = (1 << 24) - 1
    n_groups = ends.shape[0] + 1
    starts = np.zeros(n_groups + 1, dtype=np.int64)
    group = np.empty(k.shape[0], dtype=np.int64)
    for p in range(k.shape[0]):
        g = np.searchsorted(ends, k[p] & mask, side="right")
        group[p] = g
        starts[g + 1] += 1
    for g in range(n_groups):
        starts[g + 1] += starts[g]
    pos = starts[:-1].copy()
    for p in range(k.shape[0]):
        q = pos[group[p]]
        v_out[q] = v[p]
        k_out[q] = k[p]
        pos[group[p]] = q + 1
    return starts


def write_frame(path: Path, v: np.ndarray, k: np.ndarray) -> None:
    """Append (values, keys) to a bucket file as one compressed frame."""
    ev, ek = _FRAME_CODEC.encode(v), _FRAME_CODEC.encode(k)
    with open_private(path, "ab") as f:
        f.write(np.array([v.shape[0], len(ev), len(ek)], dtype="<i8").tobytes())
        f.write(ev)
        f.write(ek)


def read_frames(path: Path, cap: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The (values, keys) of a bucket file in order, in pieces of at most ``cap`` entries."""
    with open(path, "rb") as f:
        while header := f.read(24):
            n, lv, lk = np.frombuffer(header, dtype="<i8").tolist()
            v = np.frombuffer(_FRAME_CODEC.decode(f.read(lv)), dtype=np.float64)
            k = np.frombuffer(_FRAME_CODEC.decode(f.read(lk)), dtype=np.int64)
            step = cap or n
            for a in range(0, n, step):
                yield v[a : a + step], k[a : a + step]


def sort_bucket(path: Path, size: int, lo: int, hi: int, row_dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A bucket file that fits in memory, counting-sorted by column: (counts of columns lo..hi-1
    (bucket-local), row indices, values) in CSC order; rows stay ascending within a column."""
    v, k = np.empty(size), np.empty(size, dtype=np.int64)
    a = 0
    for fv, fk in read_frames(path):
        v[a : a + fv.shape[0]], k[a : a + fv.shape[0]] = fv, fk
        a += fv.shape[0]
    counts = np.zeros(hi - lo, dtype=np.int64)
    bucket_counts(k, lo, counts)
    cursor = np.zeros(hi - lo, dtype=np.int64)
    np.cumsum(counts[:-1], out=cursor[1:])
    rows, vals = np.empty(size, dtype=row_dtype), np.empty(size)
    scatter_columns(v, k, lo, hi, cursor, rows, vals)
    return counts, rows, vals


def column_groups(counts: np.ndarray, cap: int) -> list[tuple[int, int]]:
    """Consecutive column ranges of at most ``cap`` entries each (a single larger column alone)."""
    groups = []
    c0 = 0
    cum = np.cumsum(counts)
    n = counts.shape[0]
    while c0 < n:
        base = cum[c0 - 1] if c0 else 0
        c1 = int(np.searchsorted(cum, base + cap, side="right"))
        groups.append((c0, max(c1, c0 + 1)))
        c0 = max(c1, c0 + 1)
    return groups
