"""Dense tables (CSV, Excel, zipped CSV, R .RData/.rda) -> dpdist stores.

The regression sets of [KLR25] and the microarray sets of [SKDRR24] come as tables, not
svmlight. ``read_table`` turns one into (X, y) with the column conventions of the papers:

* CSV (optionally .xz/.gz/.bz2): header row, target = last column unless ``target`` names
  one. A non-numeric feature column is refused, naming it, unless ``encode=True`` asks for
  category codes 1..K (abalone's sex, as in LIBSVM's abalone).
* R lists ``list(x, y)`` (the datamicroarray package): x is n x p, y a factor -> class codes.
  A bare matrix (galgo's Yeoh ``ALL``, genes x samples) is transposed and its labels are read
  from the sibling ``<name>.classes.rda``.
* Public data files with quirks (the benchmarks' UCI sets) have presets (``PRESETS``), chosen by file name:
  Communities & Crime (no header, "?" = missing, 5 non-predictive columns), Residential
  Building (target = sale price V-9 minus construction cost V-10, the "profit" of [KLR25];
  the 4 date columns dropped), BlogFeedback (``blogData_train.csv`` inside the zip), bodyfat
  (target BodyFat, the 14 LIBSVM features).

Private options: ``categories`` (``--categories COL=a,b,c``) declares a text column's values,
public knowledge: the column becomes one 0/1 column per value and ``COL=other`` for any other value,
each record's own map; ``fill_value`` (``--fill-value 0``) fills gaps with a public constant.
Otherwise missing values are refused unless ``impute="mean"`` is asked for (``--impute mean``):
mean imputation uses column means, a statistic of the data (not private), so it always warns
(``DataDependentWarning``) and the store's metadata says so; like category codes 1..K
(``encode``) it makes a store private analyses refuse, so ``ingest_table`` needs ``private=False``
for it. No preset imputes by itself.

The task: ``task="auto"`` makes a numeric target with exactly two distinct values ``binary``
(0/1, -1/+1, ...), any other numeric target ``regression``, and a text target ``binary`` or
``multiclass`` by its number of categories; ``task=`` forces one (checked against the labels).
"""

from __future__ import annotations

import io
import os
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from dpdist.data.store import feature_schema, write_store
from dpdist.data.svmlight import open_text, undecompressable
from dpdist.data.transforms import DataDependentWarning
from dpdist.exceptions import ParameterError

__all__ = ["PRESETS", "TABLE_SUFFIXES", "Table", "ingest_table", "is_table", "read_table"]

TABLE_SUFFIXES = (".csv", ".data", ".xlsx", ".zip", ".rdata", ".rda")
_COMPRESSIONS = (".xz", ".gz", ".bz2")


_T = TypeVar("_T")


@dataclass
class Table:
    X: np.ndarray
    y: np.ndarray
    feature_names: list[str]
    task: str
    classes: list[str] | None
    notes: dict[str, Any]


PRESETS: dict[str, dict[str, Any]] = {
    "communities.data": {"header": None, "na_values": "?", "drop": [0, 1, 2, 3, 4]},
    "Residential-Building-Data-Set.xlsx": {"residential": True},
    "BlogFeedback.zip": {"member": "blogData_train.csv", "header": None},
    "bodyfat.csv": {"target": "BodyFat"},
}


def _base_name(path: Path) -> str:
    name = path.name
    for c in _COMPRESSIONS:
        if name.lower().endswith(c):
            return name[: -len(c)]
    return name


def is_table(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a table this module reads (by suffix), False for svmlight."""
    return _base_name(Path(path)).lower().endswith(TABLE_SUFFIXES)


def _codes(values: pd.Series | pd.Categorical | np.ndarray) -> tuple[np.ndarray, list[str]]:
    cat = pd.Categorical(values)
    return cat.codes.astype(np.float64), [str(c) for c in cat.categories]


def _one_hot(Xdf: pd.DataFrame, col: Any, declared: list[str]) -> pd.DataFrame:
    """Column ``col`` as one 0/1 column per declared value, and ``col=other`` for any other value
    (a gap is in no column): a public map of each record's own value."""
    values = Xdf[col].astype("string")
    pos = list(Xdf.columns).index(col)
    parts = {f"{col}={v}": (values == v).fillna(False).astype(np.float64) for v in declared}
    parts[f"{col}=other"] = (~values.isin(declared) & values.notna()).astype(np.float64)
    left, right = Xdf.iloc[:, :pos], Xdf.iloc[:, pos + 1 :]
    return pd.concat([left, pd.DataFrame(parts, index=Xdf.index), right], axis=1)


def _frame_to_xy(
    df: pd.DataFrame,
    target: str | int | None,
    drop: list[int],
    impute: str | None,
    source: str,
    encode: bool = False,
    categories: dict[str, list[str]] | None = None,
    fill_value: float | None = None,
) -> Table:
    notes: dict[str, Any] = {}
    if df.shape[0] == 0:  # before the columns' types: an empty column reads as text
        raise ParameterError(f"{source}: no data rows (only a header)")
    if drop:
        df = df.drop(columns=[df.columns[i] for i in drop])
        notes["dropped_columns"] = drop
    tcol = _target_column(df, target, source)
    y_raw = df[tcol]
    if df.shape[1] < 2:
        raise ParameterError(
            f"{source}: no feature column beside the target {tcol!r} (a table's columns are separated by commas)"
        )
    Xdf = _feature_frame(df.drop(columns=[tcol]), source, encode, categories, notes)
    X = Xdf.to_numpy(dtype=np.float64)
    if pd.api.types.is_numeric_dtype(y_raw):
        y, classes = y_raw.to_numpy(dtype=np.float64), None
        task = "auto"  # binary for two distinct values, else regression (resolved by the store writer)
    else:
        y, classes = _codes(y_raw)
        task = "binary" if len(classes) == 2 else "multiclass"
    _check_finite(X, y, Xdf, tcol, source)
    X = _fill_missing(X, y, impute, fill_value, source, notes)
    return Table(X, y, [str(c) for c in Xdf.columns], task, classes, notes)


def _target_column(df: pd.DataFrame, target: str | int | None, source: str) -> Any:
    """The target's column label: ``target`` by name or position, by default the last column."""
    if target is None:
        return df.columns[-1]
    if isinstance(target, int):
        return df.columns[target]
    if target in df.columns:
        return target
    raise ParameterError(f"{source}: target column {target!r} not found; columns are {list(df.columns)[:20]}...")


def _feature_frame(
    Xdf: pd.DataFrame, source: str, encode: bool, categories: dict[str, list[str]] | None, notes: dict[str, Any]
) -> pd.DataFrame:
    """The feature columns, all numeric: declared categories one-hot, other text columns coded
    (``encode``) or refused; what was done goes to ``notes``."""
    for col, declared in (categories or {}).items():  # declared categories: public one-hot columns
        if col not in Xdf.columns:
            raise ParameterError(
                f"{source}: --categories names column {col!r}, which the file does not have; its "
                f"feature columns are {[str(c) for c in Xdf.columns][:20]}"
            )
        Xdf = _one_hot(Xdf, col, [str(v) for v in declared])
        notes.setdefault("declared_categories", {})[str(col)] = [str(v) for v in declared]
    for i, col in enumerate(Xdf.columns):  # by position: some files repeat a column name (Residential's lags)
        column = Xdf.iloc[:, i]
        if not pd.api.types.is_numeric_dtype(column):
            if not encode:
                raise ParameterError(
                    f"{source}: column {col!r} is not numeric; declare its categories (public "
                    f"knowledge: --categories {col}=a,b,c; other values get a column "
                    f"{col}=other), or encode it in the file"
                )
            codes, cats = _codes(column)
            Xdf.isetitem(i, codes + 1.0)
            notes.setdefault("category_codes", {})[str(col)] = {c: k + 1 for k, c in enumerate(cats)}
    return Xdf


def _check_finite(X: np.ndarray, y: np.ndarray, Xdf: pd.DataFrame, tcol: Any, source: str) -> None:
    """Refuse an infinite feature or target value, naming where the first one is."""
    for values, what in ((X, "a feature"), (y[:, None], "the target")):
        bad = np.isinf(values)
        if bad.any():  # where to look (the first place), as a parser names a line; no count of the data
            row, at = (int(v[0]) for v in np.nonzero(bad))
            column = Xdf.columns[at] if what == "a feature" else tcol
            raise ParameterError(
                f"{source}: an infinite value in {what} column {column!r} (the first in data row "
                f"{row + 1}); values must be finite numbers"
            )


def _fill_missing(
    X: np.ndarray, y: np.ndarray, impute: str | None, fill_value: float | None, source: str, notes: dict[str, Any]
) -> np.ndarray:
    """X with its missing values filled by the public ``fill_value`` (or, with ``impute="mean"``,
    the column means: not private, warned); a missing target is refused."""
    missing = np.isnan(X)
    if np.isnan(y).any():
        first = int(np.flatnonzero(np.isnan(y))[0])  # where to look, as a parser names a line; no count of the data
        raise ParameterError(
            f"{source}: the target column has missing values (the first in data row {first + 1}); "
            "drop or fill those rows before ingesting"
        )
    if fill_value is not None:  # a public constant: each record's gaps alone
        X = np.where(missing, float(fill_value), X)
        # recorded as declared, gaps or none: the store and every model trained on it (their schema) must
        # not tell whether a training record had a gap
        notes["fill_value"] = float(fill_value)
    elif missing.any():
        if impute != "mean":
            raise ParameterError(
                f"{source}: missing feature values; fill them with a public constant (--fill-value "
                "0: each record's gaps alone, private), or clean the file"
            )
        warnings.warn(
            f"{source}: missing feature values set to column means: a statistic of the whole data set, "
            "not differentially private",
            DataDependentWarning,
            stacklevel=4,  # the warning points at read_table's caller (via _frame_to_xy and read_table)
        )
        means = np.nanmean(X, axis=0)
        X = np.where(missing, means, X)
        notes["imputation"] = "missing values set to column means (data-dependent, not private)"
    return X


def _read_rdata(path: Path) -> Table:
    import rdata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Unknown encoding. Assumed ASCII."
        objs = rdata.read_rda(str(path))
    obj = next(iter(objs.values()))
    if isinstance(obj, dict) and "x" in obj and "y" in obj:
        X = np.asarray(obj["x"], dtype=np.float64)
        y, classes = _codes(obj["y"])
        names = (
            [str(v) for v in obj["x"].coords[obj["x"].dims[1]].values]
            if hasattr(obj["x"], "coords") and obj["x"].dims[1] in obj["x"].coords
            else [str(j) for j in range(X.shape[1])]
        )
        notes: dict[str, Any] = {}
    else:  # a bare genes x samples matrix with labels in <name>.classes.rda
        X = np.asarray(obj, dtype=np.float64).T
        stem = _base_name(path).rsplit(".", 1)[0]
        labels_path = path.with_name(f"{stem}.classes.rda")
        if not labels_path.is_file():
            raise ParameterError(f"{path}: a bare matrix needs its labels in {labels_path.name}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lab = next(iter(rdata.read_rda(str(labels_path)).values()))
        y, classes = _codes(lab)
        names = [str(j) for j in range(X.shape[1])]
        notes = {"transposed": "genes x samples -> samples x genes", "labels": labels_path.name}
    if y.shape[0] != X.shape[0]:
        raise ParameterError(f"{path}: the numbers of rows and of labels differ")
    return Table(X, y, names, "binary" if len(classes) == 2 else "multiclass", classes, notes)


def _read_frame(
    path: Path, low: str, preset: dict[str, Any], text: list[str] | None = None
) -> tuple[pd.DataFrame, str | None]:
    """(the file's table as pandas reads it, the zip member read or None): an Excel sheet, a zip's CSV
    member or a CSV (plain or compressed); the presets' own layouts. The ``text`` columns (declared
    categories) are read as each record's own text: a type guessed from the whole column would make one
    record's value change how the others' read (a gap anywhere turns "2" into "2.0", an "0A" keeps "01")."""
    dtype = {c: str for c in text} if text else None
    if preset.get("residential"):
        df = pd.read_excel(path, header=[0, 1])
        df.columns = [c[1] for c in df.columns]
        return df, None
    if low.endswith(".xlsx"):
        return pd.read_excel(path, dtype=dtype), None
    if low.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.namelist() if m.lower().endswith(".csv")]
            member = preset.get("member") or (members[0] if len(members) == 1 else None)
            if member is None:
                raise ParameterError(f"{path}: the zip holds {len(members)} CSV files; no preset says which to read")
            try:
                return pd.read_csv(
                    io.BytesIO(z.read(member)), header=preset.get("header", "infer"), dtype=dtype
                ), member
            except UnicodeDecodeError:
                raise _not_utf8(z.read(member), f"{path} ({member})") from None
    return pd.read_csv(path, header=preset.get("header", "infer"), na_values=preset.get("na_values"), dtype=dtype), None


def _not_utf8(raw: bytes, where: str) -> ParameterError:
    """The refusal of text that is not UTF-8, naming the line and byte of its first invalid sequence."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        at = f"{where}:{line}: byte {column} of the line (byte {e.start + 1} of its text)"
    else:  # pandas decodes in its own pieces; the whole text decodes: no position to name
        at = where
    return ParameterError(
        f"{at} is not UTF-8 text; save the file as UTF-8 (a Latin-1 file: iconv -f latin1 -t utf-8 IN > OUT)"
    )


def _unreadable(path: Path, e: BaseException) -> ParameterError | None:
    """One line for a file its reader cannot parse (empty, corrupt, truncated, another format), naming the
    file and the kind of failure (never a value of the data); None for a failure of the machine (an
    ``OSError`` with an errno: main's one line) or of dpdist."""
    if isinstance(e, OSError) and e.errno is not None:
        return None
    if isinstance(e, pd.errors.EmptyDataError):
        return ParameterError(f"{path}: empty: no header and no data rows")
    if isinstance(e, pd.errors.ParserError):  # pandas names the line and its number of fields, never a value
        return ParameterError(f"{path}: not a well-formed table: {str(e).strip().splitlines()[-1]}")
    refusal = undecompressable(path, e)
    if refusal is not None:
        return refusal
    low = _base_name(path).lower()
    if low.endswith((".xlsx", ".rdata", ".rda")):  # their readers raise many kinds on a file of another format
        kind = "Excel workbook (.xlsx)" if low.endswith(".xlsx") else "R data file (.RData/.rda)"
        return ParameterError(f"{path}: not a readable {kind} ({type(e).__name__})")
    return None


def _refusing(path: Path, read: Callable[[], _T]) -> _T:
    """``read()`` of the file at ``path``, a file it cannot read as its suffix says raised as a ParameterError
    naming it (not UTF-8: the line and byte; empty, corrupt, truncated, of another format)."""
    try:
        return read()
    except UnicodeDecodeError:
        with open_text(path) as f:
            raise _not_utf8(f.read(), str(path)) from None
    except ParameterError:
        raise
    except Exception as e:
        refusal = _unreadable(path, e)
        if refusal is None:
            raise
        raise refusal from None


def read_table(
    path: str | os.PathLike[str],
    target: str | int | None = None,
    impute: str | None = None,
    encode: bool = False,
    categories: dict[str, list[str]] | None = None,
    fill_value: float | None = None,
) -> Table:
    """Read a table into (X, y) with the conventions of the module docstring (``categories``: declared
    values per column, one-hot; ``fill_value``: a public constant for gaps).

    A file that cannot be read as its suffix says -- empty, only a header, not UTF-8 (the line and byte
    named), corrupt or truncated, of another format -- raises a ParameterError naming it."""
    if impute not in (None, "mean"):
        raise ParameterError(f"impute must be None or 'mean', got {impute!r}")
    path = Path(path)
    if not path.is_file():
        raise ParameterError(f"input file {path} does not exist")
    base = _base_name(path)
    preset = dict(PRESETS.get(base, {}))
    target = target if target is not None else preset.get("target")
    if base.lower().endswith((".rdata", ".rda")):
        return _refusing(path, lambda: _read_rdata(path))
    text = list(categories or {})
    df, member = _refusing(path, lambda: _read_frame(path, base.lower(), preset, text))
    if preset.get("residential"):
        df = df.copy().drop(columns=["START YEAR", "START QUARTER", "COMPLETION YEAR", "COMPLETION QUARTER"])
        df["PROFIT"] = df.pop("V-9") - df.pop("V-10")
        table = _frame_to_xy(df, "PROFIT", [], impute, str(path), encode, categories, fill_value)
        table.notes["target"] = "profit = V-9 (sale price) - V-10 (construction cost)"
        return table
    table = _frame_to_xy(df, target, preset.get("drop", []), impute, str(path), encode, categories, fill_value)
    if member is not None and "member" in preset:
        table.notes["member"] = preset["member"]
    return table


def read_new_rows(path: str | os.PathLike[str], schema: dict[str, Any]) -> np.ndarray:
    """A table's new rows (a label column or not) read as a model's training rows were, by the public schema
    it recorded from a table ingested without a Table Schema (:func:`dpdist.released.table_schema`): its
    declared categories one-hot, gaps filled by its declared fill value, the columns in its feature order.
    A column it needs that the file lacks, a text column it did not declare, an infinite value or a gap
    without a declared fill value raise a ParameterError naming the file and the column."""
    path = Path(path)
    if not path.is_file():
        raise ParameterError(f"input file {path} does not exist")
    base = _base_name(path)
    text = list(schema.get("categories") or {})
    df, _ = _refusing(path, lambda: _read_frame(path, base.lower(), dict(PRESETS.get(base, {})), text))
    df.columns = [str(c) for c in df.columns]
    if len(set(df.columns)) < len(df.columns):
        raise ParameterError(f"{path}: two columns have one name; the model's columns are found by name")
    names = [str(n) for n in schema.get("feature_names") or []]
    categories = schema.get("categories") or {}
    for col in categories:
        if col not in df.columns:
            raise ParameterError(f"{path}: no column {col!r}, whose categories the model declares")
    kept = [c for c in df.columns if c in names or c in categories]  # a label or another column is left out
    for col in kept:
        if col not in categories and not pd.api.types.is_numeric_dtype(df[col]):
            raise ParameterError(f"{path}: column {col!r} is not numeric (the model took it as a number)")
    Xdf = _feature_frame(df[kept], str(path), False, categories, {})  # as ingest made the training rows
    if len(set(Xdf.columns)) < len(Xdf.columns):  # a column named as a category's one-hot column, say
        raise ParameterError(f"{path}: two columns have one name; the model's columns are found by name")
    absent = [n for n in names if n not in Xdf.columns]
    if absent:
        raise ParameterError(f"{path}: no column {absent[0]!r} of the model's {len(names)} feature columns")
    Xdf = Xdf[names]
    X: np.ndarray = Xdf.to_numpy(dtype=np.float64)
    _check_finite(X, np.zeros(X.shape[0]), Xdf, None, str(path))
    fill = schema.get("fill_value")
    missing = np.isnan(X)
    if missing.any():
        if fill is None:
            at = int(np.flatnonzero(missing.any(axis=1))[0])
            raise ParameterError(
                f"{path}: a missing value in data row {at + 1}, and the model declares no fill value "
                "(its store was ingested without --fill-value): fill it before predicting"
            )
        X = np.where(missing, float(fill), X)
    return X


def ingest_table(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    force: bool = False,
    target: str | int | None = None,
    impute: str | None = None,
    encode: bool = False,
    task: str = "auto",
    name: str | None = None,
    labels: list[Any] | None = None,
    categories: dict[str, list[str]] | None = None,
    fill_value: float | None = None,
    private: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Read a table and write it as a store (public ``name``: default random); returns its metadata.

    A table declared by a Table Schema is ingested by :func:`dpdist.data.table_schema.ingest_declared`.

    ``task`` forces the task (``auto``: as the module docstring says); the labels must fit it.
    ``private`` (the default) refuses, before writing, a table whose columns would be inferred from the
    data (category codes or mean imputation): private analyses refuse such a store.
    ``progress(rows_written, rows)`` is called after each block is written (the operator's own view).
    """
    table = read_table(src, target=target, impute=impute, encode=encode, categories=categories, fill_value=fill_value)
    if private and feature_schema({"table_notes": table.notes}) != "declared":
        raise ParameterError(
            f"{src}: coding categories or filling gaps from whole columns makes each record's "
            "columns depend on the others, and private analyses would refuse this store: declare "
            "the categories (--categories COL=a,b,c) and fill gaps with a constant (--fill-value 0), "
            "or pass --non-private for a store meant for non-private experiments only"
        )
    if task != "auto":
        table.task = task
    meta = {
        "classes": table.classes,
        "feature_names": table.feature_names,
        "source": str(Path(src).resolve()),
        "table_notes": table.notes,
        "name": name,
        # coded categories and imputed gaps are functions of whole columns: one record changes the others'
        "feature_schema": feature_schema({"table_notes": table.notes}),
    }
    declared = None
    if labels is not None:  # public classes, by name for a text target (its codes follow the sorted names)
        if table.classes is not None:
            names = [str(v) for v in labels]
            if not set(table.classes) <= set(names):
                raise ParameterError(f"{src}: the data has labels outside the declared ones {names}")
            codes = {c: i for i, c in enumerate(sorted(names))}
            table.y = np.asarray([codes[table.classes[int(c)]] for c in table.y], dtype=np.float64)
            meta["classes"] = sorted(names)
            declared = [float(i) for i in range(len(names))]
        else:
            declared = [float(v) for v in labels]
    return write_store(
        out,
        table.X,
        table.y,
        task=table.task if task == "auto" and labels is None else task,
        force=force,
        metadata=meta,
        labels=declared,
        progress=progress,
    )
