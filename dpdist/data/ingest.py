"""svmlight / LIBSVM file -> dpdist store (``dpdist ingest``).

Streaming with bounded memory: blocks of text are read (and decompressed) by one thread,
parsed in parallel by others and appended to the store in file order while the next blocks
are parsed (``dpdist.data.svmlight``); the CSC copy is built out of core, from buckets
filled during the same pass (``dpdist.data.store``).

The columns are declared: indices are one-based (``zero_based="no"``, the LIBSVM convention)
or zero-based (``"yes"``), and ``n_features`` is the public dimension; an index outside them is
refused, naming the file and line. ``zero_based="auto"`` (scikit-learn's: one-based unless a
column index 0 appears; the indices are stored as one-based and rewritten once if a 0 turns
up) or no ``n_features`` (the largest index seen) infer the columns from the data, and the
store is marked so (``feature_schema``: "inferred"): one record with an index 0 would shift
every other record's columns, one with a larger index would change the dimension every release
states. Such a store is refused for private use (``check_schema``).

Labels are stored exactly as read. The task is recorded: ``binary`` when the file has
exactly two distinct labels (``auto``), ``regression`` otherwise, or as forced with
``task=``; for ``binary`` and ``multiclass`` the label mapping (label -> class code, in
ascending label order) is recorded too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpdist.data.store import DEFAULT_BLOCK_ROWS, DEFAULT_MEMORY, StoreWriter, check_task, label_mapping, schema
from dpdist.data.svmlight import DEFAULT_BLOCK_BYTES, SvmlightBlock, find_line, iter_svmlight_blocks
from dpdist.exceptions import ParameterError

__all__ = ["ZERO_BASED", "ingest_svmlight"]

ZERO_BASED = ("auto", "yes", "no")


def ingest_svmlight(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    force: bool = False,
    zero_based: str = "no",
    n_features: int | None = None,
    task: str = "auto",
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    memory_bytes: int = DEFAULT_MEMORY,
    progress: Callable[[int, int], None] | None = None,
    name: str | None = None,
    metadata: dict[str, Any] | None = None,
    labels: list[float] | None = None,
) -> dict[str, Any]:
    """Ingest an svmlight file into a new store at ``out``; returns the store's metadata.

    ``progress(rows_so_far, text_bytes_so_far)`` is called after every block.
    Nothing is left at ``out`` (and an existing store is untouched) if anything fails.
    """
    src = Path(src)
    if zero_based not in ZERO_BASED:
        raise ParameterError(f"zero_based must be one of {ZERO_BASED}, got {zero_based!r}")
    check_task(task)
    if n_features is not None and n_features < 1:
        raise ParameterError(f"n_features must be >= 1, got {n_features}")
    offsets = {"auto": (1, 0), "yes": (0,), "no": (1,)}[zero_based]
    writer = StoreWriter(out, force=force, memory_bytes=memory_bytes, index_offsets=offsets, n_features=n_features)
    text_bytes = 0
    try:
        for block in iter_svmlight_blocks(src, block_bytes=block_bytes):
            writer.append(block.indptr, block.indices, block.data, block.y)
            _check_indices(src, block, writer, n_features)
            text_bytes += block.text_bytes
            if progress is not None:
                progress(writer.n_rows, text_bytes)
        if writer.n_rows == 0:
            raise ParameterError(f"{src}: no data rows")
        if zero_based == "auto":
            offset = 0 if writer.min_index == 0 else 1
        else:
            offset = 0 if zero_based == "yes" else 1
        resolved_task, mapping = label_mapping(writer.distinct_labels, task, str(src), labels)
    except BaseException:
        writer.abort()
        raise
    metadata = {
        "task": resolved_task,
        "label_mapping": mapping,
        "schema": schema(task, labels),
        "source": str(src.resolve()),
        "source_text_bytes": text_bytes,
        "zero_based": offset == 0,
        "feature_schema": "declared" if zero_based != "auto" and n_features is not None else "inferred",
        "name": name,
        **(metadata or {}),
    }
    return writer.finish(index_offset=offset, n_features=n_features, block_rows=block_rows, metadata=metadata)


def _check_indices(src: Path, block: SvmlightBlock, writer: StoreWriter, n_features: int | None) -> None:
    """After ``block`` was appended: refuse a column index below the base (0 in a one-based file) or
    beyond ``n_features`` (declared), naming the file and the first such line, not the index. The
    writer's running minimum and maximum (computed by its append) say whether this block holds
    one; only then is the file read again to find the line (``auto``: offsets (1, 0), the final
    check is the writer's)."""
    offsets = writer.index_offsets
    lowest = min(offsets)
    top = None if n_features is None else n_features + max(offsets)  # raw indices run below top
    if writer.min_index is not None and writer.min_index < lowest:
        line = find_line(src, block.first_line, lambda i: i < lowest)
        raise ParameterError(
            f"{src}:{line}: a column index below {lowest} in a file read as {lowest}-based "
            f"(zero_based={'no' if lowest else 'yes'}); pass zero_based='yes' "
            "(--zero-based yes, data.zero_based = true) if the file is zero-based"
        )
    if top is not None and writer.max_index >= top:
        line = find_line(src, block.first_line, lambda i: i >= top)
        raise ParameterError(
            f"{src}:{line}: a column index beyond the declared n_features={n_features} ({lowest}-based)"
        )
