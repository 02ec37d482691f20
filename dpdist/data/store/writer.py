"""Writing a store: row blocks appended in whole chunks, the CSC copy built from on-disk buckets, the dataset id
hashed as the rows stream in, and the finished tree renamed into place (atomic, owner-only)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import zarr

from dpdist.data.store.buckets import (
    COL_BITS,
    MAX_BUCKETS,
    RECORD_BYTES,
    bucket_counts,
    bucket_records,
    column_groups,
    partition_by_group,
    read_frames,
    scatter_columns,
    sort_bucket,
    write_frame,
)
from dpdist.data.store.chunks import Array
from dpdist.data.store.format import CODEC, FORMAT, FORMAT_VERSION, ID_DOMAIN, VALUES_CODEC, ranges
from dpdist.data.store.schema import MAX_TRACKED_LABELS, check_task, schema
from dpdist.data.store.schema import label_mapping as resolve_labels
from dpdist.exceptions import ParameterError
from dpdist.utils.files import private_dir, restrict_tree
from dpdist.utils.io import make_parents, remove_made
from dpdist.utils.random import random_name

__all__ = ["DEFAULT_BLOCK_ROWS", "DEFAULT_MEMORY", "StoreWriter", "move_into_place", "write_blocks", "write_store"]

NNZ_CHUNK = 1 << 21  # elements per chunk of data/indices
ROW_CHUNK = 1 << 18  # elements per chunk of indptr and y
DEFAULT_BLOCK_ROWS = 1 << 16
DEFAULT_MEMORY = 256 << 20  # bytes of entries held in memory while building the CSC copy
_INT32_MAX = 2**31 - 1


def _array(g: zarr.Group, name: str, chunk: int, dtype: str) -> Array:
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

    def __init__(self, arr: Array) -> None:
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
        if not index_offsets or any(o < 0 for o in index_offsets):
            raise ParameterError(f"index_offsets must be non-negative offsets, got {index_offsets}")
        self.memory_bytes = int(memory_bytes)
        self.force = force
        self.index_offsets = tuple(dict.fromkeys(int(o) for o in index_offsets))
        self._guess = self.index_offsets[0]
        self.tmp = self.out.parent / f".{self.out.name}.tmp-{uuid.uuid4().hex[:12]}"
        self._made = make_parents(self.out.parent)  # removed again by abort: a failed store leaves no directory
        try:
            private_dir(self.tmp)
        except BaseException:
            remove_made(self._made)
            raise
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
            self._bucket_shift = int(min(COL_BITS, max(10, np.ceil(np.log2(max(width, 2) / 128)))))
        if (hi >> self._bucket_shift) >= MAX_BUCKETS and self._bucket_shift < COL_BITS:
            self._rebucket(self._bucket_shift, min(COL_BITS, int(np.ceil(np.log2((hi + 1) / 128)))))
        shift = self._bucket_shift
        if self.n_rows + indptr.shape[0] - 1 >= 1 << (63 - COL_BITS):
            raise ParameterError(f"more than 2^{63 - COL_BITS} rows are not supported")
        n_buckets = (hi >> shift) + 1
        v, k = np.empty(indices.shape[0]), np.empty(indices.shape[0], dtype=np.int64)
        starts = bucket_records(indptr, indices, data, self.n_rows, shift, n_buckets, v, k)
        for b in np.flatnonzero(np.diff(starts)).tolist():
            write_frame(self._bucket_dir / f"{b}.bin", v[starts[b] : starts[b + 1]], k[starts[b] : starts[b + 1]])
            self._bucket_sizes[b] = self._bucket_sizes.get(b, 0) + int(starts[b + 1] - starts[b])

    def _rebucket(self, old: int, shift: int) -> None:
        """Wider buckets (columns far beyond the first block's): merge the files, in column order."""
        delta = shift - old
        sizes: dict[int, int] = {}
        for b in sorted(self._bucket_sizes):
            frames = list(read_frames(self._bucket_dir / f"{b}.bin"))
            (self._bucket_dir / f"{b}.bin").unlink()
            for v, k in frames:  # keys get the column within the wider bucket
                write_frame(self._bucket_dir / f"{b >> delta}.bin", v, k + ((b & ((1 << delta) - 1)) << old))
            sizes[b >> delta] = sizes.get(b >> delta, 0) + self._bucket_sizes[b]
        self._bucket_sizes, self._bucket_shift = sizes, shift

    @property
    def distinct_labels(self) -> list[float] | None:
        """The sorted distinct labels, or None when there are more than MAX_TRACKED_LABELS."""
        return None if self._labels is None else sorted(self._labels)

    # ------------------------------------------------------------------ finishing

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        remove_made(self._made)

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
        for a, b in ranges(arr.shape[0], NNZ_CHUNK):
            shifted = np.asarray(arr[a:b], dtype=np.int64) + delta
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
        cap = max(1, self.memory_bytes // RECORD_BYTES // 3)  # up to 3 sorted buckets in memory at once
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
                            sort_bucket,
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
        for _, k in read_frames(path):
            bucket_counts(k, lo, counts)
        groups = column_groups(counts, cap)
        parts = [path.with_name(f"{path.stem}.{g}.bin") for g in range(len(groups))]
        ends = np.array([lo + g1 for _, g1 in groups[:-1]], dtype=np.int64)
        for v, k in read_frames(path, cap):
            v_out, k_out = np.empty_like(v), np.empty_like(k)
            starts = partition_by_group(v, k, ends, v_out, k_out)
            for g in np.flatnonzero(np.diff(starts)):
                write_frame(parts[g], v_out[starts[g] : starts[g + 1]], k_out[starts[g] : starts[g + 1]])
        for (g0, g1), part in zip(groups, parts):
            n_group = int(counts[g0:g1].sum())
            if n_group == 0:
                continue
            rows = np.empty(min(n_group, cap), dtype=row_dtype)
            vals = np.empty(min(n_group, cap))
            cursor = np.zeros(g1 - g0, dtype=np.int64)
            np.cumsum(counts[g0 : g1 - 1], out=cursor[1:])
            for v, k in read_frames(part, cap):
                if n_group > cap:  # a single column: its entries stream out in row order
                    cursor[0] = 0
                scatter_columns(v, k, lo + g0, lo + g1, cursor, rows, vals)
                if n_group > cap:
                    indices.append(rows[: cursor[0]])
                    data.append(vals[: cursor[0]])
            if n_group <= cap:
                indices.append(rows)
                data.append(vals)
            part.unlink()
        return counts

    def _rename_into_place(self) -> None:
        move_into_place(self.tmp, self.out, self.force)


def move_into_place(tmp: Path, out: Path, force: bool) -> None:
    """Rename the finished tree ``tmp`` to ``out`` (a sibling), replacing an existing ``out`` only with ``force``."""
    trash = None
    if out.exists():
        if not force:
            raise ParameterError(f"store {out} appeared while writing; not overwritten without force")
        trash = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:12]}"
        os.rename(out, trash)
    os.rename(tmp, out)
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
    mapping: dict[str, int] | None
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
            resolved, mapping = resolve_labels(writer.distinct_labels, task, str(out), labels)
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
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write an in-memory matrix (dense or sparse) and its labels as a store (``labels``: declared classes;
    ``progress(rows_written, rows)`` after each block: the operator's view, never a release)."""
    X = sp.csr_matrix(X, dtype=np.float64)
    X.sum_duplicates()
    X.sort_indices()
    y = np.asarray(y, dtype=np.float64).ravel()
    if y.shape[0] != X.shape[0]:
        raise ParameterError("X and y have different numbers of rows")
    if not (np.all(np.isfinite(X.data)) and np.all(np.isfinite(y))):
        raise ParameterError("X and y must be finite")
    step = max(1, block_rows)
    n = X.shape[0]

    def blocks() -> Iterator[tuple[sp.csr_matrix, np.ndarray]]:
        for r0, r1 in ranges(n, step):
            yield X[r0:r1], y[r0:r1]
            if progress is not None:
                progress(r1, n)

    return write_blocks(
        out,
        blocks(),
        X.shape[1],
        task=task,
        force=force,
        block_rows=block_rows,
        metadata=metadata,
        memory_bytes=memory_bytes,
        labels=labels,
    )
