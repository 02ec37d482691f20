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

Writing is atomic: everything goes to a temporary directory beside the target that is
renamed into place only when complete; a failure removes it and leaves no store behind.
A store holds raw records, so it is owner-only whatever the umask (``dpdist.utils.files``):
the temporary directory is made 0700 before anything is written into it (so nothing zarr
creates inside, with the umask's mode, is reachable by others), the CSC buckets 0600, and
every file and directory of the finished tree 0600/0700 before the rename.
The CSC copy is built out of core: one pass over the CSR rows splits the entries into
column-range buckets of bounded size on disk, then each bucket is sorted by column and
written. Peak memory is bounded by the block and bucket sizes, not by the data.

The dataset id is a SHA-256 of the canonical content (shape, row lengths, column indices,
values and labels), so the same data has the same id whatever file it came from.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import zarr

from dpdist.exceptions import ParameterError
from dpdist.utils.random import random_name
from dpdist.utils.files import open_private, private_dir, restrict_tree

__all__ = ["TASKS", "SparseStore", "StoreWriter", "check_schema", "check_task", "label_mapping", "open_store",
           "schema", "write_blocks",
           "write_store"]

FORMAT = "dpdist-sparse-store"
FORMAT_VERSION = 1
NNZ_CHUNK = 1 << 21  # elements per chunk of data/indices
ROW_CHUNK = 1 << 18  # elements per chunk of indptr and y
DEFAULT_BLOCK_ROWS = 1 << 16
DEFAULT_MEMORY = 256 << 20  # bytes of entries held in memory while building the CSC copy
MAX_TRACKED_LABELS = 1000
TASKS = ("auto", "binary", "multiclass", "regression")


def check_task(task: str) -> str:
    if task not in TASKS:
        raise ParameterError(f"task must be one of {TASKS}, got {task!r}")
    return task


def label_mapping(labels: list[float] | None, task: str, source: str,
                  declared: list[float] | None = None) -> tuple[str, dict[str, int] | None]:
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
        raise ParameterError(f"{source}: task=binary needs exactly 2 distinct labels, found {len(labels)}")
    return task, {repr(float(v)): i for i, v in enumerate(labels)}


def schema(task: str, declared: list[float] | None) -> str:
    """"declared" when the task and the classes are the user's (public), "inferred" when read from the data."""
    return "declared" if declared is not None or task == "regression" else "inferred"


def check_schema(store: Any) -> None:
    """Refuse private use of a store whose task or classes were inferred from its data.

    Under ADD/REMOVE neighbours one record with a new label would change the task (binary ->
    regression) or the class codes of every other record: the coding of the targets must be a
    public, per-record map. Raised before any charge or computation.
    """
    if store.meta.get("schema") != "declared":
        raise ParameterError(
            f"store {store.path}: its task and labels were inferred from the data, so one record could recode all "
            "the others; declare them (public knowledge) and ingest again: --task binary --labels=-1,1 (your two "
            "labels), --task multiclass --labels ..., or --task regression (data.task / data.labels in a run config)")


_resolve_labels = label_mapping  # write_blocks has a parameter of that name


def _ranges(n: int, step: int) -> list[tuple[int, int]]:
    return [(r0, min(r0 + step, n)) for r0 in range(0, n, step)]


def _sparse_group(root: zarr.Group, name: str, encoding: str, nnz: int, index_dtype: str | None) -> zarr.Group:
    """A group in the AnnData sparse encoding; ``index_dtype=None`` leaves ``indices`` out."""
    g = root.create_group(name)
    g.attrs.update({"encoding-type": encoding, "encoding-version": "0.1.0"})
    g.create_array("data", shape=(nnz,), chunks=(NNZ_CHUNK,), dtype="float64")
    if index_dtype is not None:
        g.create_array("indices", shape=(nnz,), chunks=(NNZ_CHUNK,), dtype=index_dtype)
    g.create_array("indptr", shape=(0,), chunks=(ROW_CHUNK,), dtype="int64")
    return g


class _Appender:
    """Appends to a 1-d zarr array (resize, then write the new tail)."""

    def __init__(self, arr: zarr.Array) -> None:
        self.arr = arr
        self.size = arr.shape[0]

    def append(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        n = self.size + values.size
        self.arr.resize((n,))
        self.arr[self.size : n] = values
        self.size = n


class StoreWriter:
    """Write a store from row blocks; ``finish`` builds the CSC copy and renames it into place.

    Indices appended are shifted by ``-index_offset`` at ``finish``: pass the offset when it is
    known only after the last block (one-based svmlight files).
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        *,
        force: bool = False,
        memory_bytes: int = DEFAULT_MEMORY,
    ) -> None:
        self.out = Path(out)
        if self.out.exists() and not force:
            raise ParameterError(f"store {self.out} already exists; pass --force (force=True) to overwrite it")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.memory_bytes = int(memory_bytes)
        self.force = force
        self.tmp = self.out.parent / f".{self.out.name}.tmp-{uuid.uuid4().hex[:12]}"
        private_dir(self.tmp)
        self.root = zarr.open_group(self.tmp, mode="w-", zarr_format=3)
        g = _sparse_group(self.root, "X", "csr_matrix", 0, None)
        self._data, self._indptr = _Appender(g["data"]), _Appender(g["indptr"])
        # raw indices, shifted and stored compactly in X/indices by finish()
        raw = self.root.create_array("_raw_indices", shape=(0,), chunks=(NNZ_CHUNK,), dtype="int64")
        self._indices = _Appender(raw)
        self._y = _Appender(self.root.create_array("y", shape=(0,), chunks=(ROW_CHUNK,), dtype="float64"))
        self._indptr.append(np.zeros(1, dtype=np.int64))
        self.n_rows = 0
        self.nnz = 0
        self.min_index: int | None = None
        self.max_index = -1
        self._col_counts = np.zeros(0, dtype=np.int64)
        self._labels: set[float] | None = set()

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
        if indices.size:
            lo, hi = int(indices.min()), int(indices.max())
            if lo < 0:
                raise ParameterError(f"negative column index {lo}")
            self.min_index = lo if self.min_index is None else min(self.min_index, lo)
            self.max_index = max(self.max_index, hi)
            counts = np.bincount(indices, minlength=hi + 1)
            if counts.size > self._col_counts.size:
                counts[: self._col_counts.size] += self._col_counts
                self._col_counts = counts
            else:
                self._col_counts[: counts.size] += counts
        self._data.append(np.asarray(data, dtype=np.float64))
        self._indices.append(np.asarray(indices, dtype=np.int64))
        self._indptr.append(np.asarray(indptr[1:], dtype=np.int64) + self.nnz)
        self._y.append(np.asarray(y, dtype=np.float64))
        if self._labels is not None:
            self._labels.update(np.unique(y).tolist())
            if len(self._labels) > MAX_TRACKED_LABELS:
                self._labels = None
        self.n_rows += n
        self.nnz += indices.shape[0]

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
            if self.min_index is not None and self.min_index < index_offset:
                raise ParameterError(
                    f"column index {self.min_index} found in a file read as {index_offset}-based"
                )
            needed = self.max_index + 1 - index_offset
            if n_features is None:
                n_features = max(needed, 0)
            elif n_features < needed:
                raise ParameterError(f"n_features={n_features} but the data has column index {needed - 1}")
            counts = np.zeros(n_features, dtype=np.int64)
            src = self._col_counts[index_offset:]
            counts[: src.size] = src
            dataset_id = self._shift_hash_and_build_csc(index_offset, counts, n_features)
            meta = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "dataset_id": dataset_id,  # private: a content hash (ledger and store internals only)
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

    def _shift_hash_and_build_csc(self, offset: int, counts: np.ndarray, n_features: int) -> str:
        X = self.root["X"]
        raw_arr, indptr_arr, data_arr, y_arr = self.root["_raw_indices"], X["indptr"], X["data"], self.root["y"]
        indices_arr = X.create_array(
            "indices", shape=(self.nnz,), chunks=(NNZ_CHUNK,), dtype="int32" if n_features < 2**31 else "int64"
        )
        csc = _sparse_group(self.root, "X_csc", "csc_matrix", self.nnz, "int32" if self.n_rows < 2**31 else "int64")
        colptr = np.zeros(n_features + 1, dtype=np.int64)
        np.cumsum(counts, out=colptr[1:])
        csc["indptr"].resize((n_features + 1,))
        csc["indptr"][:] = colptr

        # column-range buckets; an entry costs ~64 bytes while its bucket is sorted and written
        per_bucket = max(1, self.memory_bytes // 64)
        starts = [0]
        while starts[-1] < n_features:
            c0 = starts[-1]
            c1 = int(np.searchsorted(colptr, colptr[c0] + per_bucket, side="right")) - 1
            starts.append(min(n_features, max(c1, c0 + 1)))
        bounds = np.asarray(starts, dtype=np.int64)
        bucket_dir = private_dir(self.tmp / "_csc_buckets")
        files = [open_private(bucket_dir / f"{b}.bin") for b in range(len(bounds) - 1)]

        # one hash per component, so the id does not depend on how rows were blocked
        parts = {k: hashlib.sha256() for k in ("row_nnz", "indices", "data", "y")}
        rows = max(1, min(self.n_rows, (self.memory_bytes // 64) // max(1, self.nnz // max(1, self.n_rows))))
        try:
            for r0, r1 in _ranges(self.n_rows, rows):
                ptr = indptr_arr[r0 : r1 + 1]
                a, b = int(ptr[0]), int(ptr[-1])
                cols = raw_arr[a:b] - offset
                vals = data_arr[a:b]
                indices_arr[a:b] = cols.astype(indices_arr.dtype)
                parts["row_nnz"].update(np.diff(ptr).astype("<i8").tobytes())
                parts["indices"].update(cols.astype("<i8").tobytes())
                parts["data"].update(vals.astype("<f8").tobytes())
                parts["y"].update(y_arr[r0:r1].astype("<f8").tobytes())
                row_ids = np.repeat(np.arange(r0, r1, dtype=np.int64), np.diff(ptr))
                which = np.searchsorted(bounds, cols, side="right") - 1
                order = np.argsort(which, kind="stable")
                split = np.searchsorted(which[order], np.arange(len(files) + 1))
                for bkt in range(len(files)):
                    sel = order[split[bkt] : split[bkt + 1]]
                    if sel.size:
                        rec = np.empty((sel.size, 3), dtype=np.float64)
                        rec[:, 0] = vals[sel]
                        rec[:, 1] = row_ids[sel].view(np.float64)
                        rec[:, 2] = cols[sel].view(np.float64)
                        files[bkt].write(rec.tobytes())
        finally:
            for f in files:
                f.close()
        del self.root["_raw_indices"]
        for bkt in range(len(files)):
            path = bucket_dir / f"{bkt}.bin"
            rec = np.fromfile(path, dtype=np.float64).reshape(-1, 3)
            path.unlink()
            if rec.shape[0] == 0:
                continue
            cols = rec[:, 2].copy().view(np.int64)
            order = np.argsort(cols, kind="stable")  # rows stay ascending within a column
            a, b = int(colptr[bounds[bkt]]), int(colptr[bounds[bkt + 1]])
            csc["data"][a:b] = rec[order, 0]
            csc["indices"][a:b] = rec[order, 1].copy().view(np.int64).astype(csc["indices"].dtype)
        bucket_dir.rmdir()
        h = hashlib.sha256(f"{FORMAT}/{FORMAT_VERSION}".encode())
        h.update(np.asarray([self.n_rows, n_features], dtype="<i8").tobytes())
        for k in ("row_nnz", "indices", "data", "y"):
            h.update(parts[k].digest())
        return h.hexdigest()

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
    writer = StoreWriter(out, force=force, memory_bytes=memory_bytes)
    try:
        for X, y in blocks:
            writer.append(X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data, y)
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
    meta = {**(metadata or {}), "task": resolved, "label_mapping": mapping, "schema": how}
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
        raise ParameterError(f"X has {X.shape[0]} rows but y has {y.shape[0]} entries")
    if not (np.all(np.isfinite(X.data)) and np.all(np.isfinite(y))):
        raise ParameterError("X and y must be finite")
    step = max(1, block_rows)
    blocks = ((X[r0:r1], y[r0:r1]) for r0, r1 in _ranges(X.shape[0], step))
    return write_blocks(out, blocks, X.shape[1], task=task, force=force, block_rows=block_rows,
                        metadata=metadata, memory_bytes=memory_bytes, labels=labels)


class SparseStore:
    """Read access to a store: row blocks (CSR), column ranges (CSC), labels, a Dask view."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise ParameterError(f"store {self.path} does not exist")
        try:
            self.root = zarr.open_group(self.path, mode="r", zarr_format=3)
            meta = dict(self.root.attrs["dpdist"])
        except (KeyError, FileNotFoundError, ValueError) as e:
            raise ParameterError(f"{self.path} is not a dpdist store ({e})") from None
        if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
            raise ParameterError(f"{self.path}: unsupported store format {meta.get('format')!r} "
                                 f"version {meta.get('format_version')!r}")
        self.meta = meta
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
        return self.root["y"][:]

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

    @staticmethod
    def _slice(g: zarr.Group, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, indices, indptr) of the compressed rows/columns [lo, hi) of a sparse group."""
        ptr = g["indptr"][lo : hi + 1]
        a, b = int(ptr[0]), int(ptr[-1])
        return g["data"][a:b], g["indices"][a:b].astype(np.int64, copy=False), ptr - a

    def read_rows(self, r0: int, r1: int) -> sp.csr_matrix:
        """Rows [r0, r1) as a CSR matrix with all columns."""
        return sp.csr_matrix(self._slice(self._X, r0, r1), shape=(r1 - r0, self.shape[1]))

    def read_columns(self, c0: int, c1: int) -> sp.csc_matrix:
        """Columns [c0, c1) as a CSC matrix with all rows."""
        return sp.csc_matrix(self._slice(self._C, c0, c1), shape=(self.shape[0], c1 - c0))

    def iter_row_blocks(self, block_rows: int | None = None) -> Iterator[tuple[int, sp.csr_matrix, np.ndarray]]:
        """Yield (r0, X block, y block) over the whole store."""
        y = self.root["y"]
        for r0, r1 in self.row_bounds(block_rows):
            yield r0, self.read_rows(r0, r1), y[r0:r1]

    def csr(self) -> sp.csr_matrix:
        """The whole matrix in CSR form (in memory)."""
        return self.read_rows(0, self.shape[0])

    def csc(self) -> sp.csc_matrix:
        """The whole matrix in CSC form (in memory), read from the stored CSC copy."""
        return self.read_columns(0, self.shape[1])

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


def open_store(path: str | os.PathLike[str]) -> SparseStore:
    """Open a dpdist store for reading."""
    return SparseStore(path)
