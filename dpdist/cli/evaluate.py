"""``dpdist evaluate``: a released model's metrics, exact on a test file the user declares public, or private
on the held-out rows of its own store.

With ``--public-test`` nothing of the private data is read and nothing is charged: the model is a release
already, and the test records are public by the user's declaration. With ``--epsilon`` (and ``--store``)
the model's held-out rows -- the same keyed split ``dpdist train`` held out -- are scored in one evaluation
release charged at that epsilon: no new model, the same command again replays it.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from dpdist.cli._common import EXIT_OK, _common_args, _emit, _metric_text
from dpdist.cli.models import load_model, model_of
from dpdist.exceptions import ParameterError

if TYPE_CHECKING:
    from dpdist.data.table_schema import TableSchema


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``evaluate`` command's arguments."""
    p = sub.add_parser(
        "evaluate",
        help="a released model's metrics: exact on a test file you declare public, or private on its held-out rows",
    )
    p.add_argument(
        "model", help="a model record (`train --out`, `models export` write one), or a release key in the ledger"
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--public-test",
        help="an svmlight file, a table or a store whose records are public (exact metrics, nothing charged)",
    )
    what.add_argument(
        "--epsilon",
        type=float,
        help="private metrics on the held-out rows of --store (the split `train` held out), one evaluation "
        "release charged at this epsilon (no new model)",
    )
    p.add_argument("--store", default=None, help="with --epsilon: the store the model was trained on")
    p.add_argument(
        "--test-fraction",
        type=float,
        default=0.2,
        help="with --epsilon: the held-out fraction the model was trained with (train's --test-fraction)",
    )
    p.add_argument("--fresh", action="store_true", help="with --epsilon: a new evaluation release (new noise)")
    p.add_argument("--seed", type=int, default=None, help="with --epsilon: reproducible noise (experiments only)")
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

    if args.epsilon is not None:
        return _evaluate_private(args)
    result = load_model(args.model, args.ledger, args.dataset)
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
        declared = declared_schema(result)
        if declared is not None:  # its Table Schema: labels back in the user's classes (or the scaled target)
            if args.target is not None and args.target != declared.target:
                raise ParameterError(f"--target {args.target}: the model's schema names {declared.target!r}")
            X, y, _ = declared.read(args.public_test)
            assert y is not None  # (read with its target)
            names = declared.classes
            return X, (np.asarray(names, dtype=object)[y.astype(int)] if names else y)
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


def _evaluate_private(args: argparse.Namespace) -> int:
    """``dpdist evaluate MODEL --epsilon E --store STORE``: the model's noisy held-out metrics, one release."""
    import hashlib
    import uuid

    import numpy as np

    from dpdist.cli._common import _charged_text, _noise_seed
    from dpdist.cli.models import _find_release
    from dpdist.data.split import derive_key, record_sides
    from dpdist.data.store import check_schema, open_store
    from dpdist.evaluation import PrivateEvaluation
    from dpdist.privacy.accountant import Accountant
    from dpdist.selection.sis import store_target

    if args.store is None:
        raise ParameterError("--epsilon re-evaluates a model on its own store's held-out rows: name it with --store")
    if not 0.0 < args.test_fraction < 1.0:
        raise ParameterError(f"--test-fraction must lie in (0, 1), got {args.test_fraction}")
    acc = Accountant(args.ledger, create=False)
    model_key = _model_key(args)
    name, rec = _find_release(acc, model_key, args.dataset)
    result = model_of(acc.result(rec), model_key)  # its weights read from their artefact, the digest checked
    store = open_store(args.store)
    check_schema(store)
    dataset = acc.budget_of(store)
    if rec.dataset != dataset:
        raise ParameterError(f"model {model_key} was released on {name}, not on {args.store}'s data")
    if int(result["n_features"]) != store.shape[1]:
        raise ParameterError(f"{args.store} has {store.shape[1]} columns; the model has {result['n_features']}")
    task = "regression" if store.task == "regression" else "binary"
    ev = PrivateEvaluation(task, args.epsilon, random_state=_noise_seed(args, "evaluate"), curve=False)
    basis = hashlib.sha256(f"{args.epsilon!r} {args.test_fraction!r}".encode()).hexdigest()[:12]
    key = f"{model_key}/evaluation-{basis}" + (f"-{uuid.uuid4().hex[:8]}" if args.fresh else "")
    replayed = acc.recorded(dataset, key)
    if not replayed:
        acc.check(dataset, ev.privacy_charge())  # a refused budget: exit 3 before the data is read
    X, y = store.csr(), store_target(store)
    test = record_sides(X, y, derive_key(acc.split_key(dataset), "dpdist train"), args.test_fraction)
    scored = {k: v for k, v in result.items() if k != "path"}  # the metrics alone (no curve: charged without one)
    metrics = acc.release(
        dataset,
        ev.privacy_charge(),
        key,
        lambda: ev.evaluate_model(scored, X[test], np.asarray(y)[test]),
        {"model": model_key, "epsilon": args.epsilon, "test_fraction": args.test_fraction},
    )
    payload = {"model": model_key, "key": key, "epsilon": args.epsilon, "replayed": replayed, **metrics}
    cost = _charged_text(replayed, key, args.epsilon, 0.0, main="the evaluation")
    _emit(args, payload, lambda: f"{model_key} on {name}'s held-out rows: {_metric_text(payload)}; {cost}")
    return EXIT_OK


def _model_key(args: argparse.Namespace) -> str:
    """The release key of ``MODEL``: the key itself, or the ``key`` a model record file names."""
    if not os.path.isfile(args.model):
        return str(args.model)
    import json

    try:
        record = json.loads(open(args.model).read())
    except ValueError as e:
        raise ParameterError(f"{args.model}: not a model record: {e}") from None
    key = record.get("key") if isinstance(record, dict) else None
    if not isinstance(key, str):
        raise ParameterError(f"{args.model}: names no release key; give the model's key (`dpdist models list`)")
    return key


def declared_schema(result: dict[str, Any]) -> TableSchema | None:
    """The Table Schema a released model recorded (its training store's, from ``ingest --schema``), or None."""
    from dpdist.data.table_schema import schema_from_dict

    spec = (result.get("schema") or {}).get("table_schema")
    return None if spec is None else schema_from_dict(spec, "the model's recorded schema")


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
