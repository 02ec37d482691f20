"""The train/test split of a store into two stores, streamed block by block.

Each record's side depends only on the record itself and a secret key: the record goes to the
test side when its keyed hash, BLAKE2b(key; its column indices, values and label), read as a
number in [0, 1), is below ``test_fraction``. The key is random and kept in the ledger with
the dataset's budget (``Accountant.split_key``), so the same data always splits the same way.

Why: under ADD/REMOVE neighbours, D' = D plus one record anywhere (top, middle or bottom).
Every record of D keeps its side in D', and the new record falls on one side, so the two
halves of D' are the halves of D, one of them with one record more: a release computed on
either half of neighbours is computed on neighbours, whatever the key. A split by row
*position* (one Bernoulli draw per row number from a seed) has no such property: inserting a
record at row 0 shifts every later record onto another row's draw, and the halves of
neighbouring data sets differ in about half their records.

Both halves stay rows of the *source* dataset: releases computed on either are charged to
the source's budget (see ``flows``). A half may be empty; nothing here depends on the data
beyond each record's own side.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import numpy as np
import scipy.sparse as sp

from dpdist.data.store import feature_schema, open_store, write_blocks
from dpdist.data.store.writer import move_into_place
from dpdist.exceptions import ParameterError

__all__ = ["derive_key", "key_id", "record_sides", "split_store"]

_KEY_BYTES = 32
_QUEUED = 2  # row-block parts waiting for a half's writer
_END = object()
_ABORT = object()


def _check(test_fraction: float, key: bytes) -> None:
    if not 0.0 < float(test_fraction) < 1.0:
        raise ParameterError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    if not isinstance(key, bytes) or len(key) != _KEY_BYTES:
        raise ParameterError(f"the split key must be {_KEY_BYTES} random bytes")


def derive_key(key: bytes, purpose: str) -> bytes:
    """Another secret key for another split of the same records (a fixed derivation: no data enters it)."""
    return hashlib.blake2b(purpose.encode(), key=key, digest_size=_KEY_BYTES, person=b"dpdist-derive").digest()


def key_id(key: bytes) -> str:
    """Which key a split was made with, without the key: BLAKE2b keyed by it over a constant (a
    PRF's value: nothing of the key can be learnt from it). The halves record it, so halves made
    with another key (a ledger or budget created anew) are never taken for this key's."""
    return hashlib.blake2b(b"split key id", key=key, digest_size=16, person=b"dpdist-keyid").hexdigest()


def _byte_offsets(indptr: np.ndarray) -> list[int]:
    """The rows' byte offsets into 8-byte entries, as Python ints (int32 ``indptr`` times 8 passes 2^31 at
    2^28 non-zeros: it wrapped, and a record would have been hashed over another's bytes)."""
    offsets: list[int] = (8 * np.asarray(indptr, dtype=np.int64)).tolist()
    return offsets


def record_sides(X: sp.csr_matrix, y: np.ndarray, key: bytes, test_fraction: float) -> np.ndarray:
    """Boolean mask of the records that go to the test side (each decided by itself and ``key``): its
    BLAKE2b digest (keyed, 8 bytes) of its column indices (int64), values (float64) and label (float64),
    little-endian, read as an unsigned integer below ``test_fraction * 2^64``."""
    _check(test_fraction, key)
    X = sp.csr_matrix(X)
    indices = np.ascontiguousarray(X.indices, dtype="<i8").data.cast("B")
    values = np.ascontiguousarray(X.data, dtype="<f8").data.cast("B")
    labels = np.ascontiguousarray(y, dtype="<f8").data.cast("B")
    ptr = _byte_offsets(X.indptr)
    keyed = hashlib.blake2b(key=key, digest_size=8, person=b"dpdist-split")  # each record's hash starts from a copy
    digests = []
    for i in range(X.shape[0]):
        h = keyed.copy()
        h.update(indices[ptr[i] : ptr[i + 1]])
        h.update(values[ptr[i] : ptr[i + 1]])
        h.update(labels[8 * i : 8 * i + 8])
        digests.append(h.digest())
    return np.frombuffer(b"".join(digests), dtype="<u8") < np.uint64(int(float(test_fraction) * 2.0**64))


def split_store(
    src: str | os.PathLike[str],
    train_out: str | os.PathLike[str],
    test_out: str | os.PathLike[str],
    test_fraction: float,
    key: bytes,
    force: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write the records of ``src`` to ``train_out`` and ``test_out`` by :func:`record_sides`.

    One pass over the source: each row block's sides are computed once and its two parts handed to the
    halves' writers, each in a thread of its own (``write_blocks``, fed through a queue of at most
    ``_QUEUED`` parts: memory is a few row blocks, and at the end the two writers' column copies, built at
    once: up to ``DEFAULT_MEMORY`` each). Each half is written beside its place and both are moved in only
    when both are whole: a split that fails leaves neither (an existing one is replaced only with
    ``force``, and only then). The halves keep the source's task and label mapping
    (a half need not hold every class), and record ``split_of``: the content hash whose budget the
    source is charged to (the source's own, or its source's when it is itself a part of a split) and
    ``split_source`` (the source's own content hash): store internals, never published.
    """
    _check(test_fraction, key)
    store = open_store(src)
    outs = [Path(train_out), Path(test_out)]
    for out in outs:
        if out.exists() and not force:
            raise ParameterError(f"store {out} already exists; pass --force (force=True) to overwrite it")
    # each half is written beside its place and both are moved in only when both are whole
    tmps = [out.parent / f".{out.name}.split-{uuid.uuid4().hex[:12]}" for out in outs]
    try:
        metas = _write_halves(store, tmps, test_fraction, key)
        for tmp, out in zip(tmps, outs, strict=True):
            move_into_place(tmp, out, force)
    finally:
        for tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)
    return metas[0], metas[1]


def _write_halves(store: Any, outs: list[Path], test_fraction: float, key: bytes) -> list[dict[str, Any]]:
    """The halves of ``store`` written to ``outs`` (train, test) in one pass, a writer thread each."""
    queues: tuple[queue.Queue[Any], queue.Queue[Any]] = (queue.Queue(_QUEUED), queue.Queue(_QUEUED))
    with ThreadPoolExecutor(2, thread_name_prefix="split-write") as pool:
        writers = [
            pool.submit(_write_half, store, out, _queued(q), want, test_fraction, key)
            for out, want, q in zip(outs, (False, True), queues, strict=True)
        ]
        try:
            for _, X, y in store.iter_row_blocks():
                y = np.asarray(y)
                test = record_sides(X, y, key, test_fraction)
                for q, writer, keep in zip(queues, writers, (~test, test), strict=True):
                    if keep.any():
                        _put(q, writer, (X[keep], y[keep]))
            for q, writer in zip(queues, writers, strict=True):
                _put(q, writer, _END)
        except BaseException:
            for q, writer in zip(queues, writers, strict=True):
                _put(q, writer, _ABORT)  # the half's writer stops, and removes what it had written
            raise
        return [w.result() for w in writers]


class _Stopped(Exception):
    """The split stopped (an error of the reading side, raised there): a half's writer gives up."""


def _queued(q: queue.Queue[Any]) -> Iterator[tuple[sp.csr_matrix, np.ndarray]]:
    """The parts put in ``q`` until the end (``_ABORT``: stop)."""
    while (item := q.get()) is not _END:
        if item is _ABORT:
            raise _Stopped("the split stopped")
        yield item


def _put(q: queue.Queue[Any], writer: Future[dict[str, Any]], item: Any) -> None:
    """Put ``item`` in ``q`` unless its writer has ended (then its error is raised, if it raised one)."""
    while not writer.done():
        try:
            q.put(item, timeout=0.5)
            return
        except queue.Full:
            continue
    if item is _ABORT:
        return
    writer.result()


def _write_half(
    store: Any,
    out: str | os.PathLike[str],
    blocks: Iterator[tuple[sp.csr_matrix, np.ndarray]],
    want: bool,
    test_fraction: float,
    key: bytes,
) -> dict[str, Any]:
    """One half of the split of ``store`` from its ``blocks`` (the test half when ``want``)."""
    meta = {
        "split_of": store.budget_id,
        "split_source": store.dataset_id,
        "split": "test" if want else "train",
        "test_fraction": test_fraction,
        "split_key_id": key_id(key),
        "name": store.meta.get("name"),
        "schema": store.meta.get("schema", "inferred"),
        "feature_schema": feature_schema(store.meta),
        "source_meta": {
            k: store.meta.get(k)
            for k in (
                "source",
                "synthetic",
                "true_support",
                "zero_based",
                "feature_names",
                "table_notes",
                "table_schema",
            )
        },
    }
    return write_blocks(
        out,
        blocks,
        store.shape[1],
        task=store.task,
        metadata=meta,
        block_rows=store.block_rows,
        label_mapping=cast("dict[str, int] | None", store.meta.get("label_mapping")),
    )
