"""Reading a store: row blocks (CSR), column ranges (CSC), labels, a Dask view."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from importlib import import_module
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import zarr

from dpdist.data.store.cache import BLOCK_CACHE
from dpdist.data.store.chunks import ColumnStream, all_equal, array, read_range
from dpdist.data.store.format import FORMAT, READABLE_VERSIONS, ranges
from dpdist.exceptions import ParameterError

__all__ = ["VALUE_DTYPES", "SparseStore", "open_store"]

VALUE_DTYPES = ("float64", "float32")


def value_dtype(dtype: npt.DTypeLike) -> np.dtype[Any]:
    """``dtype`` as one of the value dtypes a store's matrices are read in (:data:`VALUE_DTYPES`)."""
    d: np.dtype[Any] = np.dtype(dtype)
    if d.name not in VALUE_DTYPES:
        raise ParameterError(f"values are read as one of {VALUE_DTYPES}, not {d.name}")
    return d


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
            meta: dict[str, Any] = dict(cast(Mapping[str, Any], self.root.attrs["dpdist"]))
        except (KeyError, FileNotFoundError, ValueError) as e:
            raise ParameterError(f"{self.path} is not a dpdist store ({e})") from None
        if meta.get("format") != FORMAT or meta.get("format_version") not in READABLE_VERSIONS:
            raise ParameterError(
                f"{self.path}: unsupported store format {meta.get('format')!r} version {meta.get('format_version')!r}"
            )
        self.meta = meta
        self.cache = cache
        self._X = _group(self.root, "X")
        self._C = _group(self.root, "X_csc")

    # -------------------------------------------------------------- properties

    @property
    def dataset_id(self) -> str:
        return str(self.meta["dataset_id"])

    @property
    def budget_id(self) -> str:
        """The ledger key its releases are charged to: the source's content hash for a part of a split
        (its records are the source's), else its own."""
        return str(self.meta.get("split_of") or self.dataset_id)

    @property
    def name(self) -> str | None:
        """The store's public name (None for stores written before names existed)."""
        name = self.meta.get("name")
        return None if name is None else str(name)

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.meta["n_rows"]), int(self.meta["n_features"])

    @property
    def nnz(self) -> int:
        return int(self.meta["nnz"])

    @property
    def task(self) -> str:
        return str(self.meta.get("task", "regression"))

    @property
    def block_rows(self) -> int:
        return int(self.meta["block_rows"])

    @property
    def y(self) -> np.ndarray:
        if self.cache:
            return self.cached(("y",), lambda: (read_range(array(self.root, "y"), 0, self.shape[0]),))[0]
        return read_range(array(self.root, "y"), 0, self.shape[0])

    def __repr__(self) -> str:
        n, d = self.shape
        return f"SparseStore({str(self.path)!r}, shape=({n}, {d}), nnz={self.nnz}, task={self.task!r})"

    # ------------------------------------------------------------------ reads

    def row_bounds(self, block_rows: int | None = None) -> list[tuple[int, int]]:
        """[(r0, r1), ...] covering all rows in blocks of ``block_rows`` (default: the store's)."""
        step = int(block_rows or self.block_rows)
        if step < 1:
            raise ParameterError(f"block_rows must be >= 1, got {step}")
        return ranges(self.shape[0], step)

    def column_bounds(self, n_blocks: int) -> list[tuple[int, int]]:
        """[(c0, c1), ...]: the columns in ``n_blocks`` ranges of equal width (the last may be shorter)."""
        d = self.shape[1]
        return ranges(d, max(1, -(-d // max(1, int(n_blocks))))) if d else []

    def cached(self, key: tuple[Any, ...], load: Callable[[], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        """The arrays ``load()`` gives, kept in the process's block cache under this store's path,
        dataset id and ``key`` (a store rewritten at its path is never served the old arrays)."""
        return BLOCK_CACHE.get((str(self.path.resolve()), self.dataset_id, *key), load)

    @staticmethod
    def _read_slice(g: zarr.Group, lo: int, hi: int, dtype: npt.DTypeLike = np.float64) -> tuple[np.ndarray, ...]:
        ptr = read_range(array(g, "indptr"), lo, hi + 1)
        a, b = int(ptr[0]), int(ptr[-1])
        ptr -= a
        return read_range(array(g, "data"), a, b, dtype), read_range(array(g, "indices"), a, b), ptr

    def _slice(self, g: zarr.Group, lo: int, hi: int, dtype: npt.DTypeLike = np.float64) -> tuple[np.ndarray, ...]:
        """(data, indices, indptr) of the compressed rows/columns [lo, hi) of a sparse group, the
        values as ``dtype``."""
        values = value_dtype(dtype)
        if self.cache:
            name = g.basename if values == np.float64 else f"{g.basename}:{values.str}"  # (array, lo, hi) keys
            return self.cached((name, lo, hi), lambda: self._read_slice(g, lo, hi, values))
        return self._read_slice(g, lo, hi, values)

    def read_rows(self, r0: int, r1: int, dtype: npt.DTypeLike = np.float64) -> sp.csr_matrix:
        """Rows [r0, r1) as a CSR matrix with all columns (values as ``dtype``: float64 or float32)."""
        return sp.csr_matrix(self._slice(self._X, r0, r1, dtype), shape=(r1 - r0, self.shape[1]))

    def read_columns(self, c0: int, c1: int, dtype: npt.DTypeLike = np.float64) -> sp.csc_matrix:
        """Columns [c0, c1) as a CSC matrix with all rows (values as ``dtype``: float64 or float32)."""
        return sp.csc_matrix(self._slice(self._C, c0, c1, dtype), shape=(self.shape[0], c1 - c0))

    def column_slice(self, c0: int, c1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, row indices, column pointers from 0) of columns [c0, c1), from the CSC copy."""
        data, rows, ptr = self._slice(self._C, c0, c1)
        return data, rows, ptr

    def column_stream(self, c0: int, c1: int) -> ColumnStream:
        """The entries of columns [c0, c1) of the CSC copy, to be read in pieces
        (``ColumnStream``); its pointers and whether its values are all 1.0 are kept in the
        block cache with ``cache=True``."""

        def load() -> tuple[np.ndarray, np.ndarray]:
            ptr = read_range(array(self._C, "indptr"), c0, c1 + 1)
            return ptr, np.array([all_equal(array(self._C, "data"), int(ptr[0]), int(ptr[-1]), 1.0)])

        ptr, binary = self.cached(("X_csc:stream", c0, c1), load) if self.cache else load()
        return ColumnStream(self._C, ptr, bool(binary[0]))

    def iter_row_blocks(self, block_rows: int | None = None) -> Iterator[tuple[int, sp.csr_matrix, np.ndarray]]:
        """Yield (r0, X block, y block) over the whole store."""
        y = array(self.root, "y")
        for r0, r1 in self.row_bounds(block_rows):
            yield r0, self.read_rows(r0, r1), np.asarray(y[r0:r1])

    def csr(self, dtype: npt.DTypeLike = np.float64) -> sp.csr_matrix:
        """The whole matrix in CSR form (in memory). ``dtype=np.float32`` holds the values in half
        the memory, each rounded to the nearest float32 (a per-entry map: |x| <= 1 stays <= 1)."""
        return self.read_rows(0, self.shape[0], dtype)

    def csc(self, dtype: npt.DTypeLike = np.float64) -> sp.csc_matrix:
        """The whole matrix in CSC form (in memory), read from the stored CSC copy (``dtype``: as
        :meth:`csr`)."""
        return self.read_columns(0, self.shape[1], dtype)

    def to_dask(self, block_rows: int | None = None) -> Any:
        """X as a Dask array of row blocks whose chunks are ``sparse.GCXS`` (CSR) arrays."""
        import sparse

        dask: Any = import_module("dask")  # dask's functions are not annotated
        da: Any = import_module("dask.array")

        n, d = self.shape
        path = str(self.path)
        meta = sparse.GCXS.from_numpy(np.zeros((0, 0)), compressed_axes=(0,))
        blocks = [
            da.from_delayed(dask.delayed(_load_gcxs)(path, r0, r1), shape=(r1 - r0, d), dtype=np.float64, meta=meta)
            for r0, r1 in self.row_bounds(block_rows)
        ]
        return da.concatenate(blocks, axis=0) if blocks else da.zeros((0, d), chunks=(1, d))


def _group(root: zarr.Group, name: str) -> zarr.Group:
    """The sparse group ``name`` of a store (a store whose layout differs is refused)."""
    g = root[name]
    if not isinstance(g, zarr.Group):
        raise ParameterError(f"{root.store}: {name} is not a group")
    return g


def _load_gcxs(path: str, r0: int, r1: int) -> Any:
    import sparse

    return sparse.GCXS(SparseStore(path).read_rows(r0, r1))


def open_store(path: str | os.PathLike[str], cache: bool = False) -> SparseStore:
    """Open a dpdist store for reading (``cache=True``: through the per-process block cache)."""
    return SparseStore(path, cache=cache)
