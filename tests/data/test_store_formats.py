"""Store formats: version-1 stores still read, the same content keeps its dataset id, the
version-2 writer's CSC buckets, chunked appends, index offsets and the block cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from dpdist.data import open_store, write_store
from dpdist.data.ingest import ingest_svmlight
from dpdist.data.store import BLOCK_CACHE, StoreWriter, buckets, chunks, write_blocks, writer
from dpdist.data.store import cache as store_cache
from dpdist.exceptions import ParameterError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "v1"  # the one fixture tree: tests/fixtures


def fixture_matrix() -> tuple[sp.csr_matrix, np.ndarray]:
    z = np.load(FIXTURES / "store-v1-matrix.npz")
    return sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"])), z["y"]


def test_v1_stores_open_and_read():
    X, y = fixture_matrix()
    s = open_store(FIXTURES / "store-v1-matrix")
    assert s.meta["format_version"] == 1 and s.shape == X.shape and s.nnz == X.nnz
    assert (s.csr() != X).nnz == 0 and (s.csc() != X.tocsc()).nnz == 0 and np.array_equal(s.y, y)
    assert (s.read_rows(5, 30) != X[5:30]).nnz == 0 and (s.read_columns(3, 21) != X[:, 3:21]).nnz == 0
    data, rows, ptr = s.column_slice(3, 21)
    assert (sp.csc_matrix((data, rows, ptr), shape=(X.shape[0], 18)) != X[:, 3:21]).nnz == 0
    cached = open_store(FIXTURES / "store-v1-matrix", cache=True)
    assert (cached.read_rows(0, 40) != X).nnz == 0
    t = open_store(FIXTURES / "store-v1-svmlight")
    assert t.shape == (5, 5) and t.task == "binary" and t.csr()[4, 4] == 1.0


def test_same_content_keeps_its_v1_dataset_id(tmp_path):
    # ledgers are keyed by the id: today's writer must give the ids version-1 code gave
    X, y = fixture_matrix()
    meta = write_store(tmp_path / "m", X, y, task="regression", block_rows=7)
    assert meta["format_version"] == 2
    assert meta["dataset_id"] == open_store(FIXTURES / "store-v1-matrix").dataset_id
    meta = ingest_svmlight(FIXTURES / "store-v1-source.svm", tmp_path / "s", block_bytes=16)
    assert meta["dataset_id"] == open_store(FIXTURES / "store-v1-svmlight").dataset_id


def test_v2_layout_codecs(tmp_path):
    X, y = fixture_matrix()
    write_store(tmp_path / "m", X, y)
    g = zarr.open_group(tmp_path / "m", mode="r")
    for name in ("X/data", "X/indices", "X/indptr", "X_csc/data", "X_csc/indices", "X_csc/indptr", "y"):
        (codec,) = g[name].compressors
        assert codec.to_dict()["name"] == "blosc" and codec.cname.value == "lz4"
        assert codec.shuffle.value == ("noshuffle" if g[name].dtype.kind == "f" else "shuffle")
    assert g["X/indices"].dtype == np.int32 and g["X_csc/indices"].dtype == np.int32
    assert set(g.keys()) == {"X", "X_csc", "y"}  # no bucket files or temporaries left


def skewed(rng: np.random.Generator, n: int, d: int) -> sp.csr_matrix:
    """Column 7 in 90% of rows, a few frequent columns, a long tail; some explicit zeros."""
    X = sp.random(n, d, density=3.0 / d, random_state=rng, format="lil")
    X[:, 7] = (rng.random((n, 1)) < 0.9) * rng.normal(size=(n, 1))
    X[:, d - 1] = rng.normal(size=(n, 1))
    X = X.tocsr()
    X.data[::17] = 0.0  # stored zeros stay stored
    return X


@pytest.mark.parametrize("memory_bytes", [1 << 26, 32 * 3 * 150, 32 * 3 * 5])
def test_csc_from_buckets_under_any_budget(tmp_path, monkeypatch, memory_bytes):
    monkeypatch.setattr(writer, "NNZ_CHUNK", 64)  # many chunks: exercises the chunked appends
    monkeypatch.setattr(writer, "ROW_CHUNK", 256)
    rng = np.random.default_rng(memory_bytes)
    X = skewed(rng, 700, 20_000)  # ~20 buckets of 1024 columns; column 7's bucket far over the small budgets
    y = rng.normal(size=700)
    ref = write_store(tmp_path / "ref", X, y, block_rows=1000)
    reads = []
    read_frames = buckets.read_frames

    def recording(path, cap=None):
        reads.append(path.name)
        return read_frames(path, cap)

    monkeypatch.setattr(buckets, "read_frames", recording)  # sort_bucket's reads
    monkeypatch.setattr(writer, "read_frames", recording)  # the writer's own
    meta = write_store(tmp_path / "s", X, y, block_rows=33, memory_bytes=memory_bytes)
    assert meta["dataset_id"] == ref["dataset_id"]
    # a bucket over the budget is read twice (count, split into column groups), then each group once
    assert max(reads.count(name) for name in reads) <= 2
    assert (memory_bytes < 1 << 26) == any(name.count(".") == 2 for name in reads)
    s = open_store(tmp_path / "s")
    C = s.csc()
    assert C.has_sorted_indices and np.array_equal(C.indptr, X.tocsc().indptr)
    assert np.array_equal(C.indices, X.tocsc().indices) and np.array_equal(C.data, X.tocsc().data)
    assert (s.csr() != X).nnz == 0 and np.array_equal(s.csr().data, X.data) and np.array_equal(s.y, y)
    assert zarr.open_group(tmp_path / "s")["X/data"].nchunks > 10


def test_wide_indices_after_a_narrow_first_block_rebucket(tmp_path):
    rng = np.random.default_rng(3)
    narrow = sp.random(50, 100, density=0.1, random_state=rng, format="csr")
    wide = sp.random(200, 1 << 23, density=4e-6, random_state=rng, format="csr")
    X = sp.vstack([sp.hstack([narrow, sp.csr_matrix((50, (1 << 23) - 100))]), wide], format="csr")
    y = rng.normal(size=X.shape[0])
    w = StoreWriter(tmp_path / "s")  # no n_features hint: buckets sized from the first block
    w.append(narrow.indptr, narrow.indices, narrow.data, y[:50])
    assert w._bucket_shift == 10
    w.append(wide.indptr, wide.indices, wide.data, y[50:])
    assert w._bucket_shift > 10 and len(w._bucket_sizes) <= 256
    w.finish(n_features=X.shape[1])
    s = open_store(tmp_path / "s")
    assert (s.csc() != X.tocsc()).nnz == 0 and (s.csr() != X).nnz == 0


def test_zero_based_file_found_late_is_rewritten(tmp_path):
    lines = [f"{i % 2} {i % 50 + 1}:{i} {i % 50 + 60}:1\n" for i in range(3000)]
    lines[2900] = "1 0:5 3:1\n"  # a column index 0, far into the file: zero-based after all
    p = tmp_path / "z.svm"
    p.write_text("".join(lines))
    auto = ingest_svmlight(p, tmp_path / "a", block_bytes=1 << 10, zero_based="auto")
    forced = ingest_svmlight(p, tmp_path / "b", zero_based="yes")
    assert auto["zero_based"] is True and auto["dataset_id"] == forced["dataset_id"]
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    assert (a.csr() != b.csr()).nnz == 0 and (a.csc() != b.csc()).nnz == 0
    assert a.csr()[2900, 0] == 5 and a.csr()[0, 1] == 0 and a.csr()[0, 2] == 0


def test_column_index_beyond_int32_is_refused(tmp_path):
    w = StoreWriter(tmp_path / "s")
    with pytest.raises(ParameterError, match="2\\^31"):
        w.append(np.array([0, 1]), np.array([2**31], dtype=np.int64), np.array([1.0]), np.array([1.0]))
    w.abort()
    assert not any(tmp_path.iterdir())


def test_write_blocks_failure_leaves_nothing(tmp_path):
    def blocks():
        yield sp.csr_matrix(np.eye(3)), np.ones(3)
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        write_blocks(tmp_path / "s", blocks(), 3)
    assert not any(tmp_path.iterdir())


def test_block_cache_serves_reads_and_follows_content(tmp_path):
    BLOCK_CACHE.clear()
    X, y = fixture_matrix()
    write_store(tmp_path / "s", X, y)
    s = open_store(tmp_path / "s", cache=True)
    first = s.read_rows(0, 20)
    assert (first != X[:20]).nnz == 0 and BLOCK_CACHE.misses == 1
    again = open_store(tmp_path / "s", cache=True).read_rows(0, 20)
    assert BLOCK_CACHE.hits == 1 and again.data.base is first.data.base or np.shares_memory(again.data, first.data)
    with pytest.raises(ValueError, match="read-only"):
        again.data[0] = 5.0  # cached blocks cannot be changed in place by a caller
    # the same path rewritten with other content: the dataset id differs, so the cache is not stale
    X2 = X.copy()
    X2.data = X2.data + 1.0
    write_store(tmp_path / "s", X2, y, force=True)
    assert (open_store(tmp_path / "s", cache=True).read_rows(0, 20) != X2[:20]).nnz == 0
    assert (open_store(tmp_path / "s").read_rows(0, 20) != X2[:20]).nnz == 0  # uncached reads are writable copies
    BLOCK_CACHE.clear()


def test_block_cache_keeps_the_start_of_a_scan_larger_than_its_budget(monkeypatch):
    cache = store_cache.BlockCache()
    monkeypatch.setattr(store_cache.BlockCache, "budget", staticmethod(lambda: 3 * 800))  # three 100-float blocks
    loads = []

    def block(array: str, i: int) -> tuple[np.ndarray]:
        def load() -> tuple[np.ndarray]:
            loads.append((array, i))
            return (np.full(100, float(i)),)

        return cache.get(("store", "id", array, i), load)

    for _ in range(3):  # a cyclic scan of 5 blocks: LRU would evict each block just before its next read
        assert [block("X_csc", i)[0][0] for i in range(5)] == [0, 1, 2, 3, 4]
    assert loads == [("X_csc", i) for i in range(5)] + [("X_csc", 3), ("X_csc", 4)] * 2
    assert cache.hits == 6 and cache.misses == 9 and cache.nbytes == 2400
    # another array's blocks evict the scanned array's, least recently used first
    block("X", 0)
    block("X", 1)
    assert [k[3] for k in cache._items if k[2] == "X_csc"] == [2] and cache.nbytes == 2400
    loads.clear()
    block("X_csc", 2)
    block("X", 0)
    assert loads == [] and cache.hits == 8
    block("y", 0)  # evicts X 1, the least recently used of the other arrays
    assert sorted((k[2], k[3]) for k in cache._items) == [("X", 0), ("X_csc", 2), ("y", 0)]


def test_block_cache_replaces_another_partition_of_the_same_array(monkeypatch):
    cache = store_cache.BlockCache()
    monkeypatch.setattr(store_cache.BlockCache, "budget", staticmethod(lambda: 3 * 800))

    def read(lo: int, hi: int) -> None:
        cache.get(("store", "id", "X_csc", lo, hi), lambda: (np.zeros((hi - lo) * 10),))

    for lo in range(0, 50, 10):  # a scan in 5 blocks of 10 columns: the first 3 stay
        read(lo, lo + 10)
    for lo in range(0, 50, 25):  # the same columns in 2 blocks: each replaces the blocks it overlaps
        read(lo, lo + 25)
    assert list(cache._items) == [("store", "id", "X_csc", 0, 25)] and cache.nbytes == 2000
    read(0, 25)
    assert cache.hits == 1


def test_chunks_equal_to_the_fill_value_read_back(tmp_path, monkeypatch):
    # zarr does not write a chunk that is all fill value (explicit zeros here); reads fill it in
    monkeypatch.setattr(writer, "NNZ_CHUNK", 64)
    rng = np.random.default_rng(5)
    X = sp.random(60, 40, density=0.2, random_state=rng, format="csr")
    X.data[:200] = 0.0  # stored zeros: the first three data chunks are all zero
    X.data[200:] = rng.normal(size=X.nnz - 200)
    write_store(tmp_path / "s", X, np.zeros(60), task="regression")
    assert not (tmp_path / "s" / "X" / "data" / "c" / "0").exists()
    s = open_store(tmp_path / "s")
    got = s.csr()
    assert np.array_equal(got.data, X.data) and np.array_equal(got.indices, X.indices) and got.nnz == X.nnz
    assert np.array_equal(s.y, np.zeros(60)) and (s.csc() != X.tocsc()).nnz == 0


def test_column_stream_reads_the_entries_in_chunk_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "NNZ_CHUNK", 64)  # ranges over many chunks, cut at both ends
    X = sp.random(300, 40, density=0.2, random_state=6, format="csc")
    X.data[:] = 1.0
    X = X.tolil()
    X[7, 30] = 0.5  # the one value that is not 1
    X[8, 31] = -1.0
    X = X.tocsr()
    write_store(tmp_path / "s", X, np.ones(300), task="regression")
    s = open_store(tmp_path / "s")
    rng = np.random.default_rng(1)
    for c0, c1 in [(0, 30), (3, 17), (25, 31), (30, 31), (31, 32), (32, 40), (5, 5), (0, 40)]:
        stream = s.column_stream(c0, c1)
        data, rows, ptr = s.column_slice(c0, c1)
        assert np.array_equal(stream.indptr - stream.indptr[0], ptr)
        assert stream.binary == (not (c0 < 32 and c1 > 30)) and (not stream.binary or np.all(data == 1.0))
        for lo, hi in [(0, ptr[-1])] + [tuple(sorted(rng.integers(0, ptr[-1] + 1, 2))) for _ in range(5)]:
            pieces = [(p, r.copy(), None if d is None else d.copy()) for p, r, d in stream.pieces(int(lo), int(hi))]
            if hi == lo:
                assert pieces == []
                continue
            # one stored chunk a piece: each after the first starts a chunk of the array
            starts = [p for p, _, _ in pieces]
            assert starts == [lo, *np.cumsum([len(r) for _, r, _ in pieces])[:-1] + lo]
            assert all((p + stream.indptr[0]) % 64 == 0 for p in starts[1:]) and all(len(r) <= 64 for _, r, _ in pieces)
            assert np.array_equal(np.concatenate([r for _, r, _ in pieces]), rows[lo:hi])
            if not stream.binary:
                assert np.array_equal(np.concatenate([d for _, _, d in pieces]), data[lo:hi])
            else:
                assert all(d is None for _, _, d in pieces)
    # the chunk-wise check is np.all over any range of the array, chunks cut anywhere
    g = zarr.open_group(tmp_path / "s", mode="r")["X_csc/data"]
    values = g[:]
    assert g.chunks[0] == 64 and values.size > 10 * 64
    for a, b in [(0, values.size), (0, 0), (5, 6)] + [
        tuple(sorted(rng.integers(0, values.size, 2))) for _ in range(60)
    ]:
        assert chunks.all_equal(g, a, b, 1.0) == bool(np.all(values[a:b] == 1.0))
    # chunks of stored zeros equal the fill value and are not written: they read as zeros
    Z = sp.csr_matrix(
        (
            np.r_[np.zeros(300), np.ones(50)],
            (np.r_[np.arange(300), np.arange(50)], np.r_[np.zeros(300, int), np.ones(50, int)]),
        ),
        shape=(300, 2),
    )
    write_store(tmp_path / "z", Z, np.ones(300), task="regression")
    g = zarr.open_group(tmp_path / "z", mode="r")["X_csc/data"]
    assert sorted(p.name for p in (tmp_path / "z" / "X_csc" / "data" / "c").iterdir()) == ["4", "5"]
    assert chunks.all_equal(g, 0, 300, 0.0) and chunks.all_equal(g, 64, 128, 0.0)
    assert not chunks.all_equal(g, 0, 300, 1.0) and chunks.all_equal(g, 300, 350, 1.0)
    zero = open_store(tmp_path / "z").column_stream(0, 1)
    assert not zero.binary and np.concatenate([d.copy() for _, _, d in zero.pieces(0, 300)]).tolist() == [0.0] * 300
    # through the cache a range holds its pointers and flag only, never its entries
    BLOCK_CACHE.clear()
    cached = open_store(tmp_path / "s", cache=True)
    stream = cached.column_stream(0, 30)
    assert stream.binary and BLOCK_CACHE.nbytes == stream.indptr.nbytes + 1 and BLOCK_CACHE.misses == 1
    list(stream.pieces(0, int(stream.indptr[-1] - stream.indptr[0])))
    again = cached.column_stream(0, 30)
    assert BLOCK_CACHE.hits == 1 and again.binary and again.indptr is stream.indptr
    assert BLOCK_CACHE.nbytes == stream.indptr.nbytes + 1
    assert not cached.column_stream(0, 40).binary and BLOCK_CACHE.misses == 2
    BLOCK_CACHE.clear()


def test_column_stream_reads_other_layouts_whole(tmp_path, monkeypatch):
    """A layout without a chunk decoder of ours (here: none for the values) is read in one piece."""
    monkeypatch.setattr(writer, "NNZ_CHUNK", 64)  # streamed, it would come in many pieces
    X = sp.random(200, 10, density=0.3, random_state=2, format="csr")
    write_store(tmp_path / "s", X, np.ones(200), task="regression")
    stream = open_store(tmp_path / "s").column_stream(2, 9)
    n = int(stream.indptr[-1] - stream.indptr[0])
    assert n > 3 * 64 and len(list(stream.pieces(3, n))) > 3
    real = chunks.chunk_decoder
    monkeypatch.setattr(chunks, "chunk_decoder", lambda arr: None if arr.basename == "data" else real(arr))
    pieces = list(stream.pieces(3, n))
    data, rows, _ = open_store(tmp_path / "s").column_slice(2, 9)
    assert len(pieces) == 1 and pieces[0][0] == 3
    assert np.array_equal(pieces[0][1], rows[3:]) and np.array_equal(pieces[0][2], data[3:])
    assert list(stream.pieces(4, 4)) == []


def test_column_stream_grows_its_read_buffer(tmp_path, monkeypatch):
    """A stored chunk larger than the thread's read buffer (1 MiB at first) grows it, in a new
    thread as in an old one."""
    import threading

    monkeypatch.setattr(writer, "NNZ_CHUNK", 1 << 18)
    rng = np.random.default_rng(3)
    X = sp.random(2000, 150, density=0.5, random_state=3, format="csr")
    X.data = rng.uniform(-1, 1, X.nnz)  # incompressible: 2 MB a stored chunk of values
    write_store(tmp_path / "s", X, np.ones(2000), task="regression")
    s = open_store(tmp_path / "s")
    sizes = [p.stat().st_size for p in (tmp_path / "s" / "X_csc" / "data" / "c").iterdir()]
    assert max(sizes) > 1 << 20
    data, rows, ptr = s.column_slice(0, 150)
    box = {}

    def read() -> None:
        stream = s.column_stream(0, 150)
        pieces = [(p, r.copy(), d.copy()) for p, r, d in stream.pieces(0, int(ptr[-1]))]
        box["rows"] = np.concatenate([r for _, r, _ in pieces])
        box["data"] = np.concatenate([d for _, _, d in pieces])
        box["raw"] = len(chunks._PIECE_BUFFERS.raw)

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert np.array_equal(box["rows"], rows) and np.array_equal(box["data"], data) and box["raw"] >= max(sizes)


def test_all_equal_under_concurrent_callers(tmp_path, monkeypatch):
    """More callers than scratch buffers, on arrays of other contents (blosc releases the GIL):
    each answer is np.all's."""
    import threading

    monkeypatch.setattr(writer, "NNZ_CHUNK", 64)
    rng = np.random.default_rng(2)
    arrays = []
    for name, share in (("a", 0.0), ("b", 0.002)):  # all 1.0, and a few 0.5s
        X = sp.random(400, 30, density=0.3, random_state=int(share * 1000), format="csr")
        X.data[:] = np.where(rng.random(X.nnz) < share, 0.5, 1.0)
        write_store(tmp_path / name, X, np.ones(400), task="regression")
        arrays.append(zarr.open_group(tmp_path / name, mode="r")["X_csc/data"])
    cases = [(g, *sorted(rng.integers(0, g.shape[0], 2))) for g in arrays for _ in range(40)]
    want = [bool(np.all(g[a:b] == 1.0)) for g, a, b in cases]
    assert True in want and False in want
    wrong = []

    def call(t: int) -> None:
        for i in range(t, len(cases) * 3, 8):
            g, a, b = cases[i % len(cases)]
            if chunks.all_equal(g, a, b, 1.0) != want[i % len(cases)]:
                wrong.append(i)

    threads = [threading.Thread(target=call, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == [] and chunks._SCRATCH.qsize() == 4


def test_all_equal_decompresses_a_repeated_chunk_once(tmp_path, monkeypatch):
    """A chunk stored as the same bytes as a whole chunk found all equal is not decompressed again;
    a chunk only partly compared is never taken as known."""
    monkeypatch.setattr(writer, "NNZ_CHUNK", 64)
    monkeypatch.setattr(chunks, "_EQUAL_CHUNK", {})
    X = sp.random(500, 20, density=0.3, random_state=3, format="csc")
    X.data[:] = 1.0
    X.data[200] = 0.5  # in the CSC values' chunk 3 (192..255)
    write_store(tmp_path / "s", X.tocsr(), np.ones(500), task="regression")
    g = zarr.open_group(tmp_path / "s", mode="r")["X_csc/data"]
    values, n = g[:], g.shape[0]
    decoded = []
    real = chunks.chunk_decoder(g)

    def counting(raw, out=None):
        decoded.append(len(raw))
        return real(raw, out)

    monkeypatch.setattr(chunks, "chunk_decoder", lambda arr: counting)
    assert n > 20 * 64 and values[200] == 0.5
    k = 200 // 64
    # the chunk holding the 0.5, compared from just after it: equal, but not all of it was compared
    assert chunks.all_equal(g, 201, (k + 1) * 64, 1.0) and chunks._EQUAL_CHUNK == {}
    assert not chunks.all_equal(g, k * 64, (k + 1) * 64, 1.0)
    decoded.clear()
    assert chunks.all_equal(g, 0, 64 * k, 1.0) and decoded == [decoded[0]]  # the first chunk only
    whole = n // 64 * 64
    assert n > whole and chunks.all_equal(g, (k + 1) * 64, whole, 1.0) and len(decoded) == 1  # same bytes
    assert chunks.all_equal(g, 3, 64 * k - 5, 1.0) and len(decoded) == 1
    assert chunks.all_equal(g, whole - 3, n, 1.0) and len(decoded) == 2  # the last chunk (padded): other bytes
    assert not chunks.all_equal(g, 0, n, 1.0) and len(decoded) >= 3  # the chunk with the 0.5
    assert not chunks.all_equal(g, 0, 64, 2.0)  # known for 1.0 only
    for a, b in [(0, n), (190, 260), (64 * k, 64 * k + 8), (5, 120)]:
        assert chunks.all_equal(g, a, b, 1.0) == bool(np.all(values[a:b] == 1.0))
    chunks._EQUAL_CHUNK.clear()  # the chunk with the 0.5 compared from its start, but not to its end
    assert chunks.all_equal(g, 64 * k, 64 * k + 8, 1.0) and chunks._EQUAL_CHUNK == {}
    assert not chunks.all_equal(g, 64 * k, 64 * (k + 1), 1.0)
