"""The keyed train/test split: each record's side depends on the record and a secret key only."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from svmlight_rows import svmlight_rows

from dpdist.cli import main
from dpdist.data.ingest import ingest_svmlight
from dpdist.data.split import record_sides, split_store
from dpdist.data.store import open_store, write_store
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant


def data(n: int = 500, seed: int = 0) -> tuple[sp.csr_matrix, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = sp.random(n, 40, density=0.1, format="csr", random_state=seed + 1)
    return X, np.where(rng.random(n) < 0.5, -1.0, 1.0)


def test_split_partitions_the_records_by_their_keyed_hash(tmp_path: Path) -> None:
    X, y = data()
    key = secrets.token_bytes(32)
    write_store(tmp_path / "src", X, y, block_rows=64)
    tr, te = split_store(tmp_path / "src", tmp_path / "tr", tmp_path / "te", 0.3, key)
    test = record_sides(X, y, key, 0.3)
    assert np.array_equal(test, record_sides(X, y, key, 0.3))  # a function of the records and the key
    assert 0.2 < test.mean() < 0.4
    a, b = open_store(tmp_path / "tr"), open_store(tmp_path / "te")
    assert (a.csr() != X[~test]).nnz == 0 and (b.csr() != X[test]).nnz == 0
    assert np.array_equal(a.y, y[~test]) and np.array_equal(b.y, y[test])
    src = open_store(tmp_path / "src")
    assert tr["split_of"] == te["split_of"] == src.dataset_id  # releases are charged to the source
    assert a.meta["label_mapping"] == b.meta["label_mapping"] == src.meta["label_mapping"]
    # another key, another split
    assert not np.array_equal(test, record_sides(X, y, secrets.token_bytes(32), 0.3))


def test_a_records_side_is_its_keyed_blake2b_digest_below_the_fraction() -> None:
    """The function itself, record by record (halves written before keep their records' sides): BLAKE2b keyed,
    8 bytes, personalised "dpdist-split", over the record's int64 column indices, float64 values and float64
    label, read as a little-endian integer and compared with test_fraction * 2^64."""
    import hashlib

    X, y = data(300, seed=5)
    key = secrets.token_bytes(32)
    want = []
    for i in range(X.shape[0]):
        row = X[i]
        h = hashlib.blake2b(row.indices.astype("<i8").tobytes(), key=key, digest_size=8, person=b"dpdist-split")
        h.update(row.data.astype("<f8").tobytes())
        h.update(np.array([y[i]], dtype="<f8").tobytes())
        want.append(int.from_bytes(h.digest(), "little") < int(0.3 * 2.0**64))
    assert record_sides(X, y, key, 0.3).tolist() == want
    assert record_sides(X[:0], y[:0], key, 0.3).shape == (0,)


def test_a_fixed_key_splits_fixed_records_as_it_always_did() -> None:
    """Sides written down from the implementation before the split was made one pass (4bf12d6): halves written
    by any version keep their records' sides."""
    from dpdist.data.split import _byte_offsets

    rng = np.random.default_rng(9)
    X = sp.random(40, 12, density=0.3, format="csr", random_state=10)
    y = np.where(rng.random(40) < 0.5, -1.0, 1.0)
    got = "".join("1" if v else "0" for v in record_sides(X, y, bytes(range(32)), 0.4))
    assert got == "0000110110111011000101010010010111011010"
    # the rows' byte offsets past 2^31 (2^28 non-zeros, indptr still int32): exact, never wrapped
    assert _byte_offsets(np.array([0, 2**28, 2**28 + 1], dtype=np.int32)) == [0, 2**31, 2**31 + 8]


@pytest.mark.parametrize("where", ["top", "middle", "bottom"])
def test_a_neighbour_leaves_every_other_record_on_its_side(where: str) -> None:
    X, y = data(400, 3)
    key = secrets.token_bytes(32)
    extra = sp.csr_matrix(np.ones((1, 40)) * 0.5)
    at = {"top": 0, "middle": 200, "bottom": 400}[where]
    X2 = sp.vstack([X[:at], extra, X[at:]], format="csr")
    y2 = np.concatenate([y[:at], [1.0], y[at:]])
    s1, s2 = record_sides(X, y, key, 0.5), record_sides(X2, y2, key, 0.5)
    assert np.array_equal(np.delete(s2, at), s1)
    # removing a record (the other direction of add/remove) likewise
    assert np.array_equal(record_sides(X[1:], y[1:], key, 0.5), s1[1:])


def test_halves_may_be_empty_and_keep_the_task(tmp_path: Path) -> None:
    X = sp.csr_matrix(np.eye(3))
    y = np.array([1.0, -1.0, 1.0])
    write_store(tmp_path / "src", X, y)
    key = secrets.token_bytes(32)
    tr, te = split_store(tmp_path / "src", tmp_path / "a", tmp_path / "b", 1e-9, key)  # all records train
    assert open_store(tmp_path / "b").shape == (0, 3) and open_store(tmp_path / "a").shape == (3, 3)
    assert tr["task"] == te["task"] == "binary" and te["label_mapping"] == tr["label_mapping"]


@pytest.mark.parametrize("where", ["reading", "writing", "finishing"])
def test_a_split_that_fails_midway_leaves_no_half(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The halves are written in one pass by a thread each: a source that cannot be read past its first
    block, or a half's writer failing, raises the error and leaves neither half (nor a temporary)."""
    from dpdist.data import split as split_module
    from dpdist.data.store.reader import SparseStore as Store

    X, y = data(600)
    write_store(tmp_path / "src", X, y, block_rows=50)
    if where == "reading":
        blocks = Store.iter_row_blocks

        def broken(self, *a, **kw):
            for i, block in enumerate(blocks(self, *a, **kw)):
                if i == 3:
                    raise OSError("the disk went away")
                yield block

        monkeypatch.setattr(Store, "iter_row_blocks", broken)
    elif where == "finishing":  # the test half fails as it is finished: the train half, whole, is not moved in
        from dpdist.data.store.writer import StoreWriter

        finish = StoreWriter.finish

        def full_disk(self, *a, **kw):
            if ".te." in self.out.name:
                self.abort()
                raise OSError("the disk went away")
            return finish(self, *a, **kw)

        monkeypatch.setattr(StoreWriter, "finish", full_disk)
    else:
        write = split_module.write_blocks

        def failing(out, blocks, *a, **kw):
            if ".te." in Path(out).name:
                next(iter(blocks))
                raise OSError("the disk went away")
            return write(out, blocks, *a, **kw)

        monkeypatch.setattr(split_module, "write_blocks", failing)
    with pytest.raises(OSError, match="went away"):
        split_store(tmp_path / "src", tmp_path / "tr", tmp_path / "te", 0.3, secrets.token_bytes(32))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_an_existing_split_is_replaced_only_with_force(tmp_path: Path) -> None:
    X, y = data(200)
    write_store(tmp_path / "src", X, y, block_rows=64)
    key = secrets.token_bytes(32)
    split_store(tmp_path / "src", tmp_path / "tr", tmp_path / "te", 0.3, key)
    with pytest.raises(ParameterError, match="already exists"):
        split_store(tmp_path / "src", tmp_path / "tr", tmp_path / "te", 0.5, key)
    assert open_store(tmp_path / "te").meta["test_fraction"] == 0.3
    split_store(tmp_path / "src", tmp_path / "tr", tmp_path / "te", 0.5, key, force=True)
    assert open_store(tmp_path / "te").meta["test_fraction"] == 0.5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src", "te", "tr"]  # no temporary, no old copy left


def test_bad_fraction_or_key_fails_fast(tmp_path: Path) -> None:
    X, y = data(10)
    with pytest.raises(ParameterError, match="test_fraction"):
        record_sides(X, y, secrets.token_bytes(32), 1.0)
    with pytest.raises(ParameterError, match="key"):
        record_sides(X, y, b"short", 0.5)


def test_a_split_half_is_charged_to_its_source(tmp_path):
    ledger = str(tmp_path / "ledger.sqlite")
    src = tmp_path / "src"
    ingest_svmlight(
        svmlight_rows(tmp_path / "d.svm", np.clip(np.linspace(-1, 1, 300), -1, 1)), src, n_features=8, task="regression"
    )
    acc = Accountant(ledger)
    source = open_store(src).dataset_id
    acc.init_budget(source, 1.0, 1e-6, name="src")
    split_store(src, tmp_path / "train", tmp_path / "test", 0.2, acc.split_key(source))
    main(
        [
            "budget",
            "init",
            str(tmp_path / "train"),
            "--epsilon",
            "1",
            "--delta",
            "1e-6",
            "--name",
            "half",
            "--ledger",
            ledger,
        ]
    )
    code = main(
        [
            "train",
            str(tmp_path / "train"),
            "--method",
            "fast-dp-fw",
            "--loss",
            "squared",
            "--lam",
            "1",
            "--iters",
            "20",
            "--epsilon",
            "0.9",
            "--test-fraction",
            "0",
            "--ledger",
            ledger,
            "--json",
        ]
    )
    assert code != 0 or acc.status(source).releases == 1, "records of the source were charged to another budget"
