"""``dpdist predict``: a released model applied to new rows, its predictions in the user's own labels.

Post-processing of a release: nothing is charged and no budget is needed (the ledger is opened, to read,
only to find a model by its key). The rows are read as the model's training rows were: a table by the
model's recorded Table Schema (raw units scaled, text one-hot, gaps filled, the label column not needed),
an svmlight file of the model's width, or a store, whose row blocks are scored by Dask a few at a time (a
store larger than memory streams through).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

from dpdist.cli._common import EXIT_OK, _common_args, _emit
from dpdist.exceptions import ParameterError

_WINDOW = 4  # store blocks scored at once (each a Dask task), then written in order


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``predict`` command's arguments."""
    p = sub.add_parser(
        "predict",
        help="a released model's predictions on new rows, in your labels (nothing charged)",
    )
    p.add_argument("model", help="a model record (`train --out`, `models export`), or a release key in the ledger")
    p.add_argument(
        "src",
        help="new rows: a table (CSV, read by the model's schema; no label column needed), an svmlight file "
        "(its labels ignored) or a store",
    )
    p.add_argument("--out", default=None, help="CSV of predictions to write (atomically); default: stdout")
    p.add_argument("--dataset", default=None, help="with a key: the dataset it was released on")
    p.add_argument(
        "--zero-based",
        choices=("no", "yes"),
        default=None,
        help="svmlight: the file's index base (default: the model's recorded one, else no: one-based)",
    )
    p.add_argument("--block-rows", type=int, default=None, help="a store's rows per Dask task (default: its own)")
    _common_args(p)
    p.set_defaults(func=_predict, out_kind="file")


def _predict(args: argparse.Namespace) -> int:
    """``dpdist predict MODEL SRC``: one CSV line per row: its id, the predicted label (or value) and, for a
    classifier, the probability of its second class."""
    import sys

    from dpdist.cli.models import load_model

    if args.json and args.out is None:
        raise ParameterError("--json prints one JSON object on stdout: give the predictions' file with --out")
    result = load_model(args.model, args.ledger, args.dataset)
    predictor = _Predictor(result, by_key=_is_table(args.src))
    lines = predictor.lines(_blocks(args, result))
    if args.out_file is not None:
        rows = args.out_file.write_lines(lines)
    else:
        rows = 0
        for line in lines:
            sys.stdout.write(line + "\n")
            rows += 1
        rows -= 1  # the header
    if args.out_file is not None or args.json:
        _emit(
            args,
            {"model": args.model, "src": args.src, "out": args.out, "rows": rows, "columns": predictor.header},
            lambda: (
                f"{rows} predictions of {args.model} on {args.src} -> {args.out} (post-processing: nothing charged)"
            ),
        )
    return EXIT_OK


class _Predictor:
    """A released model's margins turned into the user's labels (and probabilities) or values."""

    def __init__(self, result: dict[str, Any], by_key: bool) -> None:
        from dpdist.cli.evaluate import declared_schema

        self.result = result
        self.schema = declared_schema(result)
        self.classes = result.get("classes")
        label = "prediction"
        if self.classes is not None:
            self.header = ["row", label, f"probability_{self.classes[1]}"]
        else:
            self.header = ["row", label]
        if by_key and self.schema is not None and self.schema.key is not None:  # a table's rows named by its key
            self.header[0] = self.schema.key

    def lines(self, blocks: Iterator[tuple[Any, Any]]) -> Iterator[str]:
        """The CSV lines (the header first) of the blocks' (X, row ids) in order."""
        import csv
        import io

        import numpy as np
        from scipy.special import expit

        from dpdist.evaluation import released_margins

        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="")

        def line(cells: list[Any]) -> str:
            buffer.seek(0)
            buffer.truncate()
            writer.writerow(cells)
            return buffer.getvalue()

        yield line(self.header)
        for X, ids in blocks:
            margins = released_margins(self.result, X) if X.shape[0] else np.zeros(0)
            if self.classes is not None:
                p = expit(margins)  # the classifiers' predict_proba (no overflow at large margins)
                labels = np.where(margins > 0, 1, 0)
                for i, k, q in zip(ids, labels, p):
                    yield line([i, self.classes[int(k)], f"{q:.6g}"])
            else:
                values = self.schema.target_values(margins) if self.schema is not None else margins
                for i, v in zip(ids, values):
                    yield line([i, f"{v:.6g}"])


def _blocks(args: argparse.Namespace, result: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    """(X, row ids) of the new rows in order: one block for a file, a store's row blocks scored by Dask."""
    import numpy as np

    from dpdist.cli.evaluate import _svmlight, declared_schema

    d = int(result["n_features"])
    if os.path.isdir(args.src):
        yield from _store_blocks(args, d)
        return
    if _is_table(args.src):
        schema = declared_schema(result)
        recorded = result.get("schema") or {}
        if schema is None and recorded.get("feature_names") is not None:  # a table ingested by the flags
            import scipy.sparse as sp

            from dpdist.data.tables import read_new_rows

            X = sp.csr_matrix(read_new_rows(args.src, recorded))
            if X.shape[1] != d:
                raise ParameterError(f"{args.src}: its rows read as {X.shape[1]} columns, the model has {d}")
            yield X, np.arange(1, X.shape[0] + 1)
            return
        if schema is None:
            raise ParameterError(
                f"{args.src}: this model was not trained on a table's rows (it records no table schema), so a "
                "table's raw rows cannot be read as its training rows were; give an svmlight file or a store"
            )
        X, _, keys = schema.read(args.src, target=False)
        yield X, (keys if keys is not None else np.arange(1, X.shape[0] + 1))
        return
    recorded = (result.get("schema") or {}).get("index_base")
    zero_based = args.zero_based == "yes" if args.zero_based is not None else recorded == 0
    X, _ = _svmlight(args.src, d, 0 if zero_based else 1)
    yield X, np.arange(1, X.shape[0] + 1)


def _is_table(src: str) -> bool:
    """Whether ``src`` is a table (a file named as one), not a store or an svmlight file."""
    from dpdist.data.tables import is_table

    return not os.path.isdir(src) and is_table(src)


def _store_blocks(args: argparse.Namespace, d: int) -> Iterator[tuple[Any, Any]]:
    """A store's row blocks (Dask tasks, ``_WINDOW`` at a time: memory holds a few blocks, not the store)."""
    import dask
    import numpy as np

    from dpdist.data.store import open_store

    store = open_store(args.src)
    if store.shape[1] != d:
        raise ParameterError(f"{args.src} has {store.shape[1]} columns; the model has {d}")
    if args.block_rows is not None and args.block_rows < 1:
        raise ParameterError(f"--block-rows must be >= 1, got {args.block_rows}")
    bounds = store.row_bounds(args.block_rows)
    blocks = store.to_dask(args.block_rows).to_delayed().ravel()
    for at in range(0, len(bounds), _WINDOW):
        done = dask.compute(*blocks[at : at + _WINDOW])
        for (r0, r1), X in zip(bounds[at : at + _WINDOW], done):
            yield X.to_scipy_sparse().tocsr(), np.arange(r0 + 1, r1 + 1)
