"""Every non-svmlight file in ../shared/data ingests, with the shapes the seeds report."""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from terminal import on_a_terminal

from dpdist.cli import main
from dpdist.data import open_store
from dpdist.data.tables import ingest_table, is_table, read_table
from dpdist.data.transforms import DataDependentWarning
from dpdist.exceptions import ParameterError

# file -> (n, d, task) from ../shared/data/README.md and seed 001 Table 2 / seed 003 Table 1
TABLES = {
    "regression/abalone.csv.xz": (4177, 8, "regression"),
    "regression/bodyfat.csv.xz": (252, 14, "regression"),
    "regression/pyrim.csv.xz": (74, 26, "regression"),
    "regression/triazines.csv.xz": (186, 60, "regression"),
    "regression/communities.data.xz": (1994, 122, "regression"),
    "regression/Residential-Building-Data-Set.xlsx": (372, 103, "regression"),
    "regression/BlogFeedback.zip": (52397, 280, "regression"),
    "microarray/alon.RData": (62, 2000, "binary"),
    "microarray/borovecki.RData": (31, 22283, "binary"),
    "microarray/chowdary.RData": (104, 22283, "binary"),
    "microarray/christensen.RData": (217, 1413, "multiclass"),
    "microarray/golub.RData": (72, 7129, "binary"),
    "microarray/gordon.RData": (181, 12533, "binary"),
    "microarray/gravier.RData": (168, 2905, "binary"),
    "microarray/khan.RData": (63, 2308, "multiclass"),
    "microarray/nakayama.RData": (105, 22283, "multiclass"),
    "microarray/pomeroy.RData": (60, 7128, "binary"),
    "microarray/shipp.RData": (77, 7129, "binary"),
    "microarray/singh.RData": (102, 12600, "binary"),
    "microarray/sorlie.RData": (85, 456, "multiclass"),
    "microarray/su.RData": (102, 5565, "multiclass"),
    "microarray/subramanian.RData": (50, 10100, "binary"),
    "microarray/west.RData": (49, 7129, "binary"),
    "microarray/galgo_yeoh_ALL.rda": (233, 2435, "multiclass"),
}


def test_every_shared_file_is_covered(shared_data):
    files = {str(p.relative_to(shared_data)) for p in shared_data.rglob("*") if p.is_file()}
    svm = {f for f in files if ".svm" in f}
    docs = {"README.md", "regression/communities.names.xz", "microarray/galgo_yeoh_ALL.classes.rda"}
    assert files - svm - docs == set(TABLES)
    assert all(is_table(shared_data / f) for f in TABLES) and not any(is_table(shared_data / f) for f in svm)


# what a user must ask for explicitly: Communities' missing values, Abalone's text column
OPTIONS = {"regression/communities.data.xz": {"impute": "mean"}, "regression/abalone.csv.xz": {"encode": True}}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_table_ingests(shared_data, tmp_path, name):
    n, d, task = TABLES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataDependentWarning)
        meta = ingest_table(shared_data / name, tmp_path / "s", private=name not in OPTIONS, **OPTIONS.get(name, {}))
    store = open_store(tmp_path / "s")
    assert store.shape == (n, d) and meta["task"] == task == store.task
    assert np.all(np.isfinite(store.csr().data)) and store.y.shape == (n,)


def test_values_match_the_source(shared_data, tmp_path):
    df = pd.read_csv(shared_data / "regression/pyrim.csv.xz")
    ingest_table(shared_data / "regression/pyrim.csv.xz", tmp_path / "p")
    s = open_store(tmp_path / "p")
    np.testing.assert_array_equal(s.csr().toarray(), df.iloc[:, :-1].to_numpy())
    np.testing.assert_array_equal(s.y, df["y"].to_numpy())

    import rdata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alon = rdata.read_rda(str(shared_data / "microarray/alon.RData"))["alon"]
    ingest_table(shared_data / "microarray/alon.RData", tmp_path / "a")
    a = open_store(tmp_path / "a")
    np.testing.assert_array_equal(a.csr().toarray(), np.asarray(alon["x"], dtype=float))
    assert a.meta["classes"] == ["n", "t"] and a.y.tolist() == [float(v == "t") for v in alon["y"]]


def test_data_dependent_preprocessing_only_when_asked_and_always_with_the_warning(shared_data):
    with pytest.raises(ParameterError, match="--fill-value 0"):  # no preset imputes silently
        read_table(shared_data / "regression/communities.data.xz")
    with pytest.warns(DataDependentWarning, match="column means"):
        t = read_table(shared_data / "regression/communities.data.xz", impute="mean")
    assert "data-dependent" in t.notes["imputation"]
    r = read_table(shared_data / "regression/Residential-Building-Data-Set.xlsx")
    assert "V-9" in r.notes["target"]
    with pytest.raises(ParameterError, match="'Gender' is not numeric.*--categories Gender=a,b,c"):
        read_table(shared_data / "regression/abalone.csv.xz")
    declared = read_table(shared_data / "regression/abalone.csv.xz", categories={"Gender": ["F", "I", "M"]})
    assert declared.feature_names[:4] == ["Gender=F", "Gender=I", "Gender=M", "Gender=other"]
    ab = read_table(shared_data / "regression/abalone.csv.xz", encode=True)
    assert ab.notes["category_codes"]["Gender"] == {"F": 1, "I": 2, "M": 3}


def test_a_numeric_two_valued_target_is_binary_and_task_is_honoured(tmp_path, capsys):
    p = tmp_path / "b.csv"
    p.write_text("a,b,y\n0.1,0.2,0\n0.3,0.1,1\n0.5,0.4,1\n0.2,0.9,0\n")
    assert ingest_table(p, tmp_path / "s")["task"] == "binary"
    assert ingest_table(p, tmp_path / "r", task="regression")["task"] == "regression"
    assert main(["ingest", str(p), "--out", str(tmp_path / "c"), "--task", "regression", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["task"] == "regression"
    with pytest.raises(ParameterError, match="exactly 2"):
        ingest_table(tmp_path / "b.csv", tmp_path / "x", target="a", task="binary")


def test_table_ingest_reports_its_progress(tmp_path):
    """The writer calls progress(rows written, rows) after each block; the CLI draws it as a bar on a
    terminal (the operator's own view of their data)."""
    p = tmp_path / "p.csv"
    rng = np.random.default_rng(0)
    pd.DataFrame({"a": rng.normal(size=2500), "b": rng.normal(size=2500), "y": np.arange(2500) % 2}).to_csv(
        p, index=False
    )
    seen: list[tuple[int, int]] = []
    from dpdist.data.store import write_store

    table = read_table(p)
    write_store(tmp_path / "w", table.X, table.y, block_rows=1000, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1000, 2500), (2000, 2500), (2500, 2500)]
    seen.clear()
    ingest_table(p, tmp_path / "s", progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1] == (2500, 2500)
    argv = [sys.executable, "-m", "dpdist.cli", "ingest", str(p), "--out", str(tmp_path / "c")]
    out = on_a_terminal(argv, {**os.environ, "COLUMNS": "120"})
    assert "ingest p.csv" in out and "2500/2500" in out


def test_missing_values_refused_without_impute(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("a,b,y\n1,,3\n2,5,6\n")
    with pytest.raises(ParameterError, match="missing feature values"):
        read_table(p)
    with pytest.warns(DataDependentWarning):
        assert read_table(p, impute="mean").X.tolist() == [[1.0, 5.0], [2.0, 5.0]]
    with pytest.raises(ParameterError, match="target column 'zz' not found"):
        read_table(p, target="zz", impute="mean")


def test_a_missing_target_names_where_not_how_many(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("a,y\n1,3\n2,\n3,\n4,1\n5,\n")
    with pytest.raises(ParameterError, match="target column has missing values") as e:
        read_table(p)
    assert "data row 2" in str(e.value) and "3" not in str(e.value).replace(str(p), "")  # no count of the data


def test_cli_ingests_tables(shared_data, tmp_path, capsys):
    assert (
        main(
            [
                "ingest",
                str(shared_data / "regression/housing_scale.svm.xz"),
                "--out",
                str(tmp_path / "h"),
                "--n-features",
                "13",
                "--task",
                "regression",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["ingest", str(shared_data / "microarray/west.RData"), "--out", str(tmp_path / "w"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n_features"], out["task"]) == (7129, "binary") and open_store(out["store"]).shape[0] == 49


def _gz(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data)


def _zip(member: bytes) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("t.csv", member)
    return buf.getvalue()


# (file name, its bytes, what the one line must say)
BAD_TABLES = [
    ("empty.csv", b"", r"empty: no header and no data rows"),
    ("blank.csv", b"\n\n\n", r"empty: no header and no data rows"),
    ("header.csv", b"age,income,y\n", r"no data rows \(only a header\)"),
    (
        "latin1.csv",
        "age,town,y\n1,Köln,0\n2,Zürich,1\n".encode("latin-1"),
        r"latin1\.csv:2: byte 4 of the line \(byte 15 of its text\) is not UTF-8",
    ),
    ("latin1.csv.gz", _gz("a,y\n1,0\n2,é\n".encode("latin-1")), r"latin1\.csv\.gz:3: byte 3 .* not UTF-8"),
    ("latin1.zip", _zip("a,y\n1,é\n".encode("latin-1")), r"latin1\.zip \(t\.csv\):2: byte 3 .* not UTF-8"),
    ("target-only.csv", b"y\n1\n2\n", r"no feature column beside the target 'y'"),
    ("semicolons.csv", b"a;y\n1;0\n2;1\n", r"no feature column beside the target 'a;y'"),
    ("ragged.csv", b"a,y\n1,0\n2,1,3\n", r"not a well-formed table: .*line 3"),
    ("corrupt.csv.gz", b"not gzip at all", r"corrupt or truncated \(its gz data"),
    ("truncated.csv.gz", _gz(b"a,y\n" + b"1,0\n" * 100)[:30], r"corrupt or truncated \(its gz data"),
    ("corrupt.csv.bz2", b"not bzip2", r"corrupt or truncated \(its bz2 data"),
    ("corrupt.csv.xz", b"not xz", r"corrupt or truncated \(its xz data"),
    ("empty.zip", b"", r"corrupt or truncated \(its zip data"),
    ("empty-member.zip", _zip(b""), r"empty: no header and no data rows"),
    ("empty.xlsx", b"", r"not a readable Excel workbook"),
    ("csv-named.xlsx", b"a,y\n1,0\n", r"not a readable Excel workbook"),
    ("empty.rda", b"", r"not a readable R data file"),
]


@pytest.mark.parametrize("name, data, says", BAD_TABLES, ids=[b[0] for b in BAD_TABLES])
def test_a_table_that_cannot_be_read_exits_2_in_one_line_naming_it_and_leaves_no_store(
    tmp_path, capsys, name, data, says
):
    import re

    src = tmp_path / name
    src.write_bytes(data)
    code = main(["ingest", str(src), "--out", str(tmp_path / "new" / "s"), "--task", "regression"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith(f"dpdist: error: {src}") and re.search(says, line), line
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no store, no temporary, no directory made
    with pytest.raises(ParameterError, match=says):  # the library says the same
        read_table(src)


def test_a_declared_fill_value_is_recorded_whether_or_not_the_table_had_gaps(tmp_path) -> None:
    """The store's schema (and every model trained on it) records the declared fill value alike for a table
    with gaps and one without: recorded only after a gap was met, it told whether a training record had one."""
    from dpdist.released import table_schema

    schemas = []
    for text in ("a,b,y\n1,2,0\n3,4,1\n", "a,b,y\n1,,0\n3,4,1\n"):
        (tmp_path / "t.csv").write_text(text)
        meta = ingest_table(tmp_path / "t.csv", tmp_path / f"s{len(schemas)}", fill_value=0.0, task="binary")
        schemas.append(table_schema(meta))
    assert schemas[0] == schemas[1] and schemas[0]["fill_value"] == 0.0


def test_a_declared_category_column_reads_each_record_on_its_own(tmp_path) -> None:
    """A declared category column is each record's own text: its type guessed from the whole column made one
    record's gap turn every other record's "2" into "2.0" (then 'other'), changing the others' features."""
    rows = []
    for text in ("a,c,y\n1,2,0\n2,1,1\n3,2,0\n", "a,c,y\n1,2,0\n2,1,1\n3,,0\n"):
        (tmp_path / "t.csv").write_text(text)
        rows.append(read_table(tmp_path / "t.csv", categories={"c": ["1", "2"]}, fill_value=0.0).X[:2])
    np.testing.assert_array_equal(rows[0], rows[1])
    np.testing.assert_array_equal(rows[0][0], [1.0, 0.0, 1.0, 0.0])  # a = 1, c = 2
    (tmp_path / "t.csv").write_text("a,c,y\n1,01,0\n2,02,1\n")  # declared "01": never read as the number 1
    np.testing.assert_array_equal(read_table(tmp_path / "t.csv", categories={"c": ["01", "02"]}).X[:, 1:3], np.eye(2))


@pytest.mark.parametrize(
    ("csv", "message"),
    [
        ("age,city\n30,a\n", "no column 'color', whose categories the model declares"),
        ("age,color,city\n30,red,a\n", "column 'city' is not numeric \\(the model took it as a number\\)"),
        ("age,color,color=red\n30,red,1\n", "two columns have one name"),
    ],
)
def test_new_rows_are_refused_in_the_words_of_predict(tmp_path, csv, message):
    """read_new_rows names a predict-time fault as one (no --categories is given there), and a column named
    as a declared category's one-hot column is refused, not read twice."""
    from dpdist.data.tables import read_new_rows

    (tmp_path / "new.csv").write_text(csv)
    schema = {"feature_names": ["age", "color=red", "color=other", "city"], "categories": {"color": ["red"]}}
    with pytest.raises(ParameterError, match=message):
        read_new_rows(tmp_path / "new.csv", schema)
