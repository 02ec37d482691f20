"""Charges per second on each ledger backend: with 1 and 16 concurrent clients, and at a long history.

Concurrency (the default): each client is a process of its own (with its own connection, or its own
connection pool on PostgreSQL) charging one dataset's budget in a loop, each charge a new release key:
the budget check and the insert in one transaction (``BEGIN IMMEDIATE`` on SQLite, the budget's lock
on PostgreSQL). The budget is large enough that no charge is refused. Each trial starts from an empty
ledger. Reported: the charges committed per second of wall time, the median of ``--trials`` trials,
and the ledger's count of releases afterwards (it must equal the charges).

History (``--history 0 1500 10000``): the claim that a charge costs the same at any length of the
dataset's history (the budget's composed state is kept in the ledger: dpdist.privacy.ledger.composed).
On each backend one ledger is charged, by ``Accountant.charge``, up to each history length in turn (a
mix of Laplace, Gaussian and (epsilon, delta) releases on a budget with delta > 0, so its filter
composes Renyi curves), and at each length ``--trials`` trials of ``--charges`` charges by one client
are timed; an empty ledger is timed before and after (the machine's load drifts), and each length's
median rate is compared with the mean of the two empty ones: met when every ratio is at least 0.7.
The time of one full recomposition of the budget (``Accountant.verify``: what every charge cost to
compose before the state was kept) is shown beside it.

PostgreSQL is a throwaway server (scripts/postgres-throwaway.sh), or ``--postgres URL``.

Usage::

    nice -n 19 .venv/bin/python benchmarks/ledger_throughput.py [--charges 400] [--trials 3]
    nice -n 19 .venv/bin/python benchmarks/ledger_throughput.py --history 0 1500 10000 --charges 200 --trials 5
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
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


_MIX = ("laplace", "gaussian", "approx")


def _mixed(i: int):
    """The i-th release of the history's mix (its loss: Laplace, Gaussian or (epsilon, delta))."""
    from dpdist.privacy.loss import Charge, PrivacyLoss

    kind = _MIX[i % len(_MIX)]
    loss = {
        "laplace": lambda: PrivacyLoss.laplace(1e-4),
        "gaussian": lambda: PrivacyLoss.gaussian(400.0, 1e-12),
        "approx": lambda: PrivacyLoss.approx(1e-4, 1e-13),
    }[kind]()
    return Charge(loss, kind)


def _charge(acc, i: int) -> None:
    acc.charge("ds", _mixed(i), f"release-{i}")


def _rate(acc, charges: int) -> tuple[float, int]:
    """Charges per second of ``charges`` more charges by this one client; the releases before them."""
    before = acc.status("ds").releases
    began = time.monotonic()
    for i in range(before, before + charges):
        _charge(acc, i)
    return charges / (time.monotonic() - began), before


def history(location: str, lengths: list[int], charges: int, trials: int, fresh) -> list[tuple]:
    """Per row: (what, earlier releases at the first and the last trial, median, min and max charges/s,
    seconds of one full recomposition). An empty ledger first and last (each trial a new one, from
    ``fresh()``), the history lengths between, on the one ledger at ``location``."""
    from dpdist.privacy.accountant import Accountant

    def opened(where: str):
        acc = Accountant(where)
        acc.init_budget("ds", 1e6, 1e-6)
        return acc

    def recompose(acc) -> float:
        began = time.monotonic()
        verdicts = acc.verify()
        assert all(v.equal for v in verdicts), "the kept state differs from its recomposition"
        return time.monotonic() - began

    def empty(what: str) -> tuple:
        rates = [_rate(opened(fresh()), charges)[0] for _ in range(trials)]
        print(f"  {what}: {', '.join(f'{r:.1f}' for r in rates)} charges/s", flush=True)
        return (what, 0, 0, statistics.median(rates), min(rates), max(rates), 0.0)

    rows = [empty("empty ledger (before)")]
    acc = opened(location)
    for length in sorted(n for n in lengths if n > 0):
        began = time.monotonic()
        for i in range(acc.status("ds").releases, length):
            _charge(acc, i)
        print(f"  charged up to {length} releases ({time.monotonic() - began:.0f} s)", flush=True)
        seconds = recompose(acc)
        runs = [_rate(acc, charges) for _ in range(trials)]
        rates = [r for r, _ in runs]
        print(f"  {length} earlier: {', '.join(f'{r:.1f}' for r in rates)} charges/s", flush=True)
        rows.append(
            (
                f"{length:,} earlier releases",
                runs[0][1],
                runs[-1][1],
                statistics.median(rates),
                min(rates),
                max(rates),
                seconds,
            )
        )
    rows.append(empty("empty ledger (after)"))
    return rows


_BACKENDS_NOTE = (
    "PostgreSQL: the throwaway server of scripts/postgres-throwaway.sh on the same machine (loopback TCP, TLS "
    "when openssl is there), default settings but max_connections=200. SQLite: a file on the local disk "
    "(WAL, synchronous=FULL)."
)


def concurrency_report(args: argparse.Namespace, url: str, tmp: str, load: float) -> Path:
    rows = []
    for backend in ("sqlite", "postgresql"):
        for clients in args.clients:
            rates, counts = [], []
            for t in range(args.trials):
                where = str(Path(tmp) / f"{clients}-{t}.sqlite") if backend == "sqlite" else _postgres_schema(url)
                rate, count = trial(where, clients, args.charges)
                rates.append(rate)
                counts.append(count)
                print(f"{backend} {clients} client(s), trial {t}: {rate:.1f} charges/s ({count} releases)")
            rows.append((backend, clients, statistics.median(rates), min(rates), max(rates), counts))
    lines = header(
        "Ledger throughput: charges per second, SQLite and PostgreSQL, 1 and 16 clients",
        f"{args.trials} per cell; {args.charges} charges per trial, split between the clients; an empty ledger each",
        load,
    )
    lines += [
        _BACKENDS_NOTE,
        "",
        "| backend | clients | charges/s (median) | min | max | releases in the ledger after each trial |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for backend, clients, med, lo, hi, counts in rows:
        lines.append(f"| {backend} | {clients} | {med:.1f} | {lo:.1f} | {hi:.1f} | {', '.join(map(str, counts))} |")
    out = topic_dir("ledger") / f"{today()}-ledger_throughput.md"
    out.write_text("\n".join(lines) + "\n")
    return out


def history_report(args: argparse.Namespace, url: str, tmp: str, load: float) -> Path:
    results = {}
    for backend in ("sqlite", "postgresql"):
        print(backend, flush=True)
        counter = iter(range(1 << 30))

        def fresh(backend: str = backend) -> str:
            return str(Path(tmp) / f"empty-{next(counter)}.sqlite") if backend == "sqlite" else _postgres_schema(url)

        results[backend] = history(fresh(), args.history, args.charges, args.trials, fresh)
    lines = header(
        "Ledger throughput at a long history: a charge's rate after 0, 1,500 and 10,000 earlier releases",
        f"{args.trials} per row; {args.charges} charges per trial by one client; the empty ledger's rows a new "
        "ledger per trial, the history's rows one ledger charged up to each length in turn",
        load,
    )
    lines += [
        _BACKENDS_NOTE,
        "The history: Laplace, Gaussian (zCDP) and (epsilon, delta) releases in turn, on a budget with delta > 0 "
        "(its filter composes Renyi curves); the timed charges continue the same mix. Ratio: the row's median "
        "against the mean of the two empty-ledger medians. Recompose: one full recomposition of the budget from "
        "its releases (`Accountant.verify`, which also checked the kept state equal to it): what each charge "
        "spent composing before the state was kept.",
        "",
        "| backend | ledger | earlier releases (first / last trial) | charges/s (median) | min | max | ratio to empty "
        "| recompose (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    for backend, rows in results.items():
        empty = statistics.mean([rows[0][3], rows[-1][3]])
        for what, first, last, med, lo, hi, seconds in rows:
            ratio = med / empty
            if "earlier" in what:
                verdicts.append((backend, what, ratio))
            lines.append(
                f"| {backend} | {what} | {first:,} / {last:,} | {med:.1f} | {lo:.1f} | {hi:.1f} | {ratio:.2f} "
                f"| {seconds:.2f} |"
            )
    met = all(r >= 0.7 for _, _, r in verdicts)
    lines += [
        "",
        "Claim: every history's median rate is at least 0.7x the empty ledger's, on both backends: "
        + ("**met**" if met else "**not met**")
        + " ("
        + "; ".join(f"{b} {w}: {r:.2f}x" for b, w, r in verdicts)
        + ").",
    ]
    out = topic_dir("ledger") / f"{today()}-ledger_history.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-1:]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--charges", type=int, default=400, help="charges per trial (split between the clients)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    ap.add_argument(
        "--history", type=int, nargs="+", help="history lengths: time one client's charges after these many releases"
    )
    ap.add_argument("--postgres", help="a server's URL (default: a throwaway one, started and stopped here)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    url, directory = (args.postgres, None) if args.postgres else _start_postgres()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report = history_report if args.history else concurrency_report
            out = report(args, url, tmp, load)
    finally:
        if directory:
            subprocess.run(["bash", str(REPO / "scripts" / "postgres-throwaway.sh"), "stop", directory], check=False)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
