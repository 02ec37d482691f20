"""What a store's labels and columns mean, and whether they are public: the task and class codes, the
feature schema (declared or inferred), the source file's own column ids, and the check that refuses private
use of a store whose coding was inferred from its data."""

from __future__ import annotations

from typing import Any

from dpdist.data.store.format import TASKS
from dpdist.exceptions import ParameterError

__all__ = [
    "MAX_TRACKED_LABELS",
    "check_schema",
    "check_task",
    "column_ids",
    "columns_named",
    "feature_schema",
    "label_mapping",
    "schema",
]

MAX_TRACKED_LABELS = 1000


def check_task(task: str) -> str:
    if task not in TASKS:
        raise ParameterError(f"task must be one of {TASKS}, got {task!r}")
    return task


def label_mapping(
    labels: list[float] | None, task: str, source: str, declared: list[float] | None = None
) -> tuple[str, dict[str, int] | None]:
    """Resolve ``task`` and return (task, mapping label -> class code).

    With ``declared`` labels (public: given by the user, not read from the data) the classes are
    those, whatever the data holds, and a label outside them is refused. Otherwise ``auto`` is
    binary for exactly two distinct labels seen, else regression. Codes follow ascending label order.
    """
    check_task(task)
    if declared is not None:
        classes = sorted({float(v) for v in declared})
        if task == "auto":
            task = "binary" if len(classes) == 2 else "multiclass"
        if task == "regression" or len(classes) < 2 or (task == "binary" and len(classes) != 2):
            raise ParameterError(f"{source}: declared labels {classes} do not fit task={task}")
        if labels is None or not set(map(float, labels)) <= set(classes):
            raise ParameterError(f"{source}: the data has labels outside the declared ones {classes}")
        return task, {repr(v): i for i, v in enumerate(classes)}
    if task == "auto":
        task = "binary" if labels is not None and len(labels) == 2 else "regression"
    if task == "regression":
        return task, None
    if labels is None:
        raise ParameterError(f"{source}: more than {MAX_TRACKED_LABELS} distinct labels; not a {task} task")
    if task == "binary" and len(labels) != 2:
        raise ParameterError(f"{source}: task=binary needs exactly 2 distinct labels, and the data has another number")
    return task, {repr(float(v)): i for i, v in enumerate(labels)}


def schema(task: str, declared: list[float] | None) -> str:
    """ "declared" when the task and the classes are the user's (public), "inferred" when read from the data."""
    return "declared" if declared is not None or task == "regression" else "inferred"


def feature_schema(meta: dict[str, Any]) -> str:
    """ "declared" when a store's columns are a public, per-record map of each record's own features
    (the number of features and the svmlight index base given by the user, a table's columns
    taken as they are), "inferred" when they depend on other records (the number of features
    read as the largest index seen, the index base guessed from whether a 0 occurs, categories
    coded or gaps filled from the whole column).

    Stores written before this was recorded (no ``feature_schema`` key) are read as: svmlight
    ingests (and their split halves) inferred, since whether their indexing was declared was not
    kept; tables inferred when their notes record category codes or imputation; split halves
    inferred unless their source was synthetic (what else their source was is not kept); the
    rest -- synthetic sets, matrices written through ``write_store`` -- declared, their columns
    being the caller's."""
    if "feature_schema" in meta:
        return str(meta["feature_schema"])
    notes = meta.get("table_notes")
    if notes is not None:
        return "inferred" if ("category_codes" in notes or "imputation" in notes) else "declared"
    if "zero_based" in meta or "source_text_bytes" in meta:  # an svmlight ingest
        return "inferred"
    if "split_of" in meta:  # a split half: declared only when its source was synthetic (its notes were not kept)
        return "declared" if (meta.get("source_meta") or {}).get("synthetic") is not None else "inferred"
    return "declared"


def column_ids(meta: dict[str, Any], columns: Any) -> dict[str, Any]:
    """The source file's own identities of store columns (public: the schema): a table's column names,
    or an svmlight file's indices in its own base (LIBSVM files are one-based: store column 0 is the
    file's index 1). ``{"index_base": 0 | 1 | None, "ids": [...]}``, plus ``"names"`` for a table;
    ``index_base`` is None when the store does not record a file's base (a synthetic store, a split
    half made before splits kept it): its ids are then the store's own columns."""
    cols = [int(j) for j in columns]
    source = meta.get("source_meta") or {}  # a split half: its source's facts
    names = meta.get("feature_names") or source.get("feature_names")
    zero_based = meta.get("zero_based", source.get("zero_based"))
    base = None if zero_based is None else (0 if zero_based is not False else 1)
    out: dict[str, Any] = {"index_base": base, "ids": [j + (base or 0) for j in cols]}
    if names:
        out["names"] = [str(names[j]) for j in cols]
    return out


def columns_named(ids: dict[str, Any]) -> str:
    """How :func:`column_ids`' ids are to be read, in words: "columns" (a table's names), "the file's
    one-based indices", or "store columns" when the store does not record its file's base."""
    if "names" in ids:
        return "columns"
    base = ids.get("index_base")
    return "store columns" if base is None else f"the file's {'one' if base == 1 else 'zero'}-based indices"


def check_schema(store: Any) -> None:
    """Refuse private use of a store whose task, classes or columns were inferred from its data.

    Under ADD/REMOVE neighbours one record with a new label would change the task (binary ->
    regression) or the class codes of every other record; one record with a column index 0 would
    shift every other record's columns by one (svmlight's guessed index base), and one with a
    larger index would change the number of features every release states. The coding of the
    targets and of the features must be a public, per-record map (:func:`feature_schema`).
    Raised before any charge or computation; the message holds no value of the data.
    """
    if store.meta.get("schema") != "declared":
        raise ParameterError(
            f"store {store.path}: its task and labels were inferred from the data, so one record could recode all "
            "the others; declare them (public knowledge) and ingest again: --task binary --labels=-1,1 (your two "
            "labels), --task multiclass --labels ..., or --task regression (data.task / data.labels in a run config)"
        )
    if feature_schema(store.meta) != "declared":
        raise ParameterError(
            f"store {store.path}: its columns were inferred from the data (the number of features from the largest "
            "index seen, the svmlight index base from whether a 0 occurs, or categories coded / gaps filled from "
            "whole columns; or a store written before dpdist recorded this), so one record could change the "
            "columns of all the others; declare them (public knowledge) and ingest again: --n-features D "
            "--zero-based no|yes (data.n_features / data.zero_based in a run config), and no --encode-categories "
            "or --impute for tables"
        )
