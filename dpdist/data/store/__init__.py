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
  decodes and encodes faster than zstd per core at a similar size (benchmarks/store_codecs.py
  measures both, its dated results under benchmarks/results/scale/).

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

Modules: :mod:`.format` (names, versions, codecs), :mod:`.schema` (what labels and columns mean),
:mod:`.buckets` and :mod:`.writer` (writing), :mod:`.chunks`, :mod:`.cache` and :mod:`.reader` (reading).
"""

from dpdist.data.store.cache import BLOCK_CACHE
from dpdist.data.store.chunks import ColumnStream
from dpdist.data.store.format import TASKS
from dpdist.data.store.reader import VALUE_DTYPES, SparseStore, open_store
from dpdist.data.store.schema import (
    check_schema,
    check_task,
    column_ids,
    columns_named,
    feature_schema,
    label_mapping,
    schema,
)
from dpdist.data.store.writer import DEFAULT_BLOCK_ROWS, DEFAULT_MEMORY, StoreWriter, write_blocks, write_store

__all__ = [
    "BLOCK_CACHE",
    "TASKS",
    "VALUE_DTYPES",
    "ColumnStream",
    "SparseStore",
    "StoreWriter",
    "check_schema",
    "check_task",
    "column_ids",
    "columns_named",
    "DEFAULT_BLOCK_ROWS",
    "DEFAULT_MEMORY",
    "feature_schema",
    "label_mapping",
    "open_store",
    "schema",
    "write_blocks",
    "write_store",
]
