"""``dpdist ledger init / migrate``: the ledger itself -- made or upgraded, and copied to PostgreSQL.

A ledger is an SQLite file (one person, one machine) or a PostgreSQL database a team shares
(``postgresql://user@host/db``; docs/team-ledger.md). ``init`` makes the ledger's tables, or
upgrades an older dpdist's, and says which it is. ``migrate`` copies an SQLite ledger into an empty
PostgreSQL one in one transaction, committed only if the count of every table and a digest of every
release read back the same (:mod:`dpdist.privacy.ledger.migrate`).
"""

from __future__ import annotations

import argparse

from dpdist.cli._common import EXIT_OK, _common_args, _emit


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``ledger`` command and its subcommands' arguments."""
    ledger = sub.add_parser("ledger", help="the privacy ledger itself: make or upgrade it, copy it to PostgreSQL")
    lsub = ledger.add_subparsers(dest="ledger_command", required=True)

    p = lsub.add_parser("init", help="make the ledger's tables (or upgrade an older dpdist's) and show its kind")
    _common_args(p)
    p.set_defaults(func=_ledger_init)

    p = lsub.add_parser(
        "migrate", help="copy an SQLite ledger into an empty PostgreSQL one, verified by counts and digests"
    )
    p.add_argument("--from", dest="source", required=True, metavar="SQLITE_PATH", help="the SQLite ledger's file")
    p.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="URL",
        help="the PostgreSQL ledger (postgresql://user@host/db; its password from a pgpass or service file, "
        "or PGPASSWORD: never in the URL)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO on stderr (default: WARNING)")
    p.set_defaults(func=_ledger_migrate)


def _ledger_init(args: argparse.Namespace) -> int:
    """``dpdist ledger init``: the ledger made or upgraded; its kind and how many budgets it holds."""
    from dpdist.privacy.accountant import Accountant

    acc = Accountant(args.ledger)
    budgets = len(acc.datasets())
    payload = {"ledger": str(acc.path), "backend": acc.backend, "budgets": budgets}
    _emit(args, payload, lambda: f"{acc.backend} ledger at {acc.path}: ready, {budgets} budget(s)")
    return EXIT_OK


def _ledger_migrate(args: argparse.Namespace) -> int:
    """``dpdist ledger migrate --from SQLITE_PATH --to URL``: every record copied and verified."""
    from dpdist.privacy.ledger.migrate import migrate

    copied = migrate(args.source, args.target)
    payload = {"from": args.source, "to": args.target, **copied.to_dict()}
    _emit(
        args,
        payload,
        lambda: (
            f"copied {args.source} to {args.target}: {copied.budgets} budget(s), {copied.links} link(s), "
            f"{copied.releases} release(s); the count of each and the SHA-256 digest of every release read "
            "back identical. Point every user at the new ledger (DPDIST_LEDGER or --ledger) and keep the "
            "SQLite file, unused, as a record"
        ),
    )
    return EXIT_OK
