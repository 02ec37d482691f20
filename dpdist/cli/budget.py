"""``dpdist budget init / show / verify / history``: privacy budgets and the audit trail of the ledger."""

from __future__ import annotations

import argparse
import os

from dpdist.cli._common import EXIT_ERROR, EXIT_OK, _common_args, _dataset, _emit
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import UNCOVERED_MARK, Accountant, default_ledger, spend_text, status_table
from dpdist.privacy.ledger.backend import parse_location


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``budget`` command and its subcommands' arguments."""
    budget = sub.add_parser("budget", help="privacy budgets and the audit trail")
    bsub = budget.add_subparsers(dest="budget_command", required=True)

    p = bsub.add_parser("init", help="set a dataset's total (epsilon, delta) budget (permanent)")
    p.add_argument("store", help="the store (written by ingest/synth) whose data the budget covers")
    p.add_argument("--name", default=None, help="the dataset's public name (default: the store's name)")
    p.add_argument("--epsilon", required=True, type=float)
    p.add_argument("--delta", required=True, type=float)
    _common_args(p)
    p.set_defaults(func=_budget_init)

    p = bsub.add_parser("show", help="spent and remaining budget")
    p.add_argument("--dataset", default=None, help="a dataset's public name, or a store")
    _common_args(p)
    p.set_defaults(func=_budget_show)

    p = bsub.add_parser(
        "verify", help="check every budget's kept composed state against a full recomposition of its releases"
    )
    _common_args(p)
    p.set_defaults(func=_budget_verify)

    p = bsub.add_parser("history", help="every release charged to a dataset, with its recorded result")
    p.add_argument("--dataset", required=True, help="a dataset's public name, or a store")
    _common_args(p)
    p.set_defaults(func=_budget_history)


def _budget_init(args: argparse.Namespace) -> int:
    """``dpdist budget init STORE``: set the total budget of the store's data (once, permanent)."""
    from dpdist.data.store import check_schema, open_store

    store = open_store(args.store)
    check_schema(store)  # a budget on a store private analyses refuse would be a permanent budget nobody can spend
    acc = Accountant(args.ledger)
    if store.budget_id != store.dataset_id:
        raise ParameterError(
            f"{args.store} holds part of another store's records (its train/test split): releases "
            "on it are charged to that store's budget; set the budget on the source store"
        )
    status = acc.init_budget(store.dataset_id, args.epsilon, args.delta, args.name or store.name)
    payload = {"dataset": status.name, "epsilon_total": status.epsilon_total, "delta_total": status.delta_total}
    _emit(
        args,
        payload,
        lambda: (
            f"budget of {status.name} ({args.store}): epsilon={status.epsilon_total:g} "
            f"delta={status.delta_total:g}, in {acc.path}"
        ),
    )
    return EXIT_OK


def _budget_show(args: argparse.Namespace) -> int:
    """``dpdist budget show``: spent and remaining budget of one dataset, or of all of them."""
    location = parse_location(args.ledger or default_ledger())  # a mistyped URL: refused (exit 2), nothing made
    path = location.text
    if args.dataset is None and not location.is_url and not os.path.isfile(path):  # nothing to show, nothing created
        _emit(args, {"ledger": path, "datasets": []}, lambda: f"no budgets: there is no ledger at {path} yet")
        return EXIT_OK
    acc = Accountant(args.ledger, create=False)
    if args.dataset is not None:
        payload = acc.status(_dataset(acc, args.dataset)).to_dict()
        _emit(args, payload, lambda: f"{status_table([payload])}\n\n{payload['dataset']}: {spend_text(payload)}.")
    else:
        rows = [s.to_dict() for s in acc.datasets()]
        note = (
            "spent: each budget's privacy filter's figure (Renyi composition, or the releases' epsilons added "
            "when smaller): a new release of epsilon e can take less than e of what is left. "
            "`budget show --dataset NAME` explains one, `budget history --dataset NAME` lists its releases."
        )
        _emit(
            args,
            {"ledger": str(acc.path), "datasets": rows},
            lambda: f"{status_table(rows)}\n\n{note}" if rows else f"no budgets in {acc.path}",
        )
    return EXIT_OK


def _budget_history(args: argparse.Namespace) -> int:
    """``dpdist budget history --dataset NAME``: every release charged to the dataset."""
    acc = Accountant(args.ledger, create=False)
    dataset = _dataset(acc, args.dataset)
    name = acc.name(dataset)
    releases = [r.to_dict(name) for r in acc.history(dataset)]
    payload = {"dataset": name, "releases": releases}

    def human() -> str:
        lines = [
            f"{r['time']}  {r['mechanism']:<28} eps={r['epsilon']:<10.4g} delta={r['delta']:<9.3g} "
            f"{r['loss']:<28} {r['key']}" + ("" if r["covered"] else f"  {UNCOVERED_MARK}")
            for r in releases
        ]
        return "\n".join(lines) or f"no releases for {name}"

    _emit(args, payload, human)
    return EXIT_OK


def _budget_verify(args: argparse.Namespace) -> int:
    """``dpdist budget verify``: each budget's kept composed state (what a charge checks) recomposed from
    its releases and compared, bit for bit; exit 1 when any differs."""
    acc = Accountant(args.ledger, create=False)
    names = {s.dataset: s.name for s in acc.datasets()}
    verdicts = acc.verify()
    bad = [v for v in verdicts if not v.equal]

    def human() -> str:
        lines = [
            f"{names[v.dataset]}: {v.recomposed.sums.releases} release(s); "
            + ("the kept state equals the recomposition" if v.equal else f"DIFFERS ({', '.join(v.differences())})")
            for v in verdicts
        ]
        if bad:
            lines.append(
                f"{len(bad)} budget(s) differ from their releases: the ledger was written around dpdist. A state "
                "that is not current (last_id, filter: releases written by an older dpdist, or by hand) is "
                "recomposed by every charge; any other difference is a table edited by hand"
            )
        return "\n".join(lines) or f"no budgets in {acc.path}"

    rows = [
        {
            "dataset": names[v.dataset],
            "releases": v.recomposed.sums.releases,
            "equal": v.equal,
            "differences": v.differences(),
        }
        for v in verdicts
    ]
    _emit(args, {"ledger": str(acc.path), "budgets": rows, "equal": not bad}, human)
    return EXIT_ERROR if bad else EXIT_OK
