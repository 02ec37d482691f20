"""A released model's record, self-contained: the whole matrix's columns and the user's labels.

A model fitted on some columns of a store (a selection's) records its weights in the store's own
columns, with the store's width (``widen``): ``from_release(record).predict(X)`` then takes the
user's whole matrix. A classifier fitted through the CLI or a run records the store's declared labels
as its classes (``user_labels``): its predictions come back in the user's labels (0/1, names), not in
the -1/+1 codes the solvers work in. Both are public: the columns a release chose and the schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpdist.privacy.ledger.artefacts import expand

__all__ = ["from_table", "model_result", "table_schema", "user_labels", "widen"]


def model_result(record: dict[str, Any]) -> Any:
    """A released model's result from its ``record`` (a ledger record, an export, or the bare result),
    its weights read from their artefact, the SHA-256 its row holds checked, when the record refers to
    one (a ledger row's result: :mod:`dpdist.privacy.ledger.artefacts`, where it was written)."""
    return expand(record.get("result", record), None)


def table_schema(meta: dict[str, Any]) -> dict[str, Any] | None:
    """A store's public schema, as a released model records it to read new records the same way and
    to name its weights as the source file does: a table's feature names, declared categories and
    fill value, or its whole declared Table Schema (``table_schema``); an svmlight file's index base
    (``index_base``: 1 for LIBSVM's one-based files, whose index i is store column i - 1); None for
    other stores (synthetic sets, matrices)."""
    meta = {**(meta.get("source_meta") or {}), **meta}  # a split half keeps its source's ingest facts
    notes = meta.get("table_notes")
    if notes is None:
        if "zero_based" not in meta:
            return None
        return {"index_base": 0 if meta["zero_based"] is not False else 1}
    if meta.get("table_schema") is not None:  # a declared Table Schema: new rows read by it, and only by it
        return {"feature_names": meta.get("feature_names"), "table_schema": meta["table_schema"]}
    return {
        "feature_names": meta.get("feature_names"),
        "categories": notes.get("declared_categories"),
        "fill_value": notes.get("fill_value"),
    }


def from_table(meta: dict[str, Any]) -> bool:
    """Whether a store's rows came from a table (a CSV, Parquet or declared Table Schema ingest): a
    public fact of its ingest, never of its values. The default learner takes such rows as a dense
    table (``dpdist.gradient_models.default_learner``: the small-wide-table rule)."""
    return "feature_names" in (table_schema(meta) or {})


def widen(
    result: dict[str, Any], columns: Sequence[int] | None, n_columns: int | None, schema: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``result`` of a fit on the matrix's columns ``columns`` (of ``n_columns``) stated in all its
    columns: the weights' indices, a Frank-Wolfe path's signed one-based vertices and its screening
    events mapped, ``n_features`` the whole width. ``schema``: the data's public schema the model
    needs to read new records (a table's declared categories and fill value, its column names)."""
    if schema:
        result = {**result, "schema": schema}
    if columns is None:
        return result
    cols = np.asarray(columns, dtype=np.int64)
    out = {
        **result,
        "indices": cols[np.asarray(result["indices"], dtype=np.int64)].tolist(),
        "n_features": int(n_columns if n_columns is not None else cols.max() + 1),
    }
    if result.get("path"):
        out["path"] = [int(np.sign(v)) * (int(cols[abs(v) - 1]) + 1) for v in result["path"]]
    if result.get("screened"):
        out["screened"] = [[int(t), int(cols[j])] for t, j in result["screened"]]
    return out


def user_labels(store: Any) -> tuple[np.ndarray, list[Any]]:
    """(each record's label as the user wrote it, the two classes in the store's public order) of a
    binary store: a table's class names, or the labels an svmlight file (or matrix) declared."""
    mapping = store.meta.get("label_mapping") or {}
    codes = np.searchsorted(np.array(sorted(float(v) for v in mapping)), np.asarray(store.y, dtype=np.float64))
    names = store.meta.get("classes")
    if names:  # a table's text labels: the codes follow the sorted names
        classes: list[Any] = [str(v) for v in names]
    else:
        classes = [float(v) for v in sorted(float(v) for v in mapping)]
    return np.asarray(classes, dtype=object if names else np.float64)[codes], classes
