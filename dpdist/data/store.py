"""The dpdist sparse store: a zarr v3 group holding X (CSR and CSC), y and metadata.

Layout (the AnnData on-disk convention for sparse matrices, so other tools can open it)::

    STORE/                 group; attrs["dpdist"] = metadata (see ``StoreWriter.finish``)
      X/                   group; attrs encoding-type "csr_matrix", encoding-version "0.1.0", shape
        data  indices  indptr
      X_csc/               group; attrs encoding-type "csc_matrix", encoding-version "0.1.0", shape
        data  indices  indptr
      y                    float64 labels/targets exactly as read

``data``/``indices`` are chunked by non-zeros and ``indptr`` by rows, so a row block
[r0, r1) is read with ``indptr[r0:r1+1]`` and one contiguous slice of ``data``/``indices``.

Format versions (``attrs["dpdist"]["format_version"]``; both are read):

* 1: zarr's default codec (zstd level 0) on every array.
* 2 (written now): the same arrays and attributes, compressed with Blosc LZ4 (over a byte
  shuffle for the integer arrays, ``CODEC``; plain for the values, ``VALUES_CODEC``), which
  decodes 3-10x faster than zstd per core on KDDA- and Webspam-shaped arrays and encodes
  ~10x faster, at a similar size (smaller CSC row indices, larger CSR column indices and
  values); see benchmarks/store_codecs.py.

Writing is atomic: everything goes to a temporary directory beside the target that is
renamed into place only when complete; a failure removes it and leaves no store behind.
Rows are appended in whole chunks (each chunk is compressed once). The CSC copy is built
without a second pass over the rows: every appended entry is also written, as (value, row,
column), to an on-disk bucket of a fixed column range; ``finish`` counting-sorts each
bucket by column (rows stay ascending) and appends it to the CSC arrays. A bucket larger
than the memory budget is split on disk into column groups that fit, each then sorted. Peak memory is
bounded by the block and budget sizes (and O(n_features) counters), not by the data.
A store holds raw records, so it is owner-only whatever the umask (``dpdist.utils.files``):
the temporary directory is made 0700 before anything is written into it (so nothing zarr
creates inside, with the umask's mode, is reachable by others), the CSC bucket directory 0700
and its files 0600, and every file and directory of the finished tree 0600/0700 before the rename.

The dataset id is a SHA-256 of the canonical content (shape, row lengths, column indices,
values and labels), computed while the rows stream in, so the same data has the same id
whatever file, compression, blocking or format version it came from.

Reading: ``open_store(path, cache=True)`` keeps decompressed blocks in a per-process LRU
cache (``BLOCK_CACHE``) keyed by store, dataset id and block, so Dask graphs that read the
same blocks again in one run (on the same worker) skip the reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp
import zarr
from numcodecs import Blosc
from zarr.codecs import BloscCodec

from dpdist.exceptions import ParameterError
from dpdist.utils.files import open_private, private_dir, restrict_tree
from dpdist.utils.random import random_name

__all__ = [
    "BLOCK_CACHE",
    "TASKS",
    "VALUE_DTYPES",
    "ColumnStream",
    "SparseStore",
    "StoreWriter",
    "check_schema",
    "check_task",
    "feature_schema",
    "label_mapping",
    "open_store",
    "schema",
    "write_blocks",
    "write_store",
]

FORMAT = "dpdist-sparse-store"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
# The dataset id's domain string. It named format version 1 when ids were introduced and is
# kept for every later version: ledgers are keyed by the id, so it must never change.
ID_DOMAIN = f"{FORMAT}/1"
# Blosc LZ4 (typesize follows the dtype): over a byte shuffle for the integer arrays, whose high
# bytes repeat (2.5x smaller CSC row indices, 4-5 GB/s decode), plain for the float values
# (2-3x faster decode than shuffled, at 1.0-1.14x the size); benchmarks/store_codecs.py
CODEC = BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
VALUES_CODEC = BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle")
NNZ_CHUNK = 1 << 21  # elements per chunk of data/indices
ROW_CHUNK = 1 << 18  # elements per chunk of indptr and y
DEFAULT_BLOCK_ROWS = 1 << 16
DEFAULT_MEMORY = 256 << 20  # bytes of entries held in memory while building the CSC copy
MAX_TRACKED_LABELS = 1000
TASKS = ("auto", "binary", "multiclass", "regression")

_INT32_MAX = 2**31 - 1
_COL_BITS = 24  # a CSC bucket spans at most 2^24 columns; its records pack (row << 24 | column in bucket)
_FRAME_CODEC = Blosc(cname="lz4", clevel=1, shuffle=Blosc.SHUFFLE)  # bucket files: ~3.6 bytes/entry on KDDA, not 16
_MAX_BUCKETS = 4096
_RECORD_BYTES = 32  # per entry while a bucket is sorted: (value, key) and its sorted row and value


def check_task(task: str) -> str:
    if task not in TASKS:
        raise ParameterError(f"task must be one of {TASKS}, got {task!r}")
    return task


def label_mapping(
    labels: list[float] | None, task: str, source: str, declared: list[float] | None = None
) -> tuple[str, dict[str, int] | None]:
    """Resolve ``task`` and return (task, mapping label -> class code).

    With ``declared`` labels (public: given by the user, not read from the data) the classes are
    those, whatever the data holds, and a label outside them is refused. Otherwise ``auto`` is
    binary for exactly two distinct labels seen, else regression. Codes follow ascending label order.
    """
    check_task(task)
    if declared is not None:
        classes = sorted({float(v) for v in declared})
        if task == "auto":
            task = "binary" if len(classes) == 2 else "multiclass"
        if task == "regression" or len(classes) < 2 or (task == "binary" and len(classes) != 2):
            raise ParameterError(f"{source}: declared labels {classes} do not fit task={task}")
        if labels is None or not set(map(float, labels)) <= set(classes):
            raise ParameterError(f"{source}: the data has labels outside the declared ones {classes}")
        return task, {repr(v): i for i, v in enumerate(classes)}
    if task == "auto":
        task = "binary" if labels is not None and len(labels) == 2 else "regression"
    if task == "regression":
        return task, None
    if labels is None:
        raise ParameterError(f"{source}: more than {MAX_TRACKED_LABELS} distinct labels; not a {task} task")
    if task == "binary" and len(labels) != 2:
        raise ParameterError(f"{source}: task=binary needs exactly 2 distinct labels, and the data has another number")
    return task, {repr(float(v)): i for i, v in enumerate(labels)}


def schema(task: str, declared: list[float] | None) -> str:
    """ "declared" when the task and the classes are the user's (public), "inferred" when read from the data."""
    return "declared" if declared is not None or task == "regression" else "inferred"


def feature_schema(meta: dict[str, Any]) -> str:
    """ "declared" when a store's columns are a public, per-record map of each record's own features
    (the number of features and the svmlight index base given by the user, a table's columns
    taken as they are), "inferred" when they depend on other records (the number of features
    read as the largest index seen, the index base guessed from whether a 0 occurs, categories
    coded or gaps filled from the whole column).

    Stores written before this was recorded (no ``feature_schema`` key) are read as: svmlight
    ingests (and their split halves) inferred, since whether their indexing was declared was not
    kept; tables inferred when their notes record category codes or imputation; split halves
    inferred unless their source was synthetic (what else their source was is not kept); the
    rest -- synthetic sets, matrices written through ``write_store`` -- declared, their columns
    being the caller's."""
    if "feature_schema" in meta:
        return str(meta["feature_schema"])
    notes = meta.get("table_notes")
    if notes is not None:
        return "inferred" if ("category_codes" in notes or "imputation" in notes) else "declared"
    if "zero_based" in meta or "source_text_bytes" in meta:  # an svmlight ingest
        return "inferred"
    if "split_of" in meta:  # a split half: declared only when its source was synthetic (its notes were not kept)
        return "declared" if (meta.get("source_meta") or {}).get("synthetic") is not None else "inferred"
    return "declared"


def column_ids(meta: dict[str, Any], columns: Any) -> dict[str, Any]:
    """The source file's own identities of store columns (public: the schema): a table's column names,
    or an svmlight file's indices in its own base (LIBSVM files are one-based: store column 0 is the
    file's index 1). ``{"index_base": 0 | 1, "ids": [...]}``, plus ``"names"`` for a table."""
    cols = [int(j) for j in columns]
    names = meta.get("feature_names") or (meta.get("source_meta") or {}).get("feature_names")
    base = 0 if meta.get("zero_based", True) is not False else 1
    out: dict[str, Any] = {"index_base": base, "ids": [j + base for j in cols]}
    if names:
        out["names"] = [str(names[j]) for j in cols]
    return out


def check_schema(store: Any) -> None:
    """Refuse private use of a store whose task, classes or columns were inferred from its data.

    Under ADD/REMOVE neighbours one record with a new label would change the task (binary ->
    regression) or the class codes of every other record; one record with a column index 0 would
    shift every other record's columns by one (svmlight's guessed index base), and one with a
    larger index would change the number of features every release states. The coding of the
    targets and of the features must be a public, per-record map (:func:`feature_schema`).
    Raised before any charge or computation; the message holds no value of the data.
    """
    if store.meta.get("schema") != "declared":
        raise ParameterError(
            f"store {store.path}: its task and labels were inferred from the data, so one record could recode all "
            "the others; declare them (public knowledge) and ingest again: --task binary --labels=-1,1 (your two "
            "labels), --task multiclass --labels ..., or --task regression (data.task / data.labels in a run config)"
        )
    if feature_schema(store.meta) != "declared":
        raise ParameterError(
            f"store {store.path}: its columns were inferred from the data (the number of features from the largest "
            "index seen, the svmlight index base from whether a 0 occurs, or categories coded / gaps filled from "
            "whole columns; or a store written before dpdist recorded this), so one record could change the "
            "columns of all the others; declare them (public knowledge) and ingest again: --n-features D "
            "--zero-based no|yes (data.n_features / data.zero_based in a run config), and no --encode-categories "
            "or --impute for tables"
        )


_resolve_labels = label_mapping  # write_blocks has a parameter of that name


def _ranges(n: int, step: int) -> list[tuple[int, int]]:
    return [(r0, min(r0 + step, n)) for r0 in range(0, n, step)]


def _array(g: zarr.Group, name: str, chunk: int, dtype: str) -> zarr.Array:
    codec = VALUES_CODEC if np.dtype(dtype).kind == "f" else CODEC
    return g.create_array(name, shape=(0,), chunks=(chunk,), dtype=dtype, compressors=codec)


def _sparse_group(root: zarr.Group, name: str, encoding: str) -> zarr.Group:
    """An empty group in the AnnData sparse encoding (its arrays are added by the writer)."""
    g = root.create_group(name)
    g.attrs.update({"encoding-type": encoding, "encoding-version": "0.1.0"})
    return g


class _Appender:
    """Appends to a 1-d zarr array in whole chunks, so that each chunk is compressed once;
    ``close`` writes the last, partial chunk."""

    def __init__(self, arr: zarr.Array) -> None:
        self.arr = arr
        self.chunk = arr.chunks[0]
        self.written = arr.shape[0]
        self._buf = np.empty(self.chunk, dtype=arr.dtype)
        self._fill = 0

    @property
    def size(self) -> int:
        return self.written + self._fill

    def _write(self, values: np.ndarray) -> None:
        n = self.written + values.shape[0]
        self.arr.resize((n,))
        self.arr[self.written : n] = values
        self.written = n

    def append(self, values: np.ndarray) -> None:
        """Copy ``values`` into the chunk buffer or write them; no reference is kept."""
        n, i = values.shape[0], 0
        if self._fill:  # top up the partial chunk
            i = min(n, self.chunk - self._fill)
            self._buf[self._fill : self._fill + i] = values[:i]
            self._fill += i
            if self._fill < self.chunk:
                return
            self._write(self._buf)
            self._fill = 0
        whole = (n - i) - (n - i) % self.chunk
        if whole:  # whole chunks straight from the input
            self._write(np.asarray(values[i : i + whole], dtype=self.arr.dtype))
            i += whole
        if i < n:
            self._buf[: n - i] = values[i:]
            self._fill = n - i

    def close(self) -> None:
        if self._fill:
            self._write(self._buf[: self._fill])
            self._fill = 0


# ------------------------------------------------------------------ writer kernels


@numba.njit(nogil=True, cache=True)
def _bucket_records(indptr, indices, data, row0, shift, n_buckets, v_out, k_out):
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
def _bucket_counts(k, lo, counts):
    """counts[c - lo] += 1 for each record's bucket column c."""
    mask = (1 << 24) - 1
    for p in range(k.shape[0]):
        counts[(k[p] & mask) - lo] += 1


@numba.njit(nogil=True, cache=True)
def _scatter_columns(v, k, lo, hi, cursor, rows_out, vals_out):
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
def _partition_by_group(v, k, ends, v_out, k_out):
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


def _write_frame(path: Path, v: np.ndarray, k: np.ndarray) -> None:
    """Append (values, keys) to a bucket file as one compressed frame."""
    ev, ek = _FRAME_CODEC.encode(v), _FRAME_CODEC.encode(k)
    with open_private(path, "ab") as f:
        f.write(np.array([v.shape[0], len(ev), len(ek)], dtype="<i8").tobytes())
        f.write(ev)
        f.write(ek)


def _read_frames(path: Path, cap: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The (values, keys) of a bucket file in order, in pieces of at most ``cap`` entries."""
    with open(path, "rb") as f:
        while header := f.read(24):
            n, lv, lk = np.frombuffer(header, dtype="<i8").tolist()
            v = np.frombuffer(_FRAME_CODEC.decode(f.read(lv)), dtype=np.float64)
            k = np.frombuffer(_FRAME_CODEC.decode(f.read(lk)), dtype=np.int64)
            step = cap or n
            for a in range(0, n, step):
                yield v[a : a + step], k[a : a + step]


def _sort_bucket(path: Path, size: int, lo: int, hi: int, row_dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A bucket file that fits in memory, counting-sorted by column: (counts of columns lo..hi-1
    (bucket-local), row indices, values) in CSC order; rows stay ascending within a column."""
    v, k = np.empty(size), np.empty(size, dtype=np.int64)
    a = 0
    for fv, fk in _read_frames(path):
        v[a : a + fv.shape[0]], k[a : a + fv.shape[0]] = fv, fk
        a += fv.shape[0]
    counts = np.zeros(hi - lo, dtype=np.int64)
    _bucket_counts(k, lo, counts)
    cursor = np.zeros(hi - lo, dtype=np.int64)
    np.cumsum(counts[:-1], out=cursor[1:])
    rows, vals = np.empty(size, dtype=row_dtype), np.empty(size)
    _scatter_columns(v, k, lo, hi, cursor, rows, vals)
    return counts, rows, vals


def _column_groups(counts: np.ndarray, cap: int) -> list[tuple[int, int]]:
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


class StoreWriter:
    """Write a store from row blocks; ``finish`` builds the CSC copy and renames it into place.

    Indices appended are shifted by ``-index_offset`` at ``finish``. ``index_offsets`` lists
    the offsets ``finish`` may be given (for one-based svmlight files the offset is known only
    after the last block): the column indices are stored and hashed shifted by the first as
    they stream in, and rewritten and rehashed once at ``finish`` only if another is chosen.
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        *,
        force: bool = False,
        memory_bytes: int = DEFAULT_MEMORY,
        index_offsets: tuple[int, ...] = (0,),
        n_features: int | None = None,
    ) -> None:
        self.out = Path(out)
        if self.out.exists() and not force:
            raise ParameterError(f"store {self.out} already exists; pass --force (force=True) to overwrite it")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        if not index_offsets or any(o < 0 for o in index_offsets):
            raise ParameterError(f"index_offsets must be non-negative offsets, got {index_offsets}")
        self.memory_bytes = int(memory_bytes)
        self.force = force
        self.index_offsets = tuple(dict.fromkeys(int(o) for o in index_offsets))
        self._guess = self.index_offsets[0]
        self.tmp = self.out.parent / f".{self.out.name}.tmp-{uuid.uuid4().hex[:12]}"
        private_dir(self.tmp)
        try:  # a disk full already here leaves no temporary behind (the caller has no writer to abort)
            self.root = zarr.open_group(self.tmp, mode="w-", zarr_format=3)
            g = _sparse_group(self.root, "X", "csr_matrix")
            self._data = _Appender(_array(g, "data", NNZ_CHUNK, "float64"))
            self._indices = _Appender(_array(g, "indices", NNZ_CHUNK, "int32"))
            self._indptr = _Appender(_array(g, "indptr", ROW_CHUNK, "int64"))
            self._y = _Appender(_array(self.root, "y", ROW_CHUNK, "float64"))
            self._indptr.append(np.zeros(1, dtype=np.int64))
            # CSC buckets: raw columns [b << shift, (b + 1) << shift) go to bucket file b
            self._bucket_dir = private_dir(self.tmp / "_csc_buckets")
        except BaseException:
            self.abort()
            raise
        self.n_rows = 0
        self.nnz = 0
        self.min_index: int | None = None
        self.max_index = -1
        self._labels: set[float] | None = set()
        # one hash per component, so the id does not depend on how rows were blocked
        self._hash = {k: hashlib.sha256() for k in ("row_nnz", "data", "y")}
        self._hash_indices = hashlib.sha256()  # of the indices shifted by the first offset
        self._bucket_shift: int | None = None
        self._n_features_hint = n_features
        self._bucket_sizes: dict[int, int] = {}

    # ------------------------------------------------------------------ appending

    def append(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, y: np.ndarray) -> None:
        """Append rows given in CSR parts (``indptr`` starting at 0) with their labels."""
        n = y.shape[0]
        if (
            indptr.shape[0] != n + 1
            or indptr[0] != 0
            or indptr[-1] != indices.shape[0]
            or indices.shape[0] != data.shape[0]
        ):
            raise ParameterError("inconsistent CSR block")
        indptr = np.asarray(indptr, dtype=np.int64)
        data = np.ascontiguousarray(data, dtype=np.float64)
        y = np.ascontiguousarray(y, dtype=np.float64)
        if not np.issubdtype(indices.dtype, np.integer):
            indices = np.asarray(indices, dtype=np.int64)
        if indices.size:
            lo, hi = int(indices.min()), int(indices.max())
            if lo < 0:
                raise ParameterError("a negative column index")
            if hi > _INT32_MAX:
                raise ParameterError("a column index beyond the 2^31 columns a store holds")
            self.min_index = lo if self.min_index is None else min(self.min_index, lo)
            self.max_index = max(self.max_index, hi)
            self._write_buckets(indptr, indices, data, hi)
            stored = np.subtract(indices, self._guess, dtype=np.int64)
            self._indices.append(stored)
            self._hash_indices.update(stored.data)
        self._data.append(data)
        self._indptr.append(indptr[1:] + self.nnz)
        self._y.append(y)
        self._hash["row_nnz"].update(np.diff(indptr).astype("<i8", copy=False).data)
        self._hash["data"].update(data.astype("<f8", copy=False).data)
        self._hash["y"].update(y.astype("<f8", copy=False).data)
        if self._labels is not None:
            self._labels.update(np.unique(y).tolist())
            if len(self._labels) > MAX_TRACKED_LABELS:
                self._labels = None
        self.n_rows += n
        self.nnz += indices.shape[0]

    def _write_buckets(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, hi: int) -> None:
        """Append this block's entries to the CSC bucket files of their column ranges."""
        if self._bucket_shift is None:  # ~128 buckets over the expected width, each < 2^24 columns
            width = max(self._n_features_hint or 0, hi + 1)
            self._bucket_shift = int(min(_COL_BITS, max(10, np.ceil(np.log2(max(width, 2) / 128)))))
        if (hi >> self._bucket_shift) >= _MAX_BUCKETS and self._bucket_shift < _COL_BITS:
            self._rebucket(min(_COL_BITS, int(np.ceil(np.log2((hi + 1) / 128)))))
        shift = self._bucket_shift
        if self.n_rows + indptr.shape[0] - 1 >= 1 << (63 - _COL_BITS):
            raise ParameterError(f"more than 2^{63 - _COL_BITS} rows are not supported")
        n_buckets = (hi >> shift) + 1
        v, k = np.empty(indices.shape[0]), np.empty(indices.shape[0], dtype=np.int64)
        starts = _bucket_records(indptr, indices, data, self.n_rows, shift, n_buckets, v, k)
        for b in np.flatnonzero(np.diff(starts)).tolist():
            _write_frame(self._bucket_dir / f"{b}.bin", v[starts[b] : starts[b + 1]], k[starts[b] : starts[b + 1]])
            self._bucket_sizes[b] = self._bucket_sizes.get(b, 0) + int(starts[b + 1] - starts[b])

    def _rebucket(self, shift: int) -> None:
        """Wider buckets (columns far beyond the first block's): merge the files, in column order."""
        delta = shift - self._bucket_shift
        sizes: dict[int, int] = {}
        for b in sorted(self._bucket_sizes):
            frames = list(_read_frames(self._bucket_dir / f"{b}.bin"))
            (self._bucket_dir / f"{b}.bin").unlink()
            for v, k in frames:  # keys get the column within the wider bucket
                _write_frame(
                    self._bucket_dir / f"{b >> delta}.bin", v, k + ((b & ((1 << delta) - 1)) << self._bucket_shift)
                )
            sizes[b >> delta] = sizes.get(b >> delta, 0) + self._bucket_sizes[b]
        self._bucket_sizes, self._bucket_shift = sizes, shift

    @property
    def distinct_labels(self) -> list[float] | None:
        """The sorted distinct labels, or None when there are more than MAX_TRACKED_LABELS."""
        return None if self._labels is None else sorted(self._labels)

    # ------------------------------------------------------------------ finishing

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def finish(
        self,
        *,
        index_offset: int = 0,
        n_features: int | None = None,
        block_rows: int = DEFAULT_BLOCK_ROWS,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Shift indices, build CSC, hash, write metadata and rename into place. Returns the metadata."""
        try:
            if index_offset not in self.index_offsets:
                raise ParameterError(f"index_offset {index_offset} is not one of the writer's {self.index_offsets}")
            if self.min_index is not None and self.min_index < index_offset:
                raise ParameterError(f"a column index below {index_offset} in a file read as {index_offset}-based")
            needed = self.max_index + 1 - index_offset
            if n_features is None:
                n_features = max(needed, 0)
            elif n_features < needed:
                raise ParameterError(f"the data has a column index beyond n_features={n_features}")
            for app in (self._data, self._indices, self._indptr, self._y):
                app.close()
            if index_offset != self._guess:  # rewrite (and rehash) the stored indices
                self._hash_indices = self._shift_stored_indices(self._guess - index_offset)
            self._build_csc(index_offset, n_features)
            h = hashlib.sha256(ID_DOMAIN.encode())
            h.update(np.asarray([self.n_rows, n_features], dtype="<i8").tobytes())
            for part in (self._hash["row_nnz"], self._hash_indices, self._hash["data"], self._hash["y"]):
                h.update(part.digest())
            meta = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "dataset_id": h.hexdigest(),  # private: a content hash (ledger and store internals only)
                "n_rows": self.n_rows,
                "n_features": int(n_features),
                "nnz": self.nnz,
                "block_rows": int(block_rows),
                **(metadata or {}),
            }
            meta["name"] = meta.get("name") or random_name()  # the public name: never a function of the data
            shape = [self.n_rows, int(n_features)]
            self.root["X"].attrs["shape"] = shape
            self.root["X_csc"].attrs["shape"] = shape
            self.root.attrs["dpdist"] = json.loads(json.dumps(meta))
            restrict_tree(self.tmp)  # zarr wrote its files with the umask's mode
            self._rename_into_place()
            return meta
        except BaseException:
            self.abort()
            raise

    def _shift_stored_indices(self, delta: int) -> Any:
        """Add ``delta`` to the stored column indices; returns the hash of the new ones."""
        h = hashlib.sha256()
        arr = self._indices.arr
        for a, b in _ranges(arr.shape[0], NNZ_CHUNK):
            shifted = arr[a:b].astype(np.int64) + delta
            arr[a:b] = shifted
            h.update(shifted.data)
        return h

    def _build_csc(self, offset: int, n_features: int) -> None:
        """CSC arrays from the bucket files: each bucket counting-sorted by column, appended in
        column order. Buckets that fit in the memory budget are sorted two at a time in
        threads while the previous one is written; a larger one is split into column groups
        that fit (``_stream_bucket``)."""
        csc = _sparse_group(self.root, "X_csc", "csc_matrix")
        row_dtype = "int32" if self.n_rows <= _INT32_MAX else "int64"
        data = _Appender(_array(csc, "data", NNZ_CHUNK, "float64"))
        indices = _Appender(_array(csc, "indices", NNZ_CHUNK, row_dtype))
        colptr = _Appender(_array(csc, "indptr", ROW_CHUNK, "int64"))
        colptr.append(np.zeros(1, dtype=np.int64))
        shift = self._bucket_shift or 0
        cap = max(1, self.memory_bytes // _RECORD_BYTES // 3)  # up to 3 sorted buckets in memory at once
        total = 0
        done = 0  # store columns whose pointers are written

        def advance(c: int, counts: np.ndarray) -> None:
            nonlocal total, done
            if c > done:  # columns without entries
                colptr.append(np.full(c - done, total, dtype=np.int64))
            colptr.append(total + np.cumsum(counts))
            total += int(counts.sum())
            done = c + counts.shape[0]

        jobs = []
        for b in sorted(self._bucket_sizes):
            c0 = max(0, (b << shift) - offset)  # store columns [c0, c1) of this bucket's raw columns
            c1 = min(n_features, ((b + 1) << shift) - offset)
            base = (c0 + offset) - (b << shift)  # the bucket-local column of store column c0
            jobs.append((b, c0, c1, base))
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="csc-sort") as pool:
            ahead: dict[int, Any] = {}
            for i, (b, c0, c1, base) in enumerate(jobs):
                for b2, d0, d1, base2 in jobs[i : i + 2]:  # sort the next buckets while this one is written
                    if b2 not in ahead and self._bucket_sizes[b2] <= cap:
                        ahead[b2] = pool.submit(
                            _sort_bucket,
                            self._bucket_dir / f"{b2}.bin",
                            self._bucket_sizes[b2],
                            base2,
                            base2 + d1 - d0,
                            row_dtype,
                        )
                path = self._bucket_dir / f"{b}.bin"
                if b in ahead:
                    counts, rows, vals = ahead.pop(b).result()
                    advance(c0, counts)
                    indices.append(rows)
                    data.append(vals)
                else:
                    advance(c0, self._stream_bucket(path, base, base + c1 - c0, cap, row_dtype, indices, data))
                path.unlink()
        advance(n_features, np.zeros(0, dtype=np.int64))
        for app in (data, indices, colptr):
            app.close()
        shutil.rmtree(self._bucket_dir)

    def _stream_bucket(
        self, path: Path, lo: int, hi: int, cap: int, row_dtype: str, indices: _Appender, data: _Appender
    ) -> np.ndarray:
        """A bucket larger than ``cap`` records: counted in one pass, split in a second into one
        file per column group (at most ``cap`` entries, or a single larger column), then each
        group's file counting-sorted and appended (a single larger column streamed in pieces).
        The bucket is read twice whatever its number of groups (reading it once per group made
        URL's first bucket, its 200 dense columns, 69% of the entries, read ~70 times)."""
        counts = np.zeros(hi - lo, dtype=np.int64)
        for _, k in _read_frames(path):
            _bucket_counts(k, lo, counts)
        groups = _column_groups(counts, cap)
        parts = [path.with_name(f"{path.stem}.{g}.bin") for g in range(len(groups))]
        ends = np.array([lo + g1 for _, g1 in groups[:-1]], dtype=np.int64)
        for v, k in _read_frames(path, cap):
            v_out, k_out = np.empty_like(v), np.empty_like(k)
            starts = _partition_by_group(v, k, ends, v_out, k_out)
            for g in np.flatnonzero(np.diff(starts)):
                _write_frame(parts[g], v_out[starts[g] : starts[g + 1]], k_out[starts[g] : starts[g + 1]])
        for (g0, g1), part in zip(groups, parts):
            n_group = int(counts[g0:g1].sum())
            if n_group == 0:
                continue
            rows = np.empty(min(n_group, cap), dtype=row_dtype)
            vals = np.empty(min(n_group, cap))
            cursor = np.zeros(g1 - g0, dtype=np.int64)
            np.cumsum(counts[g0 : g1 - 1], out=cursor[1:])
            for v, k in _read_frames(part, cap):
                if n_group > cap:  # a single column: its entries stream out in row order
                    cursor[0] = 0
                _scatter_columns(v, k, lo + g0, lo + g1, cursor, rows, vals)
                if n_group > cap:
                    indices.append(rows[: cursor[0]])
                    data.append(vals[: cursor[0]])
            if n_group <= cap:
                indices.append(rows)
                data.append(vals)
            part.unlink()
        return counts

    def _rename_into_place(self) -> None:
        trash = None
        if self.out.exists():
            if not self.force:
                raise ParameterError(f"store {self.out} appeared while writing; not overwritten without force")
            trash = self.out.parent / f".{self.out.name}.old-{uuid.uuid4().hex[:12]}"
            os.rename(self.out, trash)
        os.rename(self.tmp, self.out)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)


def write_blocks(
    out: str | os.PathLike[str],
    blocks: Iterable[tuple[sp.csr_matrix, np.ndarray]],
    n_features: int,
    *,
    task: str = "auto",
    force: bool = False,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    metadata: dict[str, Any] | None = None,
    memory_bytes: int = DEFAULT_MEMORY,
    label_mapping: dict[str, int] | None = None,
    labels: list[float] | None = None,
) -> dict[str, Any]:
    """Write (CSR block, labels) pairs as a store; the task and label mapping are resolved
    from ``labels`` (declared, public) or the labels seen (``label_mapping``), or taken as given
    (``task`` and ``label_mapping`` of a source store, for its parts: pass its ``schema`` in
    ``metadata``). Returns the store's metadata."""
    check_task(task)
    writer = StoreWriter(out, force=force, memory_bytes=memory_bytes, n_features=n_features)
    try:
        for X, y in blocks:
            writer.append(X.indptr, X.indices, X.data, y)
        if label_mapping is not None:
            unknown = set(map(float, writer.distinct_labels or [])) - {float(v) for v in label_mapping}
            if writer.distinct_labels is None or unknown:
                raise ParameterError(f"{out}: labels outside the given label mapping")
            resolved, mapping = task, label_mapping
            how = (metadata or {}).get("schema", "inferred")
        else:
            resolved, mapping = _resolve_labels(writer.distinct_labels, task, str(out), labels)
            how = schema(task, labels)
    except BaseException:
        writer.abort()
        raise
    # n_features is the caller's; a part of a split or a table with coded columns passes its own schema
    meta = {"feature_schema": "declared", **(metadata or {}), "task": resolved, "label_mapping": mapping, "schema": how}
    return writer.finish(n_features=n_features, block_rows=block_rows, metadata=meta)


def write_store(
    out: str | os.PathLike[str],
    X: sp.spmatrix | np.ndarray,
    y: np.ndarray,
    *,
    task: str = "auto",
    force: bool = False,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    metadata: dict[str, Any] | None = None,
    memory_bytes: int = DEFAULT_MEMORY,
    labels: list[float] | None = None,
) -> dict[str, Any]:
    """Write an in-memory matrix (dense or sparse) and its labels as a store (``labels``: declared classes)."""
    X = sp.csr_matrix(X, dtype=np.float64)
    X.sum_duplicates()
    X.sort_indices()
    y = np.asarray(y, dtype=np.float64).ravel()
    if y.shape[0] != X.shape[0]:
        raise ParameterError("X and y have different numbers of rows")
    if not (np.all(np.isfinite(X.data)) and np.all(np.isfinite(y))):
        raise ParameterError("X and y must be finite")
    step = max(1, block_rows)
    blocks = ((X[r0:r1], y[r0:r1]) for r0, r1 in _ranges(X.shape[0], step))
    return write_blocks(
        out,
        blocks,
        X.shape[1],
        task=task,
        force=force,
        block_rows=block_rows,
        metadata=metadata,
        memory_bytes=memory_bytes,
        labels=labels,
    )


# ------------------------------------------------------------------------ reading

_READ_POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="store-read")


def _chunk_decoder(arr: zarr.Array) -> Callable[[bytes, np.ndarray], object] | None:
    """numcodecs' decompress-into-a-buffer for a 1-d array of ours (a plain little-endian
    BytesCodec then Blosc or Zstd, on a local directory), else None (zarr reads it)."""
    from zarr.codecs import BytesCodec, ZstdCodec
    from zarr.storage import LocalStore

    codecs = arr.metadata.codecs if arr.metadata.zarr_format == 3 else ()
    if (
        len(codecs) != 2
        or not isinstance(codecs[0], BytesCodec)
        or arr.ndim != 1
        or not isinstance(arr.store, LocalStore)
        or arr.dtype.byteorder == ">"
        or (codecs[0].endian is not None and codecs[0].endian.value != sys.byteorder)
    ):
        return None
    if isinstance(codecs[1], BloscCodec):
        from numcodecs.blosc import decompress
    elif isinstance(codecs[1], ZstdCodec):
        from numcodecs.zstd import decompress
    else:
        return None
    return decompress


def _chunk_path(arr: zarr.Array, k: int) -> Path:
    """The file of chunk k of a 1-d array on a local directory."""
    return Path(str(arr.store.root)) / arr.path / arr.metadata.encode_chunk_key((k,))


def _raw_chunk(arr: zarr.Array, k: int) -> bytes | None:
    """The stored (compressed) bytes of chunk k of a 1-d array on a local directory; None when the
    chunk is not written (zarr skips a chunk equal to the fill value)."""
    try:
        return _chunk_path(arr, k).read_bytes()
    except FileNotFoundError:
        return None


def _read_range(arr: zarr.Array, a: int, b: int, dtype: np.dtype | type | None = None) -> np.ndarray:
    """arr[a:b] of a 1-d array, its chunks read and decompressed straight into the result in
    threads (2-3x faster than zarr's generic path for our arrays: no intermediate buffers);
    zarr's own read for any other layout. ``dtype``: the result's (default the array's); the
    chunks are converted one at a time, so no whole-range copy in the stored dtype is made."""
    dtype = arr.dtype if dtype is None else np.dtype(dtype)
    decompress = _chunk_decoder(arr)
    if decompress is None or b <= a:
        if dtype == arr.dtype:
            return arr[a:b]
        out = np.empty(max(0, b - a), dtype=dtype)
        c = arr.chunks[0]
        for lo in [a, *range((a // c + 1) * c, b, c)]:  # chunk by chunk
            hi = min(b, (lo // c + 1) * c)
            out[lo - a : hi - a] = arr[lo:hi]
        return out
    c = arr.chunks[0]
    out = np.empty(b - a, dtype=dtype)

    def read_chunk(k: int) -> None:
        lo, hi = max(a, k * c), min(b, (k + 1) * c)
        dst = out[lo - a : hi - a]
        raw = _raw_chunk(arr, k)
        if raw is None:
            dst[:] = arr.metadata.fill_value
        elif hi - lo == c and dtype == arr.dtype:
            decompress(raw, dst)
        else:  # a chunk partly inside [a, b) (chunks are stored whole, the last one padded), or converted
            dst[:] = np.frombuffer(decompress(raw), dtype=arr.dtype)[lo - k * c : hi - k * c]

    for f in [_READ_POOL.submit(read_chunk, k) for k in range(a // c, (b - 1) // c + 1)]:
        f.result()
    return out


_SCRATCH: queue.Queue = queue.Queue()  # reused chunk buffers: at most 4 (64 MB) per process, whatever its cores
for _ in range(4):
    _SCRATCH.put(None)


# (decoder, dtype, chunk length, value) -> the stored bytes of a whole chunk found all equal to
# value: a chunk stored as the same bytes decodes to the same elements, so it is not decompressed again
_EQUAL_CHUNK: dict[tuple, bytes] = {}


def _all_equal(arr: zarr.Array, a: int, b: int, value: float) -> bool:
    """Whether every element of arr[a:b] equals ``value``, its chunks decompressed in threads into
    reused scratch buffers (``_SCRATCH``), so the range is never in memory whole (on this kind of
    VM the first touch of fresh memory costs more than the decompression); zarr's own read for
    any other layout. Stops reading once a chunk differs (the first is read before the others).

    A chunk stored as the same bytes as a whole chunk already found all equal (``_EQUAL_CHUNK``,
    e.g. 2M stored 1.0s of a binary store: 69 kB) is equal without being decompressed: the decoder
    is a function of those bytes."""
    decompress = _chunk_decoder(arr)
    if decompress is None or b <= a:
        return bool(np.all(arr[a:b] == value))
    c = arr.chunks[0]
    differs = threading.Event()
    known = (decompress, arr.dtype.str, c, value)

    def check_chunk(k: int) -> None:
        if differs.is_set():
            return
        raw = _raw_chunk(arr, k)
        if raw is None:
            equal = bool(arr.metadata.fill_value == value)
        elif raw == _EQUAL_CHUNK.get(known):
            equal = True
        else:
            buf = _SCRATCH.get()
            try:
                if buf is None or buf.dtype != arr.dtype or buf.shape[0] != c:
                    buf = np.empty(c, dtype=arr.dtype)
                decompress(raw, buf)  # chunks are stored whole (the last one padded)
                equal = bool(np.all(buf[max(a, k * c) - k * c : min(b, (k + 1) * c) - k * c] == value))
                if equal and a <= k * c and (k + 1) * c <= b:  # all c elements were compared
                    _EQUAL_CHUNK[known] = raw
            finally:
                _SCRATCH.put(buf)
        if not equal:
            differs.set()

    first, last = a // c, (b - 1) // c
    check_chunk(first)  # a range that is not binary mostly differs in its first chunk: no other is read
    for f in [_READ_POOL.submit(check_chunk, k) for k in range(first + 1, last + 1)]:
        f.result()
    return not differs.is_set()


_PIECE_BUFFERS = threading.local()  # per thread: (array name, dtype, chunk length) -> a reused chunk buffer


def _raw_chunk_into(arr: zarr.Array, k: int) -> memoryview | None:
    """``_raw_chunk`` read into a bytearray of the calling thread that the next call overwrites
    (grown as needed): no allocation per chunk. (A Dask worker's allocator returns freed memory
    to the system at once, ``MALLOC_TRIM_THRESHOLD_``, so a fresh bytes object per chunk pays
    the first touch of its pages every time.)"""
    try:
        f = open(_chunk_path(arr, k), "rb", buffering=0)
    except FileNotFoundError:
        return None
    with f:
        n = os.fstat(f.fileno()).st_size
        buf = getattr(_PIECE_BUFFERS, "raw", None)
        if buf is None or len(buf) < n:
            buf = _PIECE_BUFFERS.raw = bytearray(max(n, 1 << 20))
        view = memoryview(buf)[:n]
        got = 0
        while got < n:
            r = f.readinto(view[got:])
            if not r:  # the message names the array, not the chunk (whose number follows from the data)
                raise OSError(f"store {arr.store.root}: a chunk file of {arr.path} ended early")
            got += r
        return view


def _piece_buffer(name: str, dtype: np.dtype, n: int) -> np.ndarray:
    buffers = _PIECE_BUFFERS.__dict__.setdefault("buffers", {})
    key = (name, np.dtype(dtype).str, n)
    if key not in buffers:
        buffers[key] = np.empty(n, dtype=dtype)
    return buffers[key]


class ColumnStream:
    """The CSC entries of a column range, read in pieces without holding the range in memory.

    ``indptr`` holds the range's column pointers (from its first entry's absolute position,
    ``indptr[0]``); ``binary`` says that every stored value of the range is 1.0 (then the pieces
    carry no values: read x_ij as 1). ``pieces(lo, hi)`` yields (p, rows, values) over the
    entries at positions [lo, hi) of the range (counted from its first entry), in order: rows
    and values (None when binary) of the entries p, p+1, ... With our stores' codecs each piece
    is one stored chunk decompressed into a buffer of the calling thread that the next piece
    overwrites: no fresh memory, which on this kind of VM costs more to touch the first time
    than the decompression (1.23 GB of KDDA's row indices: 0.10 s decompressed by 2 threads
    into reused buffers, 0.5-0.7 s into fresh ones). Any other layout yields one piece read
    whole. Which ranges are binary depends on the data and changes only memory and time,
    never a value read through it.
    """

    def __init__(self, g: zarr.Group, indptr: np.ndarray, binary: bool) -> None:
        self._g = g
        self.binary = binary
        self.indptr = indptr

    def pieces(self, lo: int, hi: int) -> Iterator[tuple[int, np.ndarray, np.ndarray | None]]:
        if hi <= lo:
            return
        a = int(self.indptr[0])
        arrays = [self._g["indices"]] + ([] if self.binary else [self._g["data"]])
        decoders = [_chunk_decoder(x) for x in arrays]
        if any(d is None for d in decoders) or len({x.chunks[0] for x in arrays}) > 1:
            read = [_read_range(x, a + lo, a + hi) for x in arrays]
            yield lo, read[0], None if self.binary else read[1]
            return
        c = arrays[0].chunks[0]
        for k in range((a + lo) // c, (a + hi - 1) // c + 1):
            p0, p1 = max(a + lo, k * c), min(a + hi, (k + 1) * c)
            read = []
            for x, decompress in zip(arrays, decoders):
                buf = _piece_buffer(x.basename, x.dtype, c)
                raw = _raw_chunk_into(x, k)
                if raw is None:
                    buf[:] = x.metadata.fill_value
                else:
                    decompress(raw, buf)  # chunks are stored whole (the last one padded)
                read.append(buf[p0 - k * c : p1 - k * c])
            yield p0 - a, read[0], None if self.binary else read[1]


VALUE_DTYPES = ("float64", "float32")


def _value_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as one of the value dtypes a store's matrices are read in (:data:`VALUE_DTYPES`)."""
    d = np.dtype(dtype)
    if d.name not in VALUE_DTYPES:
        raise ParameterError(f"values are read as one of {VALUE_DTYPES}, not {d.name}")
    return d


class _BlockCache:
    """Per-process cache of decompressed store blocks (arrays made read-only).

    The budget is a quarter of the Dask worker's memory limit when running on a worker that
    has one, else 1 GiB. Keys name the store path, its dataset id, the array and the block, so
    a store rewritten with different content at the same path is never served stale.

    Eviction is least-recently-used across arrays, but a block never evicts blocks of its own
    array: the graphs read an array in the same order on every pass, and LRU on a cyclic scan
    larger than the budget evicts each block just before it is read again (no hit at all),
    where keeping the first blocks read serves that share of every later pass. A block that
    does not fit beside them is returned uncached. A block read in another partition of the
    same array (other row or column bounds) replaces the cached blocks it overlaps.
    """

    def __init__(self) -> None:
        self._items: OrderedDict[tuple, tuple[np.ndarray, ...]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def budget() -> int:
        if "distributed" in sys.modules:
            try:
                limit = sys.modules["distributed"].get_worker().memory_manager.memory_limit
                if limit:
                    return int(limit) // 4
            except (ValueError, AttributeError):
                pass
        return 1 << 30

    def get(self, key: tuple, load: Callable[[], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
        value = load()
        for a in value:
            a.flags.writeable = False
        size = sum(a.nbytes for a in value)
        budget = self.budget()
        with self._lock:
            self.misses += 1
            if key not in self._items:
                if len(key) == 5:  # (store, id, array, lo, hi): a read in another partition replaces what it overlaps
                    for k in [k for k in self._items if k[:3] == key[:3] and k[3] < key[4] and key[3] < k[4]]:
                        self._bytes -= sum(a.nbytes for a in self._items.pop(k))
                for k in [k for k in self._items if k[:3] != key[:3]]:  # other arrays, least recent first
                    if self._bytes + size <= budget:
                        break
                    self._bytes -= sum(a.nbytes for a in self._items.pop(k))
                if self._bytes + size <= budget:
                    self._items[key] = value
                    self._bytes += size
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
            self.hits = self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes


BLOCK_CACHE = _BlockCache()


class SparseStore:
    """Read access to a store: row blocks (CSR), column ranges (CSC), labels, a Dask view.

    With ``cache=True`` the row blocks, column ranges and labels read are kept in
    ``BLOCK_CACHE`` (read-only arrays) and served from it when read again in this process.
    """

    def __init__(self, path: str | os.PathLike[str], cache: bool = False) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise ParameterError(f"store {self.path} does not exist")
        try:
            self.root = zarr.open_group(self.path, mode="r", zarr_format=3)
            meta = dict(self.root.attrs["dpdist"])
        except (KeyError, FileNotFoundError, ValueError) as e:
            raise ParameterError(f"{self.path} is not a dpdist store ({e})") from None
        if meta.get("format") != FORMAT or meta.get("format_version") not in READABLE_VERSIONS:
            raise ParameterError(
                f"{self.path}: unsupported store format {meta.get('format')!r} version {meta.get('format_version')!r}"
            )
        self.meta = meta
        self.cache = cache
        self._X = self.root["X"]
        self._C = self.root["X_csc"]

    # -------------------------------------------------------------- properties

    @property
    def dataset_id(self) -> str:
        return self.meta["dataset_id"]

    @property
    def budget_id(self) -> str:
        """The ledger key its releases are charged to: the source's content hash for a part of a split
        (its records are the source's), else its own."""
        return self.meta.get("split_of") or self.dataset_id

    @property
    def name(self) -> str | None:
        """The store's public name (None for stores written before names existed)."""
        return self.meta.get("name")

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.meta["n_rows"]), int(self.meta["n_features"])

    @property
    def nnz(self) -> int:
        return int(self.meta["nnz"])

    @property
    def task(self) -> str:
        return self.meta.get("task", "regression")

    @property
    def block_rows(self) -> int:
        return int(self.meta["block_rows"])

    @property
    def y(self) -> np.ndarray:
        if self.cache:
            return self._cached(("y",), lambda: (_read_range(self.root["y"], 0, self.shape[0]),))[0]
        return _read_range(self.root["y"], 0, self.shape[0])

    def __repr__(self) -> str:
        n, d = self.shape
        return f"SparseStore({str(self.path)!r}, shape=({n}, {d}), nnz={self.nnz}, task={self.task!r})"

    # ------------------------------------------------------------------ reads

    def row_bounds(self, block_rows: int | None = None) -> list[tuple[int, int]]:
        """[(r0, r1), ...] covering all rows in blocks of ``block_rows`` (default: the store's)."""
        step = int(block_rows or self.block_rows)
        if step < 1:
            raise ParameterError(f"block_rows must be >= 1, got {step}")
        return _ranges(self.shape[0], step)

    def column_bounds(self, n_blocks: int) -> list[tuple[int, int]]:
        """[(c0, c1), ...]: the columns in ``n_blocks`` ranges of equal width (the last may be shorter)."""
        d = self.shape[1]
        return _ranges(d, max(1, -(-d // max(1, int(n_blocks))))) if d else []

    def _cached(self, key: tuple, load: Callable[[], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        return BLOCK_CACHE.get((str(self.path.resolve()), self.dataset_id, *key), load)

    @staticmethod
    def _read_slice(g: zarr.Group, lo: int, hi: int, dtype: type = np.float64) -> tuple[np.ndarray, ...]:
        ptr = _read_range(g["indptr"], lo, hi + 1)
        a, b = int(ptr[0]), int(ptr[-1])
        ptr -= a
        return _read_range(g["data"], a, b, dtype), _read_range(g["indices"], a, b), ptr

    def _slice(self, g: zarr.Group, lo: int, hi: int, dtype: type = np.float64) -> tuple[np.ndarray, ...]:
        """(data, indices, indptr) of the compressed rows/columns [lo, hi) of a sparse group, the
        values as ``dtype``."""
        dtype = _value_dtype(dtype)
        if self.cache:
            name = g.basename if dtype == np.float64 else f"{g.basename}:{dtype.str}"  # (array, lo, hi) keys
            return self._cached((name, lo, hi), lambda: self._read_slice(g, lo, hi, dtype))
        return self._read_slice(g, lo, hi, dtype)

    def read_rows(self, r0: int, r1: int, dtype: type = np.float64) -> sp.csr_matrix:
        """Rows [r0, r1) as a CSR matrix with all columns (values as ``dtype``: float64 or float32)."""
        return sp.csr_matrix(self._slice(self._X, r0, r1, dtype), shape=(r1 - r0, self.shape[1]))

    def read_columns(self, c0: int, c1: int, dtype: type = np.float64) -> sp.csc_matrix:
        """Columns [c0, c1) as a CSC matrix with all rows (values as ``dtype``: float64 or float32)."""
        return sp.csc_matrix(self._slice(self._C, c0, c1, dtype), shape=(self.shape[0], c1 - c0))

    def column_slice(self, c0: int, c1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, row indices, column pointers from 0) of columns [c0, c1), from the CSC copy."""
        return self._slice(self._C, c0, c1)

    def column_stream(self, c0: int, c1: int) -> ColumnStream:
        """The entries of columns [c0, c1) of the CSC copy, to be read in pieces
        (``ColumnStream``); its pointers and whether its values are all 1.0 are kept in the
        block cache with ``cache=True``."""

        def load() -> tuple[np.ndarray, np.ndarray]:
            ptr = _read_range(self._C["indptr"], c0, c1 + 1)
            return ptr, np.array([_all_equal(self._C["data"], int(ptr[0]), int(ptr[-1]), 1.0)])

        ptr, binary = self._cached(("X_csc:stream", c0, c1), load) if self.cache else load()
        return ColumnStream(self._C, ptr, bool(binary[0]))

    def iter_row_blocks(self, block_rows: int | None = None) -> Iterator[tuple[int, sp.csr_matrix, np.ndarray]]:
        """Yield (r0, X block, y block) over the whole store."""
        y = self.root["y"]
        for r0, r1 in self.row_bounds(block_rows):
            yield r0, self.read_rows(r0, r1), y[r0:r1]

    def csr(self, dtype: type = np.float64) -> sp.csr_matrix:
        """The whole matrix in CSR form (in memory). ``dtype=np.float32`` holds the values in half
        the memory, each rounded to the nearest float32 (a per-entry map: |x| <= 1 stays <= 1)."""
        return self.read_rows(0, self.shape[0], dtype)

    def csc(self, dtype: type = np.float64) -> sp.csc_matrix:
        """The whole matrix in CSC form (in memory), read from the stored CSC copy (``dtype``: as
        :meth:`csr`)."""
        return self.read_columns(0, self.shape[1], dtype)

    def to_dask(self, block_rows: int | None = None):
        """X as a Dask array of row blocks whose chunks are ``sparse.GCXS`` (CSR) arrays."""
        import dask
        import dask.array as da
        import sparse

        n, d = self.shape
        path = str(self.path)
        meta = sparse.GCXS.from_numpy(np.zeros((0, 0)), compressed_axes=(0,))
        blocks = [
            da.from_delayed(dask.delayed(_load_gcxs)(path, r0, r1), shape=(r1 - r0, d), dtype=np.float64, meta=meta)
            for r0, r1 in self.row_bounds(block_rows)
        ]
        return da.concatenate(blocks, axis=0) if blocks else da.zeros((0, d), chunks=(1, d))


def _load_gcxs(path: str, r0: int, r1: int):
    import sparse

    return sparse.GCXS(SparseStore(path).read_rows(r0, r1))


def open_store(path: str | os.PathLike[str], cache: bool = False) -> SparseStore:
    """Open a dpdist store for reading (``cache=True``: through the per-process block cache)."""
    return SparseStore(path, cache=cache)
