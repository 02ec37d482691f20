"""Store reading: row blocks, column ranges, Dask view, in-memory writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dpdist.data import open_store, write_store


@pytest.fixture
def matrix():
    rng = np.random.default_rng(0)
    X = sp.random(1200, 300, density=0.02, random_state=rng, format="csr")
    y = rng.normal(size=1200)
    return X, y


def test_write_and_read_back(tmp_path, matrix):
    X, y = matrix
    meta = write_store(tmp_path / "s", X, y, block_rows=100, memory_bytes=1 << 14, task="regression")
    s = open_store(tmp_path / "s")
    assert s.shape == X.shape and s.nnz == X.nnz and s.dataset_id == meta["dataset_id"]
    assert (s.csr() != X).nnz == 0 and (s.csc() != X.tocsc()).nnz == 0
    assert np.array_equal(s.y, y)
    assert (s.read_rows(150, 420) != X[150:420]).nnz == 0
    assert (s.read_columns(17, 250) != X[:, 17:250]).nnz == 0
    bounds = s.row_bounds(500)
    assert bounds == [(0, 500), (500, 1000), (1000, 1200)]
    blocks = list(s.iter_row_blocks(500))
    assert (sp.vstack([b for _, b, _ in blocks]) != X).nnz == 0
    assert np.array_equal(np.concatenate([yb for _, _, yb in blocks]), y)


def test_dask_view(tmp_path, matrix):
    X, y = matrix
    write_store(tmp_path / "s", X, y)
    D = open_store(tmp_path / "s").to_dask(block_rows=256)
    assert D.shape == X.shape and D.numblocks == (5, 1)
    got = (D.T @ y).compute()
    got = got.todense() if hasattr(got, "todense") else got
    np.testing.assert_allclose(np.asarray(got).ravel(), X.T @ y, rtol=1e-12)


def test_content_hash_depends_on_content_only(tmp_path, matrix):
    X, y = matrix
    a = write_store(tmp_path / "a", X, y, block_rows=77)
    b = write_store(tmp_path / "b", X.toarray(), y, block_rows=1000)
    y2 = y.copy()
    y2[5] += 1.0
    c = write_store(tmp_path / "c", X, y2)
    assert a["dataset_id"] == b["dataset_id"] != c["dataset_id"]


def test_bad_inputs(tmp_path, matrix):
    X, y = matrix
    with pytest.raises(ValueError, match="rows"):
        write_store(tmp_path / "s", X, y[:-1])
    Xn = X.copy()
    Xn.data[0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        write_store(tmp_path / "s", Xn, y)
    with pytest.raises(ValueError, match="does not exist"):
        open_store(tmp_path / "nothing")
    (tmp_path / "notastore").mkdir()
    with pytest.raises(ValueError, match="not a dpdist store"):
        open_store(tmp_path / "notastore")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notastore"]


def test_inconsistent_block_is_refused(tmp_path):
    from dpdist.data import StoreWriter

    w = StoreWriter(tmp_path / "s")
    with pytest.raises(ValueError, match="inconsistent CSR block"):  # data shorter than indices
        w.append(np.array([0, 2]), np.array([0, 1]), np.array([1.0]), np.array([1.0]))
    w.abort()
    assert not any(tmp_path.iterdir())


def test_a_store_written_before_names_and_the_v2_ledger_still_opens_and_keeps_its_identity():
    from pathlib import Path

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "v1" / "store"
    s = open_store(fixture)
    assert s.shape == (40, 12) and s.task == "binary" and s.name is None
    assert s.dataset_id == "985f982fd027394973c67cc158c911c75f6c854db32ee05f95afb7c6e01896b1"
    X = s.csr()
    assert (s.csc() != X.tocsc()).nnz == 0 and X.nnz == s.nnz


def test_the_same_content_written_today_has_the_v1_content_hash(tmp_path):
    from pathlib import Path

    old = open_store(Path(__file__).resolve().parents[1] / "fixtures" / "v1" / "store")
    meta = write_store(tmp_path / "again", old.csr(), old.y)
    assert meta["dataset_id"] == old.dataset_id  # ledgers keyed by it keep their budgets


def test_same_content_same_hash_but_random_public_names(tmp_path, matrix):
    X, y = matrix
    a = write_store(tmp_path / "a", X, y)
    b = write_store(tmp_path / "b", X, y)
    assert a["dataset_id"] == b["dataset_id"]  # private: ties the budget to the content
    assert a["name"] != b["name"] and a["name"].startswith("ds-")  # public: not a function of the data
    write_store(tmp_path / "c", X, y, metadata={"name": "study"})
    assert open_store(tmp_path / "c").name == "study"


def test_the_feature_schema_of_stores_written_before_it_was_recorded() -> None:
    from dpdist.data.store import feature_schema

    assert feature_schema({"zero_based": False, "schema": "declared"}) == "inferred"  # svmlight: not kept
    assert feature_schema({"synthetic": "rcv1"}) == "declared"  # the generator's public dimension
    assert feature_schema({"task": "binary", "schema": "declared"}) == "declared"  # write_store: the caller's
    assert feature_schema({"source_text_bytes": 10}) == "inferred"
    assert feature_schema({"split_of": "x", "source_meta": {"synthetic": "rcv1", "source": None}}) == "declared"
    assert feature_schema({"split_of": "x", "source_meta": {"synthetic": None, "source": "/d.svm"}}) == "inferred"
    assert feature_schema({"split_of": "x", "source_meta": {"synthetic": None, "source": None}}) == "inferred"
    assert feature_schema({"table_notes": {}}) == "declared"
    assert feature_schema({"table_notes": {"category_codes": {"c": {"a": 1}}}}) == "inferred"
    assert feature_schema({"table_notes": {"imputation": "means"}}) == "inferred"
    assert feature_schema({"feature_schema": "declared", "zero_based": True}) == "declared"  # recorded: as is


def test_coded_categories_or_imputed_gaps_make_a_tables_columns_inferred(tmp_path: Path) -> None:
    import warnings

    from dpdist.data.store import check_schema
    from dpdist.data.tables import ingest_table

    p = tmp_path / "t.csv"
    p.write_text("a,b,y\n1,x,1\n2,y,-1\n,x,1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for out, kw, how in (("e", {"encode": True, "impute": "mean"}, "inferred"),):
            with pytest.raises(ValueError, match="--categories COL=a,b,c.*--fill-value 0"):  # refused before writing
                ingest_table(p, tmp_path / out, task="binary", labels=[-1, 1], **kw)
            meta = ingest_table(p, tmp_path / out, task="binary", labels=[-1, 1], private=False, **kw)
            assert meta["feature_schema"] == how
            with pytest.raises(ValueError, match="columns were inferred"):
                check_schema(open_store(tmp_path / out))
    declared = ingest_table(
        p, tmp_path / "d", task="binary", labels=[-1, 1], categories={"b": ["x"]}, fill_value=0.0
    )  # a public map of each record's own values
    assert declared["feature_schema"] == "declared" and declared["feature_names"] == ["a", "b=x", "b=other"]
    check_schema(open_store(tmp_path / "d"))
    assert open_store(tmp_path / "d").csr().toarray().tolist() == [[1, 1, 0], [2, 0, 1], [0, 1, 0]]
    q = tmp_path / "u.csv"
    q.write_text("a,b,y\n1,0.5,1\n2,0.25,-1\n")
    assert ingest_table(q, tmp_path / "c", task="binary", labels=[-1, 1])["feature_schema"] == "declared"
    check_schema(open_store(tmp_path / "c"))


@pytest.mark.parametrize("cache,zarr_read", [(False, False), (True, False), (False, True)])
def test_values_read_as_float32_are_the_stored_values_rounded(tmp_path, monkeypatch, cache, zarr_read):
    """csr/csc(np.float32): the stored values rounded to float32, read chunk by chunk (no float64
    copy of the whole range), also through zarr's own reads (a store on another kind of storage);
    any other dtype is refused."""
    import dpdist.data.store.chunks as store_chunks
    from dpdist.exceptions import ParameterError

    if zarr_read:
        monkeypatch.setattr(store_chunks, "chunk_decoder", lambda arr: None)

    rng = np.random.default_rng(0)
    X = sp.random(500, 40, density=0.2, random_state=1, format="csr")
    X.data = rng.uniform(-1, 1, X.nnz)
    write_store(tmp_path / "s", X, rng.integers(0, 2, 500).astype(float), task="binary", block_rows=64)
    s = open_store(tmp_path / "s", cache=cache)
    for got, want in (
        (s.csr(np.float32), X.astype(np.float32)),
        (s.csc(np.float32), X.tocsc().astype(np.float32)),
        (s.read_rows(7, 300, np.float32), X[7:300].astype(np.float32)),
    ):
        assert got.dtype == np.float32 and (got != want).nnz == 0
    assert s.csr().dtype == np.float64 and (s.csr() != X).nnz == 0  # a float64 read after: not served the float32
    with pytest.raises(ParameterError, match="float64"):
        s.csr(np.int32)
