"""svmlight ingest: round trips against scikit-learn, bad input, atomic writes."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import numpy as np
import pytest
import zarr
from sklearn.datasets import load_svmlight_file
from svmlight_rows import svmlight_rows

from dpdist.cli import main
from dpdist.data import open_store
from dpdist.data.ingest import ingest_svmlight
from dpdist.data.svmlight import SvmlightFormatError
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.selection.sis import store_target

SVM_FILES = [
    ("libsvm/rcv1_small.train.svm.xz", 47236),
    ("libsvm/rcv1_small.test.svm.xz", 47236),
    ("libsvm/rcv1_train.binary.head100.svm.xz", 47236),
    ("libsvm/news20.t.svm.xz", None),
    ("regression/housing_scale.svm.xz", None),
    ("regression/abalone_scale.svm.xz", None),
]


def sklearn_reference(path: Path, n_features: int | None):
    X, y = load_svmlight_file(lzma.open(path), n_features=n_features)
    return X, y


@pytest.mark.parametrize(("name", "n_features"), SVM_FILES)
def test_real_files_round_trip(shared_data, tmp_path, name, n_features):
    src = shared_data / name
    X_ref, y_ref = sklearn_reference(src, n_features)
    meta = ingest_svmlight(
        src,
        tmp_path / "s",
        n_features=n_features,
        task="multiclass" if "news20" in name else "auto",
        block_bytes=1 << 18,
    )  # several blocks even for small files
    store = open_store(tmp_path / "s")
    assert store.shape == X_ref.shape and store.nnz == X_ref.nnz == meta["nnz"]
    X = store.csr()
    assert (X != X_ref).nnz == 0
    assert np.array_equal(X.data, X_ref.data) and np.array_equal(X.indices, X_ref.indices)
    assert np.array_equal(store.y, y_ref)
    C = store.csc()
    assert (C != X_ref.tocsc()).nnz == 0 and C.has_sorted_indices
    assert meta["zero_based"] is False


def test_task_and_label_mapping(shared_data, tmp_path):
    meta = ingest_svmlight(shared_data / "libsvm/rcv1_small.train.svm.xz", tmp_path / "a")
    assert meta["task"] == "binary" and meta["label_mapping"] == {"-1.0": 0, "1.0": 1}
    meta = ingest_svmlight(shared_data / "regression/housing_scale.svm.xz", tmp_path / "b")
    assert meta["task"] == "regression" and meta["label_mapping"] is None
    meta = ingest_svmlight(shared_data / "libsvm/news20.t.svm.xz", tmp_path / "c", task="multiclass")
    assert len(meta["label_mapping"]) == 20
    with pytest.raises(ValueError, match="exactly 2 distinct labels"):
        ingest_svmlight(shared_data / "libsvm/news20.t.svm.xz", tmp_path / "d", task="binary")
    assert not (tmp_path / "d").exists()


def test_anndata_layout(shared_data, tmp_path):
    ingest_svmlight(shared_data / "regression/housing_scale.svm.xz", tmp_path / "s")
    g = zarr.open_group(tmp_path / "s", mode="r")
    assert g.metadata.zarr_format == 3
    for name, enc in (("X", "csr_matrix"), ("X_csc", "csc_matrix")):
        attrs = dict(g[name].attrs)
        assert attrs["encoding-type"] == enc and attrs["encoding-version"] == "0.1.0"
        assert attrs["shape"] == [506, 13]
        assert set(g[name].keys()) == {"data", "indices", "indptr"}
    assert set(g.keys()) == {"X", "X_csc", "y"}


def write_variants(text: bytes, folder: Path) -> list[Path]:
    paths = []
    for suffix, opener in (("", open), (".bz2", bz2.open), (".gz", gzip.open), (".xz", lzma.open)):
        p = folder / f"data.svm{suffix}"
        with opener(p, "wb") as f:
            f.write(text)
        paths.append(p)
    return paths


SMALL = b"1 1:0.5 3:-2\n# a comment line\n-1 2:1.25\n1 1:1 2:2 3:3 # trailing comment\n\n-1 3:7e-3\n"


def test_compressions_give_the_same_dataset(tmp_path):
    ids = set()
    for i, p in enumerate(write_variants(SMALL, tmp_path)):
        meta = ingest_svmlight(p, tmp_path / f"s{i}")
        ids.add(meta["dataset_id"])
        assert (meta["n_rows"], meta["n_features"], meta["nnz"]) == (4, 3, 7)
    assert len(ids) == 1


def test_zero_based_detection_and_flags(tmp_path):
    p = tmp_path / "z.svm"
    p.write_bytes(b"1 0:1 2:2\n0 1:3\n")
    meta = ingest_svmlight(p, tmp_path / "a", zero_based="auto")
    assert meta["n_features"] == 3 and meta["feature_schema"] == "inferred"  # index 0 present: zero-based, guessed
    p1 = tmp_path / "o.svm"
    p1.write_bytes(b"1 1:1 3:2\n0 2:3\n")
    meta = ingest_svmlight(p1, tmp_path / "b")  # one-based by default (LIBSVM's convention)
    assert meta["n_features"] == 3 and meta["zero_based"] is False
    assert meta["feature_schema"] == "inferred"  # the number of columns was the largest index seen
    assert open_store(tmp_path / "b").csr().toarray().tolist() == [[1, 0, 2], [0, 3, 0]]
    meta = ingest_svmlight(p1, tmp_path / "c", zero_based="yes", n_features=4)
    assert meta["n_features"] == 4 and meta["feature_schema"] == "declared"
    with pytest.raises(ValueError, match=r"z\.svm:1: a column index below 1 in a file read as 1-based") as info:
        ingest_svmlight(p, tmp_path / "d", n_features=3)  # one-based (the default): the 0 is refused
    assert "zero_based='yes'" in str(info.value)
    assert not (tmp_path / "d").exists()


def test_declared_columns_refuse_an_index_beyond_them_naming_the_line_not_the_index(tmp_path):
    p = tmp_path / "w.svm"
    p.write_bytes(b"".join(b"1 1:1 2:2\n" for _ in range(3000)) + b"# comment\n-1 3:1 987654:2\n")
    with pytest.raises(ValueError, match=r"w\.svm:3002: a column index beyond the declared n_features=5") as info:
        ingest_svmlight(p, tmp_path / "s", n_features=5, block_bytes=1 << 12)
    assert "987654" not in str(info.value) and "987653" not in str(info.value)
    assert not (tmp_path / "s").exists()
    assert ingest_svmlight(p, tmp_path / "s", n_features=987654)["feature_schema"] == "declared"  # 1-based: fits
    with pytest.raises(ValueError, match=r"w\.svm:3002: a column index beyond"):
        ingest_svmlight(p, tmp_path / "t", n_features=987654, zero_based="yes")


def test_inferred_columns_are_refused_for_private_use(tmp_path):
    from dpdist.data.store import check_schema

    p = tmp_path / "o.svm"
    p.write_bytes(b"1 1:1 3:2\n-1 2:3\n")
    for out, kw, ok in (
        ("a", {"n_features": 3}, True),
        ("b", {}, False),
        ("c", {"n_features": 4, "zero_based": "auto"}, False),
    ):
        ingest_svmlight(p, tmp_path / out, task="binary", labels=[-1, 1], **kw)
        if ok:
            check_schema(open_store(tmp_path / out))
        else:
            with pytest.raises(ValueError, match="columns were inferred from the data"):
                check_schema(open_store(tmp_path / out))


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        (b"1 2:x\n", "a label or value that is not a number"),
        (b"1 5:1 3:2\n", "column indices not in ascending order, or repeated"),
        (b"abc 3:1\n", "a label or value that is not a number"),
        (b"1 3\n", "a feature that is not index:value"),
        (b"1 -3:1\n", "an invalid column index"),
        (b"1 3:nan\n", "non-finite"),
        (b"inf 3:1\n", "non-finite"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad_line, reason):
    good = b"".join(b"1 1:1 2:2\n" for _ in range(4000))
    p = tmp_path / "bad.svm"
    p.write_bytes(good + b"# comment\n" + bad_line + good)
    with pytest.raises(SvmlightFormatError, match=reason) as info:
        ingest_svmlight(p, tmp_path / "s", block_bytes=1 << 14)
    assert info.value.line == 4002 and str(p) in str(info.value)
    token = bad_line.split()[-1 if bad_line[:1].isdigit() else 0].decode()
    assert token not in str(info.value).replace(str(p), "").replace(info.value.reason, "")  # never the line's text
    assert not (tmp_path / "s").exists()
    assert [x.name for x in tmp_path.iterdir()] == ["bad.svm"]  # no temporary left either


def test_cli_bad_input_exit_2_and_no_store(tmp_path, capsys):
    p = tmp_path / "bad.svm"
    p.write_bytes(b"1 1:1\n-1 2:x\n")
    code = main(["ingest", str(p), "--out", str(tmp_path / "s"), "--non-private"])
    err = capsys.readouterr().err
    assert code == 2 and f"{p}:2:" in err
    assert not (tmp_path / "s").exists()


def test_existing_store_needs_force(tmp_path, capsys):
    p = tmp_path / "a.svm"
    p.write_bytes(SMALL)
    assert main(["ingest", str(p), "--out", str(tmp_path / "s"), "--json", "--non-private"]) == 0
    first = json.loads(capsys.readouterr().out)
    # the public part only: no content hash, no row or non-zero count (statistics of the data)
    assert set(first) == {"store", "name", "n_features", "task", "label_mapping", "schema"}
    before = open_store(tmp_path / "s").dataset_id
    p.write_bytes(b"1 1:9\n-1 2:9\n")
    assert main(["ingest", str(p), "--out", str(tmp_path / "s"), "--non-private"]) == 2
    assert "--force" in capsys.readouterr().err
    assert open_store(tmp_path / "s").dataset_id == before  # untouched
    assert main(["ingest", str(p), "--out", str(tmp_path / "s"), "--force", "--json", "--non-private"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert open_store(tmp_path / "s").dataset_id != before and open_store(tmp_path / "s").nnz == 2
    assert second["name"] != first["name"]  # random public names
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.svm", "s"]


def test_missing_source(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        ingest_svmlight(tmp_path / "nope.svm", tmp_path / "s")


def test_block_size_does_not_change_the_store(shared_data, tmp_path):
    src = shared_data / "libsvm/rcv1_train.binary.head100.svm.xz"
    a = ingest_svmlight(src, tmp_path / "a", block_bytes=1 << 12, memory_bytes=1 << 16)
    b = ingest_svmlight(src, tmp_path / "b")
    assert a["dataset_id"] == b["dataset_id"]
    assert (open_store(tmp_path / "a").csc() != open_store(tmp_path / "b").csc()).nnz == 0


def test_one_record_does_not_recode_the_others(tmp_path, capsys):
    labels = [0, 1] * 100
    # inferred from the data: D + one record with a new label turns the task binary -> regression and
    # recodes every other target, so private use of such a store is refused before any charge
    ingest_svmlight(svmlight_rows(tmp_path / "a.svm", labels), tmp_path / "a", n_features=8)
    ingest_svmlight(svmlight_rows(tmp_path / "b.svm", labels + [2]), tmp_path / "b", n_features=8)  # D + one record
    ya, yb = store_target(open_store(tmp_path / "a")), store_target(open_store(tmp_path / "b"))
    assert not np.array_equal(ya, yb[:-1])
    ledger = str(tmp_path / "ledger.sqlite")
    Accountant(ledger).init_budget(open_store(tmp_path / "a").dataset_id, 5.0, 1e-6)
    code = main(
        [
            "select",
            str(tmp_path / "a"),
            "--method",
            "dp-sis",
            "--k",
            "2",
            "--epsilon",
            "1",
            "--clip",
            "--ledger",
            ledger,
        ]
    )
    assert code == 2 and "--labels" in capsys.readouterr().err and Accountant(ledger).datasets()[0].releases == 0
    # declared (public) classes: the coding of each record is its own; a record outside them is refused
    ingest_svmlight(tmp_path / "a.svm", tmp_path / "a2", n_features=8, task="binary", labels=[0, 1])
    with pytest.raises(ParameterError, match="outside the declared"):
        ingest_svmlight(tmp_path / "b.svm", tmp_path / "b2", n_features=8, task="binary", labels=[0, 1])
    ingest_svmlight(tmp_path / "b.svm", tmp_path / "b3", n_features=8, task="multiclass", labels=[0, 1, 2, 3])
    ingest_svmlight(tmp_path / "a.svm", tmp_path / "a3", n_features=8, task="multiclass", labels=[0, 1, 2, 3])
    ya, yb = store_target(open_store(tmp_path / "a3")), store_target(open_store(tmp_path / "b3"))
    assert np.array_equal(ya, yb[:-1]) and open_store(tmp_path / "a3").meta["schema"] == "declared"


@pytest.mark.parametrize(
    "name, data, says",
    [
        ("empty.svm", b"", "no data rows"),
        ("comments.svm", b"# nothing but a comment\n\n", "no data rows"),
        ("latin1.svm", "1 1:0.5\n-1 1:0.é\n".encode("latin-1"), r":2: malformed svmlight line"),
        ("utf16.svm", "1 1:0.5\n".encode("utf-16"), r":1: malformed svmlight line"),
        ("empty.svm.gz", gzip.compress(b""), "no data rows"),
        ("corrupt.svm.gz", b"not gzip", r"corrupt or truncated \(its gz data"),
        ("truncated.svm.gz", gzip.compress(b"1 1:0.5\n" * 200)[:25], r"corrupt or truncated \(its gz data"),
        ("corrupt.svm.bz2", b"not bzip2", r"corrupt or truncated \(its bz2 data"),
        ("corrupt.svm.xz", b"not xz", r"corrupt or truncated \(its xz data"),
    ],
    ids=lambda v: v if isinstance(v, str) and "." in v and " " not in v else "",
)
def test_an_svmlight_file_that_cannot_be_read_exits_2_in_one_line_and_leaves_no_store(
    tmp_path, capsys, name, data, says
):
    import re

    src = tmp_path / name
    src.write_bytes(data)
    argv = ["ingest", str(src), "--out", str(tmp_path / "new" / "s"), "--n-features", "2", "--zero-based", "no"]
    code = main([*argv, "--task", "binary", "--labels=-1,1"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith(f"dpdist: error: {src}") and re.search(says, line), line
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no store, no temporary, no directory made
