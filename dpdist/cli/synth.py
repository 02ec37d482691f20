"""``dpdist synth``: a synthetic store (the papers' experiments; LIBSVM-shaped sparse sets)."""

from __future__ import annotations

import argparse
from typing import Any

from dpdist.cli._common import EXIT_OK, _common_args, _emit_store


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``synth`` command's arguments (its set names are the generators')."""
    from dpdist.data.synthetic import GENERATORS

    p = sub.add_parser("synth", help="write a synthetic store (the papers' experiments; LIBSVM-shaped sparse sets)")
    p.add_argument("name_", metavar="name", choices=sorted(GENERATORS))
    p.add_argument("--name", dest="name", default=None, help="the store's public name (default: random)")
    p.add_argument("--out", required=True, help="store directory to create")
    p.add_argument("--seed", type=int, default=None, help="reproducible data (default: OS entropy)")
    p.add_argument("--n", type=int, default=None, help="rows (default: the set's own)")
    p.add_argument("--d", type=int, default=None, help="features (default: the set's own)")
    p.add_argument("--scale", type=float, default=None, help="sparse profiles: multiply the number of rows")
    p.add_argument("--correlated", action="store_true", help="raj: Sigma_ij = 0.5^|i-j|")
    p.add_argument("--task", choices=("regression", "binary"), default=None, help="raj: linear or logistic labels")
    p.add_argument("--hinge", action="store_true", help="bss: binary labels y = +1 w.p. sigmoid(z)")
    p.add_argument("--force", action="store_true", help="replace an existing store")
    _common_args(p)
    p.set_defaults(out_kind="store", func=_synth)


def _synth(args: argparse.Namespace) -> int:
    """``dpdist synth NAME --out STORE``: write the set and print its store, with its true support."""
    from dpdist.data.synthetic import write_synthetic

    params: dict[str, Any] = {"n": args.n, "d": args.d}
    if args.scale is not None:
        params["scale"] = args.scale
    if args.correlated:
        params["correlated"] = True
    if args.task is not None:
        params["task"] = args.task
    if args.hinge:
        params["hinge"] = True
    meta = write_synthetic(args.name_, args.out, seed=args.seed, force=args.force, store_name=args.name, **params)
    _emit_store(args, meta, {"true_support": meta["true_support"]}, f"synthetic {args.name_}, ")
    return EXIT_OK
