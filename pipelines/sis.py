"""DP-SIS scores |X^T y| as a Dask graph over the store's CSC copy.

Per-feature work reads the column-compressed copy: the features are cut into ranges of
equal width (about ``COLUMN_BLOCK_NNZ`` non-zeros each), one task per range computes
x_j^T y for its columns by a gather from y (a numba loop over the range's entries), and the
client copies each range into place as its task ends. Nothing is summed across tasks and each
task returns only its own slice of the scores, so the data moved is one float per feature,
against one dense D-vector per worker (160 MB at D = 2e7) for a row-block reduction.

Each task reads its range's entries in pieces, one stored chunk at a time decompressed into
a buffer its thread reuses (``SparseStore.column_stream``), and reduces them as they come:
with our stores' codecs no range is ever held in memory whole. The range is cut into spans of
columns, as many as its host's CPUs divided by the Dask threads of all the workers there
(``_spans_per_task``), each read and reduced by a thread (numba releases the GIL). A
range of binary features is read as its row indices alone (x_ij = 1, the same products).
Only the range's column pointers, its binary flag, y and its codes are kept in the
per-worker block cache (``open_store(path, cache=True)``), and each range is pinned to one
worker (round robin over the workers in address order, other workers allowed if it dies).
Holding the decompressed ranges instead, for later passes, cost more than it saved: on this
kind of VM the first touch of fresh memory is dearer than the decompression (see
``ColumnStream``); benchmarks/sis_scale.py and full_size.py measured the two on the full KDDA shape
(their dated results under ``benchmarks/results/scale/``).

y is read through one-byte codes into its distinct values when it has few (labels), so the
random reads of y stay in the cache (``_coded_target``); the products and sums are the same.

The bounds are those of ``enforce_bounds``: the target is checked or clipped once per
worker; each matrix entry (duplicates summed first, as ``enforce_bounds`` does) is checked
or clipped to [-1, 1] in the loop, and a violation raises ``enforce_bounds``' own error.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import dask
import numba
import numpy as np
from dask.base import get_scheduler
from dask.delayed import Delayed
from distributed import Client, as_completed

from dpdist.data.store import ColumnStream, SparseStore, open_store
from dpdist.data.transforms import bound_violation, check_target_bound, clip_target
from dpdist.pipelines.placement import host_threads, pinned, worker_info
from dpdist.selection.sis import store_target

# Non-zeros per task on average (ranges are of equal width). A task holds only its column pointers
# and scores (8 bytes a column each), so fewer, larger tasks cost no memory and pay less per task
# and per transfer: on the full KDDA shape (308M non-zeros; 2^26 makes 5 ranges, 6 on 2 workers)
# a few ranges per worker were faster than tens (benchmarks/sis_scale.py, full_size.py).
COLUMN_BLOCK_NNZ = 1 << 26
_NO_VALUES = np.empty(0)  # every x_ij of the range is 1 (``ColumnStream.binary``)
_NO_ROWS = np.empty(0, dtype=np.int32)  # the empty piece of a span's closing call
_N_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
_KERNEL_POOL = ThreadPoolExecutor(max_workers=_N_THREADS, thread_name_prefix="sis-xty")


@numba.njit(nogil=True, cache=True)
def _add_entry(s: float, v: float, yi: float, clip: bool) -> tuple[bool, float]:
    """(True, s + v y_i) with v clipped to [-1, 1] (``clip``) or checked; (False, s) on a violation."""
    if clip:
        v = min(1.0, max(-1.0, v))
    elif not abs(v) <= 1.0:
        return False, s
    return True, s + v * yi


@numba.njit(nogil=True, cache=True)
def _piece_xty(
    indptr: np.ndarray,
    p: int,
    rows: np.ndarray,
    data: np.ndarray,
    values: np.ndarray,
    codes: np.ndarray,
    clip: bool,
    out: np.ndarray,
    at: np.ndarray,
    sums: np.ndarray,
    close_to: int,
) -> bool:
    """Adds the entries at positions p, p+1, ... of a column range (``rows[e]``, ``data[e]``; x_ij
    = 1.0 when ``data`` is empty: a binary range) to out[j] = sum_i x_ij y_i, where column j
    holds the positions [indptr[j], indptr[j+1]) - indptr[0], rows ascending. The pieces of a
    span of columns come in position order and carry their state in ``at`` = (current column,
    pending row or -1) and ``sums`` = (the current column's sum, the pending row's value): the
    entries of one (i, j), which may lie in two pieces, are summed first, then clipped to
    [-1, 1] (``clip``) or checked (``_add_entry``). With ``close_to`` >= 0 the columns up to it
    are finished after the piece (the span's last call). False on a bound violation. y_i is
    ``values[codes[i]]``, or ``values[i]`` when ``codes`` is empty (see ``_coded_target``)."""
    coded = codes.shape[0] > 0
    unit = data.shape[0] == 0
    base = indptr[0]
    j, pending = at[0], at[1]
    s, v = sums[0], sums[1]
    ok = True
    for e in range(rows.shape[0]):
        # the entry is past column j: finish it (as the closing loop below does; written out twice:
        # a shared helper, even inlined, made this loop slower on a KDDA range)
        while indptr[j + 1] - base <= p + e:
            if pending >= 0:
                ok, s = _add_entry(s, v, values[codes[pending]] if coded else values[pending], clip)
                pending = -1
            out[j] = s
            s = 0.0
            j += 1
        i = rows[e]
        x = 1.0 if unit else data[e]
        if i == pending:
            v += x
            continue
        if pending >= 0:
            ok, s = _add_entry(s, v, values[codes[pending]] if coded else values[pending], clip)
        if not ok:
            return False
        pending, v = i, x
    while j < close_to:
        if pending >= 0:
            ok, s = _add_entry(s, v, values[codes[pending]] if coded else values[pending], clip)
            pending = -1
        out[j] = s
        s = 0.0
        j += 1
    at[0], at[1] = j, pending
    sums[0], sums[1] = s, v
    return ok


@numba.njit(nogil=True, cache=True)
def _position(values: np.ndarray, k: int, v: float) -> int:
    """np.searchsorted(values[:k], v) (the first position whose value is not below v): by counting
    the values below v when k <= 16 (two comparisons for labels, no branch to mispredict), else
    by binary search."""
    if k <= 16:
        at = 0
        for m in range(k):
            at += values[m] < v
        return at
    return int(np.searchsorted(values[:k], v))


@numba.njit(nogil=True, cache=True)
def _small_codes(y: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The distinct values of float64 y ascending (``np.unique``'s, up to which of 0.0 and -0.0
    stands for both), codes[i] the index of y[i] among them, when y has between 1 and 256
    distinct values and no NaN; else an empty array (codes then unspecified). Two passes of a
    search (``_position``) in the at most 256 values: no sort of y."""
    values = np.empty(256)
    k = 0
    for i in range(y.shape[0]):
        v = y[i]
        if v != v:
            return values[:0]
        at = _position(values, k, v)
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
        codes[i] = _position(values, k, y[i])
    return values


def _coded_target(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, codes) with ``values[codes] == y``, codes of one or two bytes when y takes at most
    256 or 65,536 distinct values (labels do), else (y, no codes). The products are y's own (a
    -0.0 may read as 0.0, which changes no sum that starts at 0.0).

    The gather reads y at a random row for every entry of a column; y as float64 (67 MB at
    KDDA's 8.4M rows) does not stay in the cache, its one-byte codes (8.4 MB) do: the
    reduction over KDDA's columns runs faster, with the same products and sums. Up to 256
    values are coded without sorting y (``_small_codes``: one pass and the codes' memory, where
    ``np.unique``'s sort allocates and touches many times y's size, which a new worker pays in full).
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
    with the blocks.

    The stored labels are coded first and the public map into [-1, 1] (``store_target``) and the
    bound are applied to their distinct values alone: each is a function of one record's label,
    so values[codes] is the mapped, bounded y (up to which of 0.0 and -0.0 stands for both, as
    in ``_coded_target``: no sum changes), and every distinct value occurs in y, so checking
    them checks y. With at most 256 distinct labels no y-sized temporary is made (on a Dask
    worker each would be fresh memory, slow to touch the first time)."""

    def bounded(y: np.ndarray) -> np.ndarray:
        y = store_target(store, y)
        if bounds == "clip":
            return clip_target(y, 1.0)
        check_target_bound(y, 1.0)
        return np.array(y, dtype=np.float64)  # a copy: never the cached y under a second key

    def load() -> tuple[np.ndarray, np.ndarray]:
        values, codes = _coded_target(store.y)
        return bounded(values), codes

    # the map follows the task and the label mapping, which the dataset id does not hash: a store
    # rewritten at the same path with other ones is never served the old target
    rule = json.dumps([store.task, store.meta.get("label_mapping")], sort_keys=True)
    values, codes = store.cached(("target", bounds, rule), load)
    return values, codes


def _span_xty(
    stream: ColumnStream, j0: int, j1: int, values: np.ndarray, codes: np.ndarray, clip: bool, out: np.ndarray
) -> bool:
    """out[j0:j1] of ``_columns_xty``, its entries read piece by piece (in this thread's buffers)."""
    at, sums = np.array([j0, -1]), np.zeros(2)
    base = stream.indptr[0]
    for p, rows, data in stream.pieces(int(stream.indptr[j0] - base), int(stream.indptr[j1] - base)):
        if not _piece_xty(
            stream.indptr, p, rows, _NO_VALUES if data is None else data, values, codes, clip, out, at, sums, -1
        ):
            return False
    return _piece_xty(stream.indptr, 0, _NO_ROWS, _NO_VALUES, values, codes, clip, out, at, sums, j1)


def _spans_per_task(host_threads: dict[str, int] | None = None) -> int:
    """The CPUs of this process divided by the Dask threads that share them: all the threads of
    the workers on this worker's host (``host_threads``, from the scheduler when the graph was
    built, keyed by the host of each worker's address), else this worker's own; outside a
    worker's task, all the CPUs. A host whose Dask threads already fill its CPUs runs one span a
    task. Sized by the worker alone, 2 workers of one thread on this 2-CPU machine ran four
    threads on two cores, and a node of 4 workers of 8 threads on 32 CPUs would run 128 (on this
    2-CPU machine the two rules measure the same within the noise: benchmarks/sis_scale.py). Workers
    of one cluster that share a host but not its
    CPUs (two SLURM jobs' cpusets on one node) are counted together, so leave CPUs idle there."""
    from distributed import get_worker
    from distributed.comm import get_address_host

    try:
        worker = get_worker()
    except ValueError:  # not in a worker's task
        return _N_THREADS
    nthreads = (host_threads or {}).get(get_address_host(worker.address), worker.state.nthreads)
    return max(1, _N_THREADS // max(1, nthreads))


def _columns_xty(path: str, c0: int, c1: int, bounds: str, host_threads: dict[str, int] | None = None) -> np.ndarray:
    """On a worker: x_j^T y for the columns [c0, c1), the bounds enforced. The range is cut into
    spans of columns of about equal non-zeros (``_spans_per_task(host_threads)``), each read and
    reduced in a thread of its own."""
    store = open_store(path, cache=True)
    values, codes = _bounded_target(store, bounds)
    stream = store.column_stream(c0, c1)
    out = np.empty(c1 - c0)
    n_spans = _spans_per_task(host_threads)
    cuts = np.searchsorted(stream.indptr, np.linspace(stream.indptr[0], stream.indptr[-1], n_spans + 1)[1:-1])
    spans = np.unique(np.concatenate(([0], cuts, [c1 - c0])))
    done = [
        _KERNEL_POOL.submit(_span_xty, stream, int(j0), int(j1), values, codes, bounds == "clip", out)
        for j0, j1 in zip(spans[:-1], spans[1:])
    ]
    if not all([f.result() for f in done]):  # enforce_bounds' own error; never an unfilled score
        raise bound_violation(f"store {path}", "|X_ij|", 1.0)
    return out


def _range_tasks(path: str, bounds: str, n_blocks: int | None) -> tuple[list[tuple[int, int]], list[Delayed]]:
    """The column ranges and their delayed x_j^T y (``xty_graph``), in column order."""
    store = open_store(path)
    info = worker_info()
    addresses, threads = sorted(info), host_threads(info)  # the cluster's shape, not the data's
    per_worker = max(1, len(addresses))
    n_blocks = n_blocks or per_worker * -(-max(1, -(-store.nnz // COLUMN_BLOCK_NNZ)) // per_worker)
    ranges = store.column_bounds(n_blocks)
    tok = os.urandom(8).hex()  # distinct keys per graph; never a hash of the content-derived dataset id
    parts = []
    for i, (c0, c1) in enumerate(ranges):
        with pinned(i, addresses):
            parts.append(
                dask.delayed(_columns_xty, pure=True)(
                    path, c0, c1, bounds, threads, dask_key_name=f"xty-columns-{tok}-{i}"
                )
            )
    return ranges, parts


def xty_graph(path: str | os.PathLike[str], bounds: str = "check", n_blocks: int | None = None) -> list[Delayed]:
    """Delayed signed x_j^T y, one task per column range (in column order; concatenate them).

    ``n_blocks`` defaults to the first multiple of the number of workers at or above
    nnz / COLUMN_BLOCK_NNZ, so each worker gets as many ranges when there are enough columns (the
    number of ranges near it changes the time within the spread of identical runs: the rule stands
    on the balance alone).
    """
    return _range_tasks(str(path), bounds, n_blocks)[1]


def correlation_scores(path: str | os.PathLike[str], bounds: str = "check", n_blocks: int | None = None) -> np.ndarray:
    """|X^T y| computed on the active Dask scheduler (a distributed Client if one is set).

    On a distributed Client each range's scores are copied into place as soon as its task ends,
    while the other tasks run, rather than all gathered after the last one (the transfer and
    assembly of the scores then overlap the other tasks; benchmarks/sis_scale.py measures the pass).
    The scores are the same bits either way."""
    ranges, parts = _range_tasks(str(path), bounds, n_blocks)
    scores = np.empty(open_store(path).shape[1])
    client = getattr(get_scheduler(), "__self__", None)
    if not isinstance(client, Client):
        for (c0, c1), part in zip(ranges, dask.compute(*parts, optimize_graph=False), strict=True):
            np.abs(part, out=scores[c0:c1])  # assembled in place: no D-sized temporaries
        return scores
    futures = client.compute(parts, optimize_graph=False)
    where = {future.key: r for future, r in zip(futures, ranges, strict=True)}
    try:
        for future in as_completed(futures, loop=client.loop):
            c0, c1 = where[future.key]
            np.abs(future.result(), out=scores[c0:c1])  # raises a task's error, or its cancellation
    except BaseException:
        try:
            client.cancel(futures)  # no range not yet started runs (one running goes on to its end)
        except Exception:  # e.g. the scheduler is gone: the first error is the one to see
            pass
        raise
    return scores
