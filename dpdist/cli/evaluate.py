"""``dpdist evaluate``: a released model's exact metrics on a test file the user declares public.

Nothing of the private data is read and nothing is charged: the model is a release already, and
the test records are public by the user's declaration.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from dpdist.cli._common import EXIT_OK, _common_args, _emit, _metric_text
from dpdist.cli.models import _find_release
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``evaluate`` command's arguments."""
    p = sub.add_parser("evaluate", help="a released model's exact metrics on a test file you declare public")
    p.add_argument("model", help="a model record (`dpdist models export` writes one), or a release key in the ledger")
    p.add_argument(
        "--public-test",
        required=True,
        help="an svmlight file, a table or a store whose records are public (exact metrics)",
    )
    p.add_argument(
        "--zero-based",
        choices=("no", "yes"),
        default=None,
        help="svmlight: the file's index base (default: the model's recorded one, else no: one-based)",
    )
    p.add_argument("--target", default=None, help="tables: the target column (default: the last)")
    p.add_argument("--dataset", default=None, help="with a key: the dataset it was released on")
    _common_args(p)
    p.set_defaults(func=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    """``dpdist evaluate MODEL --public-test FILE``: a released model's exact metrics on a file the user
    declares public (nothing of the private data is read; nothing is charged)."""
    import numpy as np

    from dpdist.evaluation import exact_metrics

    if os.path.isfile(args.model):
        try:
            record = json.loads(open(args.model).read())
        except ValueError as e:
            raise ParameterError(
                f"{args.model}: not a model record (JSON written by `dpdist models export`): {e}"
            ) from None
    else:
        acc = Accountant(args.ledger, create=False)
        name, rec = _find_release(acc, args.model, args.dataset)
        record = rec.to_dict(name)
    result = record.get("result", record)
    if not isinstance(result, dict) or not {"indices", "values", "n_features"} <= set(result):
        raise ParameterError(f"{args.model}: not a released model (a selection or a count has no predictions)")
    d = int(result["n_features"])
    X, y = _public_test(args, result, d)
    if X.shape[1] != d:
        raise ParameterError(f"{args.public_test} has {X.shape[1]} columns; the model has {d}")
    classes = result.get("classes")
    if classes is not None:
        known = np.isin(np.asarray(y, dtype=object), np.asarray(classes, dtype=object))
        if not known.all():
            raise ParameterError(f"{args.public_test}: labels outside the model's classes {classes}")
        target = np.where(np.asarray(y, dtype=object) == classes[1], 1.0, -1.0)
        task = "binary"
    else:
        target, task = np.asarray(y, dtype=np.float64), "regression"
    metrics = exact_metrics(task, result, X, target)
    payload = {"model": args.model, "public_test": args.public_test, "rows": int(X.shape[0]), "exact": True, **metrics}
    _emit(
        args,
        payload,
        lambda: (
            f"{args.model} on {args.public_test} (declared public: exact, nothing charged): " + _metric_text(payload)
        ),
    )
    return EXIT_OK


def _public_test(args: argparse.Namespace, result: dict[str, Any], d: int) -> tuple[Any, Any]:
    """(X, labels) of ``--public-test``: a store, a table read as the model's training table was, or an
    svmlight file of the model's width."""
    import numpy as np

    from dpdist.data.store import open_store

    if os.path.isdir(args.public_test):
        test = open_store(args.public_test)
        return test.csr(), np.asarray(test.y, dtype=np.float64)
    from dpdist.data.tables import is_table, read_table

    if is_table(args.public_test):  # read as the model's training table was (its recorded schema)
        schema = result.get("schema") or {}
        t = read_table(
            args.public_test,
            target=args.target,
            categories=schema.get("categories"),
            fill_value=schema.get("fill_value"),
        )
        if schema.get("feature_names") and t.feature_names != schema["feature_names"]:
            raise ParameterError(
                f"{args.public_test}: its columns {t.feature_names[:10]} are not the model's "
                f"{schema['feature_names'][:10]} (same order, same declared categories)"
            )
        return t.X, (np.asarray(t.classes, dtype=object)[t.y.astype(int)] if t.classes else t.y)
    recorded = (result.get("schema") or {}).get("index_base")
    zero_based = args.zero_based == "yes" if args.zero_based is not None else recorded == 0
    return _svmlight(args.public_test, d, 0 if zero_based else 1)


def _svmlight(path: str, d: int, base: int) -> tuple[Any, Any]:
    """(X, y) of a public svmlight file of ``d`` columns indexed from ``base``, read by dpdist's reader (a
    malformed line, an index outside the columns, an empty or corrupt file: exit 2 naming the file)."""
    import numpy as np
    import scipy.sparse as sp

    from dpdist.data.svmlight import find_line, iter_svmlight_blocks

    parts, labels = [], []
    for b in iter_svmlight_blocks(path):
        idx = np.asarray(b.indices, dtype=np.int64) - base
        if idx.size and (idx.min() < 0 or idx.max() >= d):
            line = find_line(path, b.first_line, lambda i: not base <= i < d + base)
            raise ParameterError(f"{path}:{line}: a column index outside the model's {d} columns ({base}-based)")
        parts.append(sp.csr_matrix((b.data, idx, b.indptr), shape=(b.y.shape[0], d)))
        labels.append(b.y)
    if not parts or not sum(p.shape[0] for p in parts):
        raise ParameterError(f"{path}: no data rows")
    return sp.vstack(parts, format="csr"), np.concatenate(labels)
