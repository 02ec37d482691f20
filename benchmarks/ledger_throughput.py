"""Charges per second on each ledger backend, with 1 and 16 concurrent clients.

Each client is a process of its own (with its own connection, or its own connection pool on
PostgreSQL) charging one dataset's budget in a loop, each charge a new release key: the budget check
and the insert in one transaction (``BEGIN IMMEDIATE`` on SQLite, ``SERIALIZABLE`` with retries of
serialisation failures on PostgreSQL). The budget is large enough that no charge is refused. A
charge reads every earlier release of its dataset (the privacy filter composes them all), so the
rate falls as the history grows: each trial starts from an empty ledger and makes about the same
number of charges per backend. Reported: the charges committed per second of wall time, the median
of ``--trials`` trials, and the ledger's count of releases afterwards (it must equal the charges).

PostgreSQL is a throwaway server (scripts/postgres-throwaway.sh), or ``--postgres URL``.

Usage::

    nice -n 19 .venv/bin/python benchmarks/ledger_throughput.py [--charges 400] [--trials 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_file import header, today, topic_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _client(location: str, i: int, charges: int, ready, start, out) -> None:
    from dpdist.privacy.accountant import Accountant
    from dpdist.privacy.loss import Charge, PrivacyLoss

    acc = Accountant(location)
    acc.status("ds")
    charge = Charge(PrivacyLoss.approx(1e-6, 0.0), "laplace")
    ready.put(i)
    start.wait()
    for k in range(charges):
        acc.charge("ds", charge, f"c{i}-{k}")
    out.put(time.monotonic())


def trial(location: str, clients: int, total: int) -> tuple[float, int]:
    """Charges per second with ``clients`` processes making ``total`` charges between them; the ledger's count."""
    from dpdist.privacy.accountant import Accountant

    Accountant(location).init_budget("ds", 1e6, 0.0)
    ctx = mp.get_context("spawn")
    ready, start, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    each = max(1, total // clients)
    procs = [ctx.Process(target=_client, args=(location, i, each, ready, start, out)) for i in range(clients)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=900)
    began = time.monotonic()
    start.set()
    ended = max(out.get(timeout=3600) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    releases = Accountant(location).status("ds").releases
    return each * clients / (ended - began), releases


def _postgres_schema(url: str) -> str:
    """A fresh schema on the server for one trial (an empty ledger)."""
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(f'CREATE SCHEMA "{name}"')
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{name}"


def _start_postgres() -> tuple[str, str]:
    res = subprocess.run(
        ["bash", str(REPO / "scripts" / "postgres-throwaway.sh"), "start"], capture_output=True, text=True, check=True
    )
    env = dict(line.removeprefix("export ").split("=", 1) for line in res.stdout.splitlines())
    return env["DPDIST_TEST_POSTGRES"].strip("'"), env["DPDIST_TEST_POSTGRES_DIR"].strip("'")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--charges", type=int, default=400, help="charges per trial (split between the clients)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--postgres", help="a server's URL (default: a throwaway one, started and stopped here)")
    args = ap.parse_args()
    load = __import__("os").getloadavg()[0]
    url, directory = (args.postgres, None) if args.postgres else _start_postgres()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for backend in ("sqlite", "postgresql"):
                for clients in args.clients:
                    rates, counts = [], []
                    for t in range(args.trials):
                        where = (
                            str(Path(tmp) / f"{clients}-{t}.sqlite") if backend == "sqlite" else _postgres_schema(url)
                        )
                        rate, count = trial(where, clients, args.charges)
                        rates.append(rate)
                        counts.append(count)
                        print(f"{backend} {clients} client(s), trial {t}: {rate:.1f} charges/s ({count} releases)")
                    rows.append((backend, clients, statistics.median(rates), min(rates), max(rates), counts))
    finally:
        if directory:
            subprocess.run(["bash", str(REPO / "scripts" / "postgres-throwaway.sh"), "stop", directory], check=False)
    lines = header(
        "Ledger throughput: charges per second, SQLite and PostgreSQL, 1 and 16 clients",
        f"{args.trials} per cell; {args.charges} charges per trial, split between the clients; an empty ledger each",
        load,
    )
    lines += [
        "PostgreSQL: the throwaway server of scripts/postgres-throwaway.sh on the same machine (loopback TCP, TLS "
        "when openssl is there), default settings but max_connections=200. SQLite: a file on the local disk "
        "(WAL, synchronous=FULL).",
        "",
        "| backend | clients | charges/s (median) | min | max | releases in the ledger after each trial |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for backend, clients, med, lo, hi, counts in rows:
        lines.append(f"| {backend} | {clients} | {med:.1f} | {lo:.1f} | {hi:.1f} | {', '.join(map(str, counts))} |")
    out = topic_dir("ledger") / f"{today()}-ledger_throughput.md"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
