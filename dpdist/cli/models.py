"""``dpdist models list / show / export``: released models and selections, read back from the ledger."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from dpdist.cli._common import EXIT_OK, _common_args, _dataset, _emit, _write_out
from dpdist.exceptions import ParameterError

if TYPE_CHECKING:
    from dpdist.privacy.accountant import Accountant


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``models`` command and its subcommands' arguments."""
    models = sub.add_parser("models", help="released models and selections, read back from the ledger")
    msub = models.add_subparsers(dest="models_command", required=True)
    p = msub.add_parser("list", help="every released model (weights a model record holds), newest last")
    p.add_argument("--dataset", default=None, help="a dataset's public name, or a store")
    _common_args(p)
    p.set_defaults(func=_models)
    for name, what in (
        ("show", "print a release's record (its loss and result)"),
        ("export", "write a release's record to a file (loads with from_release)"),
    ):
        p = msub.add_parser(name, help=what)
        p.add_argument("key", help="the release key (printed by train/select/run; `dpdist models list`)")
        p.add_argument("--dataset", default=None, help="a dataset's public name, or a store")
        if name == "export":
            p.add_argument("--out", required=True, help="JSON file to write (atomically)")
            p.set_defaults(out_kind="file")
        _common_args(p)
        p.set_defaults(func=_models)


def _find_release(acc: Accountant, key: str, dataset: str | None) -> tuple[str, Any]:
    """(public name, release) of ``key`` in one dataset (``--dataset``) or the only one that has it."""
    hashes = [_dataset(acc, dataset)] if dataset else [s.dataset for s in acc.datasets()]
    found = list(
        {(r.dataset, r.key): (r.dataset, r) for h in hashes for r in acc.history(h) if r.key == key}.values()
    )  # a linked budget's release is listed by both: once, as its own
    if not found:
        raise ParameterError(f"no release with key {key!r} in {acc.path}; `dpdist models list` shows the keys")
    if len(found) > 1:
        raise ParameterError(f"key {key!r} is in several datasets: name one with --dataset")
    h, rec = found[0]
    if rec.result is None:
        raise ParameterError(
            f"release {key!r} was charged but has no recorded result (its computation never "
            "completed); nothing was released under it"
        )
    return acc.name(h), rec


def load_released(model: str, ledger: str | None = None, dataset: str | None = None) -> dict[str, Any]:
    """A released model's record, by its release key or a file: the one way a command loads a model.

    ``model`` is a file ``dpdist models export`` wrote (JSON), or a release key in ``ledger`` (default:
    ``DPDIST_LEDGER``), in ``dataset`` (a public name or a store; default: the one dataset that has the
    key). From the ledger, the model's weights are read from its artefact and its SHA-256 checked
    against the row's (:mod:`dpdist.privacy.ledger.artefacts`). ``ParameterError`` (exit 2) for a file
    that is no record, an unknown key, or an artefact missing or changed. The record's ``result`` is the
    model (``indices``, ``values``, ``n_features``, ...), as ``from_release`` takes it.
    """
    if os.path.isfile(model):
        try:
            with open(model) as f:
                record = json.load(f)
        except ValueError as e:
            raise ParameterError(
                f"{model}: not a model record (JSON written by `dpdist train --out` or `dpdist models export`): {e}"
            ) from None
        return record if isinstance(record, dict) else {"result": record}
    from dpdist.privacy.accountant import Accountant

    acc = Accountant(ledger, create=False)
    name, rec = _find_release(acc, model, dataset)
    return {**rec.to_dict(name), "result": acc.result(rec)}


def load_model(ref: str, ledger: str | None, dataset: str | None) -> dict[str, Any]:
    """The released model ``ref`` names (:func:`load_released`: a model record file, or a release key in the
    ledger, opened to read: nothing is charged): its result (weights, classes, schema), a private search's
    chosen model; anything else (a selection, a count, a command's output without its model) refused, exit 2."""
    record = load_released(ref, ledger, dataset)
    return model_of(record.get("result", record), ref)


def model_of(result: Any, ref: str) -> dict[str, Any]:
    """The model a release's ``result`` holds: itself, or a private search's chosen model; anything else
    (a selection, a count, metrics) refused, exit 2."""
    if isinstance(result, dict) and not is_model(result) and is_model(result.get("model")):
        result = result["model"]  # the private search's release: the model it chose
    if not isinstance(result, dict) or not is_model(result):
        raise ParameterError(f"{ref}: not a released model (a selection or a count has no predictions)")
    return result


def is_model(result: Any) -> bool:
    """Whether a release's result is a model (weights to predict with; in a ledger row, the reference to its
    weights' artefact), not a selection, a count or metrics."""
    from dpdist.privacy.ledger.artefacts import reference

    keys = {"indices", "values", "n_features"}
    return isinstance(result, dict) and (keys <= set(result) or reference(result) is not None)


def _models(args: argparse.Namespace) -> int:
    """``dpdist models list|show|export``: the released models, or one release's record."""
    from dpdist.privacy.accountant import Accountant

    acc = Accountant(args.ledger, create=False)
    if args.models_command == "list":
        hashes = [_dataset(acc, args.dataset)] if args.dataset else [s.dataset for s in acc.datasets()]
        once = {(r.dataset, r.key): r for h in hashes for r in acc.history(h) if r.result is not None}
        records = [r.to_dict(acc.name(r.dataset)) for r in once.values()]  # a linked budget's: as its own
        rows = [
            {k: v for k, v in r.items() if k != "result"}
            for r in records
            if is_model(r["result"]) or (isinstance(r["result"], dict) and is_model(r["result"].get("model")))
        ]

        def table() -> str:
            if not rows:
                return f"no released models in {acc.path} (`dpdist budget history --dataset NAME` lists every release)"
            head = f"{'DATASET':<14} {'MECHANISM':<30} {'EPSILON':<9} {'DELTA':<9} {'RELEASED':<11} KEY"
            return "\n".join(
                [head]
                + [
                    f"{r['dataset']:<14} {r['mechanism']:<30} {r['epsilon']:<9.4g} {r['delta']:<9.3g} "
                    f"{r['time']:<11} {r['key']}"
                    for r in rows
                ]
            )

        _emit(args, {"releases": rows}, table)
        return EXIT_OK
    name, rec = _find_release(acc, args.key, args.dataset)
    record = {**rec.to_dict(name), "result": acc.result(rec)}  # a model's weights from its artefact, checked
    if args.models_command == "export":
        _write_out(args, record)
        hint = (
            " (a model: `dpdist evaluate` scores it on a public file; in Python, the estimator's "
            "from_release(json.load(open(...))) predicts on your whole matrix)"
            if isinstance(record.get("result"), dict) and "indices" in record["result"]
            else ""
        )
        _emit(args, {"key": args.key, "out": str(args.out)}, lambda: f"{args.key} -> {args.out}{hint}")
    else:
        _emit(args, record, lambda: _record_text(record))
    return EXIT_OK


def _record_text(record: dict[str, Any]) -> str:
    """A release's record in a few lines: what, its loss, its model's size (not one number a line)."""
    result = record.get("result")
    lines = [
        f"{record['key']}  {record['mechanism']}  epsilon={record['epsilon']:.4g} delta={record['delta']:g}  "
        f"({record['loss']}; {record['time']}; dataset {record['dataset']})"
    ]
    if isinstance(result, dict) and "indices" in result:
        schema = result.get("schema") or {}
        names, base = schema.get("feature_names"), schema.get("index_base")
        nz = [(names[j] if names else j + (base or 0), v) for j, v in zip(result["indices"], result["values"])]
        shown = ", ".join(f"{j}: {v:.4g}" for j, v in nz[:10]) + (", ..." if len(nz) > 10 else "")
        ids = (
            "by column name"
            if names
            else f"the file's {'one' if base == 1 else 'zero'}-based indices"
            if base is not None
            else "store columns, zero-based"
        )
        lines.append(
            f"model: {len(nz)} non-zero weights of {result.get('n_features')} ({ids}) "
            f"{{{shown}}}" + (f"; intercept {result['intercept']:.4g}" if "intercept" in result else "")
        )
        if result.get("classes") is not None:
            lines.append(f"classes: {result['classes']}")
        if result.get("path"):
            lines.append(f"Frank-Wolfe path: {len(result['path'])} steps (--json prints them)")
    else:
        text = json.dumps(result, sort_keys=True)
        lines.append(f"result: {text if len(text) <= 400 else text[:400] + ' ... (--json prints it all)'}")
    return "\n".join(lines)
