"""The Dask graphs give the library's results on a real 2-worker LocalCluster."""

from __future__ import annotations

import time

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client, LocalCluster

from dpdist.data.store import open_store, write_store
from dpdist.data.synthetic import make_synthetic
from dpdist.exceptions import ParameterError
from dpdist.pipelines.sis import _coded_target, _piece_xty, _small_codes, correlation_scores, xty_graph
from dpdist.pipelines.two_stage import block_vote_counts
from dpdist.selection.sis import correlation_scores as in_memory_scores
from dpdist.selection.sis import store_scores


def _column_xty(indptr, indices, data, values, codes, clip, out, cuts=(), spans=None):
    """``_piece_xty`` over all the columns, the entries in pieces cut at the positions ``cuts``
    (and at the span ends), each span of columns [j0, j1) of ``spans`` run on its own from
    column j0 and closed at j1, as ``_span_xty`` runs them."""
    spans = spans or [(0, out.shape[0])]
    base = indptr[0]  # positions count from the first entry, as in a range of the store
    for j0, j1 in spans:
        at, sums = np.array([j0, -1]), np.zeros(2)
        lo, hi = indptr[j0] - base, indptr[j1] - base
        ends = [lo, *[c for c in cuts if lo < c < hi], hi]
        for p, q in zip(ends[:-1], ends[1:]):
            if not _piece_xty(indptr, p, indices[p:q], data[p:q], values, codes, clip, out, at, sums, -1):
                return False
        if not _piece_xty(indptr, 0, indices[:0], data[:0], values, codes, clip, out, at, sums, j1):
            return False
    return True


def _reference_xty(indptr, indices, data, y, clip):
    """x_j^T y with the entries of each (i, j) summed first, then clipped to [-1, 1] (``clip``)."""
    X = sp.csc_matrix((data.copy(), indices.copy(), indptr - indptr[0]), shape=(y.shape[0], indptr.shape[0] - 1))
    X.sum_duplicates()
    if clip:
        X.data = np.clip(X.data, -1.0, 1.0)
    return X.T @ y


@pytest.fixture(scope="module")
def client():
    # no work stealing: a pinned task may otherwise move to the idle worker on a loaded machine,
    # and the cache test checks where each block ran
    with (
        dask.config.set({"distributed.scheduler.work-stealing": False}),
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        yield c


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    X, y = make_synthetic("news20", random_state=0, n=2500, d=5000).materialize()
    path = tmp_path_factory.mktemp("s") / "news20"
    write_store(path, X, y, task="binary", block_rows=300)
    return path, X, y


def test_dask_scores_equal_single_process(client, store):
    path, X, y = store
    got = correlation_scores(path)
    np.testing.assert_allclose(got, in_memory_scores(X, y), rtol=1e-12)
    np.testing.assert_allclose(got, store_scores(open_store(path)), rtol=1e-12)
    # one task per column range, concatenated in column order; any number of ranges gives the same scores
    np.testing.assert_array_equal(correlation_scores(path, n_blocks=9), got)
    parts = xty_graph(path, n_blocks=9)
    assert len(parts) == 9 and all(str(p.key).startswith("xty-columns-") for p in parts)
    assert len(xty_graph(path)) == 2  # at least one range per worker


def _later_for_the_first_columns(on: bool) -> None:
    """On a worker: make ``_columns_xty`` finish the first range 1.5 s late, after the others (or
    undo it)."""
    import dpdist.pipelines.sis as sis_mod

    if not on:
        sis_mod._columns_xty = sis_mod.__dict__.pop("_plain_columns_xty", sis_mod._columns_xty)
        return
    plain = sis_mod.__dict__.setdefault("_plain_columns_xty", sis_mod._columns_xty)

    def late(path, c0, *rest):
        out = plain(path, c0, *rest)
        time.sleep(1.5 if c0 == 0 else 0.0)
        return out

    sis_mod._columns_xty = late


def test_dask_scores_are_placed_by_range_whatever_order_the_tasks_end(client, store, monkeypatch):
    import dpdist.pipelines.sis as sis_mod

    path, X, y = store
    want = in_memory_scores(X, y)
    ended = []
    plain = sis_mod.as_completed

    def watched(futures, **kw):
        for future in plain(futures, **kw):
            ended.append(int(str(future.key).rsplit("-", 1)[1]))
            yield future

    monkeypatch.setattr(sis_mod, "as_completed", watched)
    try:
        client.run(_later_for_the_first_columns, True)
        got = correlation_scores(path, n_blocks=6)
    finally:
        client.run(_later_for_the_first_columns, False)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert sorted(ended) == list(range(6)) and ended[0] != 0  # the Client's path, range 0 not first
    ended.clear()
    with dask.config.set(scheduler="sync"):  # no distributed Client active: dask.compute's path
        np.testing.assert_array_equal(correlation_scores(path, n_blocks=6), got)
    assert ended == []


def test_a_cancelled_range_raises_and_the_others_are_cancelled(client, store, monkeypatch):
    from concurrent.futures import CancelledError

    import dpdist.pipelines.sis as sis_mod

    path, _, _ = store
    plain, cancelled = sis_mod.as_completed, []

    def cancelling_the_last(futures, **kw):
        client.cancel(futures[-1:])  # as a lost scheduler or a client.restart would
        return plain(futures, **kw)

    def recorded(futures, *args, **kw):
        cancelled.extend(futures)
        return type(client).cancel(client, futures, *args, **kw)

    monkeypatch.setattr(sis_mod, "as_completed", cancelling_the_last)
    monkeypatch.setattr(client, "cancel", recorded)
    try:
        with pytest.raises(CancelledError):
            correlation_scores(path, n_blocks=6)
    finally:
        _until_workers_idle(client)  # a range already running goes on: not into the next test's cache
    assert len(cancelled) == 1 + 6  # the test's own, then every range's on the error


def _until_workers_idle(client, timeout: float = 120.0) -> None:
    import time

    end = time.monotonic() + timeout
    while any(client.run(lambda dask_worker: len(dask_worker.state.executing)).values()):
        assert time.monotonic() < end, "a cancelled range still runs"
        time.sleep(0.05)


@pytest.mark.parametrize("kind, code_dtype", [("labels", np.uint8), ("grid", np.uint16), ("continuous", None)])
def test_coded_target_gives_the_same_bits(kind, code_dtype):
    rng = np.random.default_rng(3)
    n = 70_000
    y = {
        "labels": rng.choice([-1.0, 1.0], n),
        "grid": rng.integers(-30_000, 30_001, n) / 30_000,  # 60,001 values
        "continuous": rng.uniform(-1, 1, n),
    }[kind]
    values, codes = _coded_target(y)
    if code_dtype is None:
        assert values is y and codes.size == 0
    else:
        assert codes.dtype == code_dtype and np.array_equal(values[codes], y)
    X = sp.random(n, 40, density=0.01, random_state=4, format="csc")
    X.data = rng.uniform(-1, 1, X.nnz)
    got, direct = np.empty(40), np.empty(40)
    assert _column_xty(X.indptr, X.indices, X.data, values, codes, False, got)
    assert _column_xty(X.indptr, X.indices, X.data, y, np.empty(0, np.uint8), False, direct)
    assert got.tobytes() == direct.tobytes()  # the same products summed in the same order
    np.testing.assert_allclose(got, X.T @ y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "task, kind", [("binary", "labels"), ("multiclass", "labels"), ("regression", "grid"), ("regression", "continuous")]
)
@pytest.mark.parametrize("bounds", ["check", "clip"])
def test_the_target_is_coded_before_its_map_and_bound(tmp_path, task, kind, bounds):
    """Coding the stored labels, then mapping and bounding their distinct values, gives the
    bits of mapping and bounding y itself; a violation is refused as on y."""
    from dpdist.data.transforms import check_target_bound, clip_target
    from dpdist.pipelines.sis import _bounded_target
    from dpdist.selection.sis import store_target

    rng = np.random.default_rng(4)
    n = 70_000
    y = {
        "binary": rng.choice([3.0, 7.0], n),
        "multiclass": rng.choice([1.0, 2.0, 5.0, 9.0], n),
        "grid": rng.integers(-40, 41, n) / 30,
        "continuous": rng.uniform(-1.3, 1.3, n),
    }[task if kind == "labels" else kind]
    write_store(tmp_path / "s", sp.csr_matrix((n, 3)), y, task=task)
    store = open_store(tmp_path / "s", cache=True)
    mapped = store_target(store, store.y)
    if bounds == "check" and np.abs(mapped).max() > 1:
        with pytest.raises(ParameterError, match="bound"):
            _bounded_target(store, bounds)
        return
    want = clip_target(mapped, 1.0) if bounds == "clip" else mapped
    check_target_bound(want, 1.0)
    values, codes = _bounded_target(store, bounds)
    got = values[codes] if codes.size else values
    assert got.tobytes() == want.tobytes() and (codes.size > 0) == (kind != "continuous")
    if task == "binary":  # the same content rewritten as multiclass: another map, never the old target
        write_store(tmp_path / "s", sp.csr_matrix((n, 3)), y, task="multiclass", force=True)
        values, codes = _bounded_target(open_store(tmp_path / "s", cache=True), bounds)
        assert np.array_equal(values[codes], (want + 1) / 2)


@pytest.mark.parametrize("distinct", [1, 2, 3, 16, 17, 255, 256, 257, 5000])
def test_small_codes_are_those_of_np_unique(distinct):
    """Up to 256 distinct values are coded without a sort, as np.unique codes them (values
    ascending, codes their positions); beyond, and with a NaN, np.unique itself."""
    rng = np.random.default_rng(distinct)
    pool = rng.permutation(np.linspace(-1, 1, distinct))
    y = pool[rng.integers(0, distinct, 20_000)]
    y[:distinct] = pool  # each value at least once, the first ones in random order
    values, codes = _coded_target(y)
    want, inverse = np.unique(y, return_inverse=True)
    assert values.tobytes() == want.tobytes() and np.array_equal(codes, inverse)
    assert codes.dtype == (np.uint8 if distinct <= 256 else np.uint16)
    small = np.empty(y.shape[0], dtype=np.uint8)
    assert (_small_codes(y, small).shape[0] > 0) == (distinct <= 256)
    y[7] = np.nan
    assert _small_codes(y, small).shape[0] == 0
    values, codes = _coded_target(y)
    assert np.isnan(values[-1]) and np.array_equal(values[codes], y, equal_nan=True)


def test_small_codes_merge_signed_zeros_and_take_no_rows():
    y = np.array([0.0, -0.0, 1.0, -0.0, 1.0])
    values, codes = _coded_target(y)
    assert values.tolist() == [0.0, 1.0] and codes.tolist() == [0, 0, 1, 0, 1]
    for other in (y.astype(np.float32), (y * 3).astype(np.int64)):  # not float64: np.unique's own
        values, codes = _coded_target(other)
        assert values.dtype == other.dtype and np.array_equal(values[codes], other)
    values, codes = _coded_target(np.empty(0))
    assert values.shape == (0,) and codes.shape == (0,)


@pytest.mark.parametrize("target", ["labels", "continuous"])
@pytest.mark.parametrize("clip", [True, False])
def test_a_binary_range_read_without_values_gives_the_same_bits(clip, target):
    """x_ij read as 1 (no values, ``ColumnStream.binary``) gives the bits of reading the stored 1.0s,
    with y coded or not; a duplicated (i, j) entry is summed to 2 before the bound (clipped, or
    refused)."""
    rng = np.random.default_rng(8)
    X = sp.random(5000, 30, density=0.05, random_state=8, format="csc")
    if target == "labels":
        y = rng.choice([-1.0, 1.0], 5000)
        values, codes = _coded_target(y)
    else:  # y read directly (as for more than 65,536 distinct values)
        y = values = rng.uniform(-1, 1, 5000)
        codes = np.empty(0, dtype=np.uint8)
    ones, none = np.empty(30), np.empty(30)
    assert _column_xty(X.indptr, X.indices, np.ones(X.nnz), values, codes, clip, ones)
    assert _column_xty(X.indptr, X.indices, np.empty(0), values, codes, clip, none)
    assert ones.tobytes() == none.tobytes()
    X.data[:] = 1.0
    np.testing.assert_allclose(none, X.T @ y, rtol=1e-12, atol=1e-12)
    indices = np.insert(X.indices, X.indptr[4], X.indices[X.indptr[4]])  # column 4's first row twice
    indptr = X.indptr.copy()
    indptr[5:] += 1
    ok = _column_xty(indptr, indices, np.ones(indices.size), values, codes, clip, ones)
    assert _column_xty(indptr, indices, np.empty(0), values, codes, clip, none) == ok == clip
    if clip:  # the duplicated entry reads as min(1 + 1, 1) = 1, not 2
        assert ones.tobytes() == none.tobytes()
        np.testing.assert_allclose(
            none, _reference_xty(indptr, indices, np.ones(indices.size), y, True), rtol=1e-12, atol=1e-12
        )


@pytest.mark.parametrize("clip", [True, False])
def test_pieces_cut_anywhere_give_the_same_bits(clip):
    """The entries cut into pieces anywhere -- inside a column, between the entries of one (i, j)
    summed before the bound, before empty columns -- and the columns into spans run apart give
    the bits of one piece; the entries of one (i, j) are summed before the bound, whichever
    pieces they lie in (clipped once, or refused)."""
    rng = np.random.default_rng(11)
    X = sp.random(400, 50, density=0.08, random_state=11, format="lil")
    X[:, [0, 7, 8, 49]] = 0.0  # empty columns at both ends and inside
    X = X.tocsc()
    X.data = rng.uniform(-0.6, 0.6, X.nnz)
    reps = rng.integers(1, 4, X.nnz)  # each (i, j) stored 1-3 times, its parts summing to x_ij
    indices = np.repeat(X.indices, reps)
    data = np.repeat(X.data / reps, reps)
    indptr = 1000 + np.r_[0, np.cumsum([reps[a:b].sum() for a, b in zip(X.indptr[:-1], X.indptr[1:])])]
    assert np.all(np.diff(X.indptr)[[0, 7, 8, 49]] == 0)
    y = rng.choice([-1.0, 1.0], 400)
    values, codes = _coded_target(y)
    whole = np.empty(50)
    assert _column_xty(indptr, indices, data, values, codes, clip, whole)
    np.testing.assert_allclose(whole, X.T @ y, rtol=1e-12, atol=1e-12)
    for k in (1, 2, 7, 40, indices.size - 1):
        cuts = np.sort(rng.choice(np.arange(1, indices.size), k, replace=False))
        for spans in (None, [(0, 8), (8, 9), (9, 30), (30, 50)], [(0, 1), (1, 49), (49, 50)]):
            got = np.full(50, np.nan)
            assert _column_xty(indptr, indices, data, values, codes, clip, got, cuts, spans)
            assert got.tobytes() == whole.tobytes()
    runs = np.flatnonzero(indices[1:] == indices[:-1])  # (i, j) stored twice in a row: cut between
    data[runs[0]] = data[runs[0] + 1] = 0.7  # over 1 only once summed (a third part is at most 0.2)
    want = _reference_xty(indptr, indices, data, y, True)
    assert np.all(np.abs(want) < 1e300)
    for cuts in ([], [runs[0] + 1], [runs[0], runs[0] + 1, runs[0] + 2], range(1, indices.size)):
        got = np.full(50, np.nan)
        assert _column_xty(indptr, indices, data, values, codes, clip, got, cuts) == clip
        if clip:  # the (i, j)'s sum clipped to 1 once, not each part
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_binary_and_valued_ranges_share_one_compiled_kernel(tmp_path, monkeypatch):
    """The no-values marker has the pieces' numba type, so a binary range compiles no second
    kernel (whose cache file would record that some store had one)."""
    import numba

    from dpdist.data.store import writer as store_writer
    from dpdist.pipelines.sis import _NO_VALUES

    monkeypatch.setattr(store_writer, "NNZ_CHUNK", 8)
    X = sp.random(50, 6, density=0.5, random_state=1, format="lil")
    X[X.nonzero()] = 1.0
    X[0, 5] = 0.5
    write_store(tmp_path / "s", X, np.ones(50), task="regression")
    stream = open_store(tmp_path / "s", cache=True).column_stream(0, 6)
    pieces = list(stream.pieces(0, int(stream.indptr[-1] - stream.indptr[0])))
    assert not stream.binary and len(pieces) > 2
    assert all(numba.typeof(data) == numba.typeof(_NO_VALUES) for _, _, data in pieces)


def test_a_task_runs_a_span_per_cpu_not_given_a_dask_thread_on_its_host(client):
    import os

    from dpdist.pipelines.placement import host_threads
    from dpdist.pipelines.sis import _spans_per_task

    cpus = len(os.sched_getaffinity(0))
    assert _spans_per_task() == cpus  # outside a worker
    assert client.submit(_spans_per_task, pure=False).result() == cpus  # its worker's 1 Dask thread alone
    shared = host_threads()
    assert list(shared.values()) == [2]  # the fixture's 2 workers of 1 thread, on one host
    assert client.submit(_spans_per_task, shared, pure=False).result() == max(1, cpus // 2)
    assert client.submit(_spans_per_task, {next(iter(shared)): 4 * cpus}, pure=False).result() == 1
    assert client.submit(_spans_per_task, {"elsewhere": 4 * cpus}, pure=False).result() == cpus
    with (
        LocalCluster(n_workers=1, threads_per_worker=2 * cpus, processes=False, dashboard_address=":0") as cluster,
        Client(cluster, set_as_default=False) as other,
    ):
        assert other.submit(_spans_per_task, pure=False).result() == 1


def _record_spans(on: bool) -> list:
    """On a worker: record what each task passes ``_spans_per_task`` (or undo it, returning that)."""
    import dpdist.pipelines.sis as sis_mod

    if on:
        plain = sis_mod.__dict__.setdefault("_plain_spans_per_task", sis_mod._spans_per_task)
        seen = sis_mod.__dict__.setdefault("_seen_host_threads", [])
        sis_mod._spans_per_task = lambda host_threads=None: seen.append(host_threads) or plain(host_threads)
        return []
    sis_mod._spans_per_task = sis_mod.__dict__.pop("_plain_spans_per_task", sis_mod._spans_per_task)
    return sis_mod.__dict__.pop("_seen_host_threads", [])


def test_the_tasks_know_the_dask_threads_of_their_host(client, store):
    from dpdist.pipelines.placement import host_threads

    path, X, y = store
    try:
        client.run(_record_spans, True)
        np.testing.assert_allclose(correlation_scores(path, n_blocks=4), in_memory_scores(X, y), rtol=1e-12)
    finally:
        seen = client.run(_record_spans, False)
    assert sum(len(v) for v in seen.values()) == 4 and all(h == host_threads() for v in seen.values() for h in v)


@pytest.mark.parametrize("bounds", ["check", "clip"])
def test_a_range_in_many_spans_and_chunks_gives_the_scores(tmp_path, monkeypatch, bounds):
    """A task's spans run at once in threads, each through its own chunk buffers (64-entry
    chunks here: every span reads many, and the spans share their boundary chunks), with empty
    columns at the cuts; duplicated (i, j) entries are summed before the bound."""
    import dpdist.pipelines.sis as sis_mod
    from dpdist.data.store import writer as store_writer
    from dpdist.selection.sis import store_target

    monkeypatch.setattr(store_writer, "NNZ_CHUNK", 64)
    rng = np.random.default_rng(5)
    X = sp.random(3000, 300, density=0.04, random_state=5, format="lil")
    X[:, 100:110] = 0.0
    X = X.tocoo()
    rows, cols = np.r_[X.row, X.row[:200]], np.r_[X.col, X.col[:200]]  # 200 entries twice: scipy sums them, up to 1.4
    X = sp.csr_matrix((rng.uniform(-0.7, 0.7, rows.size), (rows, cols)), shape=(3000, 300))
    y = rng.choice([0.0, 1.0], 3000)
    write_store(tmp_path / "s", X, y, task="binary")
    store = open_store(tmp_path / "s")
    yy = store_target(store, store.y)
    Xb = X.copy()
    Xb.data = np.clip(Xb.data, -1, 1)
    for n_spans in (1, 2, 3, 7):
        monkeypatch.setattr(sis_mod, "_spans_per_task", lambda *_, n=n_spans: n)
        if bounds == "check" and np.abs(X.data).max() > 1:
            with pytest.raises(ParameterError, match=r"\|X_ij\| <= 1"):
                sis_mod._columns_xty(str(tmp_path / "s"), 0, 300, bounds)
            continue
        for c0, c1 in [(0, 300), (95, 115), (3, 4)]:
            got = sis_mod._columns_xty(str(tmp_path / "s"), c0, c1, bounds)
            np.testing.assert_allclose(got, (Xb.T @ yy)[c0:c1], rtol=1e-12, atol=1e-12)
    assert bounds == "clip" or np.abs(X.data).max() > 1  # both paths ran


def test_dask_scores_of_a_binary_store_keep_no_values(client, tmp_path):
    X = sp.random(3000, 400, density=0.03, random_state=9, format="csr")
    X.data[:] = 1.0
    y = np.random.default_rng(9).choice([0.0, 1.0], 3000)
    write_store(tmp_path / "bin", X, y, task="binary")
    client.run(lambda: __import__("dpdist.data.store").data.store.BLOCK_CACHE.clear())
    got = correlation_scores(tmp_path / "bin", n_blocks=4)
    np.testing.assert_array_equal(got, np.abs(X.T @ (2 * y - 1)))
    mine = str((tmp_path / "bin").resolve())
    cached = client.run(_cached_bytes_of, mine)
    # the ranges' pointers and binary flags, and on each worker y (8 bytes a row) and its
    # one-byte codes: no entry is held (they are read in pieces into reused buffers)
    assert sum(cached.values()) <= 8 * (400 + 4) + 4 + 2 * (9 * 3000 + 16)


def _cached_bytes_of(store_path: str) -> int:
    """On a worker: the bytes its block cache holds for one store (keys start with its path)."""
    from dpdist.data.store import BLOCK_CACHE

    return sum(sum(a.nbytes for a in v) for k, v in list(BLOCK_CACHE._items.items()) if k[0] == store_path)


def _cache_stats() -> tuple[int, int]:
    from dpdist.data.store import BLOCK_CACHE

    return BLOCK_CACHE.hits, BLOCK_CACHE.misses


def test_column_ranges_reuse_the_worker_cache(client, store):
    path, _, _ = store
    client.run(lambda: __import__("dpdist.data.store").data.store.BLOCK_CACHE.clear())
    first = correlation_scores(path, n_blocks=6)
    after_first = client.run(_cache_stats)
    futures = client.compute(xty_graph(path, n_blocks=6), optimize_graph=False)
    second = np.abs(np.concatenate(client.gather(futures)))
    np.testing.assert_array_equal(first, second)
    # range i is pinned to worker i mod 2 (sorted addresses), and the second pass reads only the entries
    workers = sorted(client.scheduler_info()["workers"])
    assert [next(iter(client.who_has(f)[f.key])) for f in futures] == [workers[i % 2] for i in range(6)]
    after_second = client.run(_cache_stats)
    for w in workers:
        assert after_second[w][1] == after_first[w][1]  # no new misses
        assert after_second[w][0] >= after_first[w][0] + 3  # each of its 3 ranges served from the cache


def test_dask_scores_enforce_bounds(client, tmp_path):
    X = np.full((10, 3), 2.0)
    write_store(tmp_path / "big", X, np.ones(10), task="regression")
    with pytest.raises(Exception, match=r"\|X_ij\| <= 1"):
        correlation_scores(tmp_path / "big", n_blocks=3)
    np.testing.assert_allclose(correlation_scores(tmp_path / "big", bounds="clip"), [10.0, 10.0, 10.0])


def test_dask_votes_equal_sequential_votes(client, store):
    path, X, y = store
    m = 50  # public (e.g. from a released row count)
    counts = block_vote_counts(path, 5, m, alpha=0.01, random_state=7)
    from dpdist.selection.two_stage import block_votes, split_by_label

    expected = np.zeros(X.shape[1])
    for rows in split_by_label(_store_block_labels(path, m, 7), m):
        expected[block_votes(X[rows], y[rows], 5, 0.01)] += 1
    np.testing.assert_array_equal(counts, expected)
    assert counts.sum() <= 5 * m
    np.testing.assert_array_equal(block_vote_counts(path, 5, m, alpha=0.01, random_state=7), counts)
    for bad in (0, -3):
        with pytest.raises(ParameterError, match="n_blocks"):
            block_vote_counts(path, 5, bad)


def test_two_stage_graph_keys_are_random_tokens(client, store, monkeypatch):
    """The graph's keys are a random token and a number (never a hash of a seed or of the data)."""
    import re

    path, X, _ = store
    graphs = []
    compute = dask.compute

    def spy(*args, **kw):
        graphs.extend(dict(a.__dask_graph__()) for a in args)
        return compute(*args, **kw)

    monkeypatch.setattr(dask, "compute", spy)
    block_vote_counts(path, 5, 50, alpha=0.01)
    keys = {str(k) for g in graphs for k in g}
    assert keys and all(re.fullmatch(r"(split|lasso-group)-[0-9a-f]{16}-\d+", k) for k in keys)


def _store_block_labels(path, m, seed):
    """The block of each row of the store as ``block_vote_counts`` draws them for ``seed``."""
    import dpdist.pipelines.two_stage as ts

    bounds = open_store(path).row_bounds()
    seeds = ts._chunk_seeds(len(bounds), seed)
    return np.concatenate([ts._chunk_labels(s, r1 - r0, m) for s, (r0, r1) in zip(seeds, bounds)])


def test_block_labels_are_uniform_and_independent_across_chunks():
    """Each row's block is uniform over the m blocks, whatever its chunk (chi-square against the
    exact uniform law, pooled over 40 chunks of fresh OS-entropy seeds), the chunks' draws are not
    repeated, and a seed gives the same labels again."""
    from scipy.stats import chisquare

    import dpdist.pipelines.two_stage as ts

    m, rows = 7, 5000
    seeds = ts._chunk_seeds(40, None)
    labels = np.array([ts._chunk_labels(s, rows, m) for s in seeds])
    assert labels.dtype == np.int32 and labels.min() >= 0 and labels.max() < m
    assert chisquare(np.bincount(labels.ravel(), minlength=m)).pvalue > 1e-4
    assert chisquare(np.bincount(labels[:, 0], minlength=m)).pvalue > 1e-4  # the first row of every chunk
    assert len({lab.tobytes() for lab in labels}) == 40
    assert np.array_equal(ts._chunk_labels(seeds[3], rows, m), labels[3])
    assert not np.array_equal(ts._chunk_seeds(40, None), seeds)
    assert np.array_equal(ts._chunk_seeds(4, 7), ts._chunk_seeds(4, 7))


@pytest.mark.parametrize("m", [1, 3, 50, 3000])
def test_each_block_of_a_group_is_its_rows_of_the_store_exactly(store, monkeypatch, m):
    """The grouped graph (a task per group of blocks) hands each block's LASSO exactly X[rows of
    the block] in ascending order and its targets: every block once, empty ones included (m = 3000
    > n), whether m is below, at or above the number of groups."""
    import dpdist.pipelines.two_stage as ts
    from dpdist.selection.sis import store_target

    path, X, _ = store
    st = open_store(path)
    seen = []
    monkeypatch.setattr(ts, "block_votes", lambda Xb, yb, k, alpha: seen.append((Xb, yb)) or np.zeros(0, dtype=int))
    bounds = st.row_bounds()
    seeds = ts._chunk_seeds(len(bounds), 7)
    labels = _store_block_labels(path, m, 7)
    groups = min(m, 8)
    chunks = [ts._split_chunk(str(path), r0, r1, s, m, groups) for s, (r0, r1) in zip(seeds, bounds)]
    order = []
    for g in range(groups):
        before = len(seen)
        assert len(ts._fit_group(g, groups, m, 5, 0.01, *chunks)) == len(seen) - before  # a vote per block
        order += list(range(g, m, groups))
    assert sorted(order) == list(range(m)) and len(seen) == m
    y = store_target(st, st.y[:])
    for b, (Xb, yb) in zip(order, seen):
        rows = np.flatnonzero(labels == b)
        want = X[rows]
        assert Xb.shape == want.shape and np.array_equal(Xb.indptr, want.indptr)
        assert np.array_equal(Xb.indices, want.indices) and np.array_equal(Xb.data, want.data)
        assert np.array_equal(yb, y[rows])
    assert any(Xb.shape[0] == 0 for Xb, _ in seen) == (m == 3000)
