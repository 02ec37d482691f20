"""``dpdist models list / show / export``: released models and selections, read back from the ledger."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dpdist.cli._common import EXIT_OK, _common_args, _dataset, _emit, _write_out
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``models`` command and its subcommands' arguments."""
    models = sub.add_parser("models", help="released models and selections, read back from the ledger")
    msub = models.add_subparsers(dest="models_command", required=True)
    p = msub.add_parser("list", help="every release with a recorded result")
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


def _models(args: argparse.Namespace) -> int:
    """``dpdist models list|show|export``: the releases with a recorded result, or one release's record."""
    acc = Accountant(args.ledger, create=False)
    if args.models_command == "list":
        hashes = [_dataset(acc, args.dataset)] if args.dataset else [s.dataset for s in acc.datasets()]
        once = {(r.dataset, r.key): r for h in hashes for r in acc.history(h) if r.result is not None}
        rows = [{**r.to_dict(acc.name(r.dataset)), "result": None} for r in once.values()]  # linked: as its own
        for r in rows:
            r.pop("result")
        _emit(
            args,
            {"releases": rows},
            lambda: (
                "\n".join(f"{r['dataset']:<14} {r['mechanism']:<30} eps={r['epsilon']:<8.4g} {r['key']}" for r in rows)
                or f"no recorded releases in {acc.path}"
            ),
        )
        return EXIT_OK
    name, rec = _find_release(acc, args.key, args.dataset)
    record = rec.to_dict(name)
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
