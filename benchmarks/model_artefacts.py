"""A DP-GD model of a 2,000,000-column store: its ledger row and its artefact's size, and its replay.

Runs the CLI as a user does: ``dpdist synth kdda --d D`` (a KDDA-profile store of ``--n`` rows and ``--d``
columns), ``dpdist budget init``, ``dpdist train --method dp-gd`` (every column weighted: a dense
model), then the same ``train`` again (a replay: no new charge), on an SQLite ledger and, with
``--postgres URL``, on a PostgreSQL one. Measured from the ledger itself: the release's row (the sum
of its columns' byte lengths), the model's artefact file against its weights' raw float64 bytes
(8 x D), the row a schema-7 ledger held for the same model (its result as JSON, computed from the
replayed model), and whether the replay and ``dpdist models export`` give back the released weights
bit for bit (the artefact's SHA-256 checked on each read).

    .venv/bin/python benchmarks/model_artefacts.py [--n 20000] [--d 2000000] [--postgres URL]

Writes ``benchmarks/results/ledger/<date>-model_artefacts.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_file import header, table, today, topic_dir, write_md  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DPDIST = [sys.executable, "-m", "dpdist.cli"]
ROW_LIMIT, FILE_RATIO_LIMIT = 4096, 1.1


def dpdist(*args: str, env: dict[str, str]) -> dict:
    res = subprocess.run([*DPDIST, *args, "--json"], capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise SystemExit(f"dpdist {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    return json.loads(res.stdout)


def row_bytes(ledger: str, key: str) -> int:
    """The byte length of the release's row: the sum of its columns' lengths as stored."""
    columns = "dataset, key, time, mechanism, epsilon, delta, result, loss, params, covered"
    cols = ", ".join(f"coalesce(octet_length(CAST({c} AS TEXT)), 0)" for c in columns.split(", "))
    sql = f"SELECT {cols} FROM releases WHERE key = ?"
    if ledger.startswith("postgresql://"):
        import psycopg

        from dpdist.privacy.ledger.postgres import connection_parameters

        with psycopg.connect(**connection_parameters(ledger)) as pg:
            row = pg.execute(sql.replace("?", "%s"), (key,)).fetchone()
    else:
        import sqlite3

        con = sqlite3.connect(ledger)
        row = con.execute(sql.replace("octet_length", "length").replace("AS TEXT", "AS BLOB"), (key,)).fetchone()
        con.close()
    assert row is not None, key
    return int(sum(row))


def measure(store: Path, ledger: str, tmp: Path, env: dict[str, str]) -> list[object]:
    from dpdist.privacy.accountant import Accountant
    from dpdist.privacy.ledger import artefacts

    key = "dp-gd-2m"
    dpdist("budget", "init", str(store), "--epsilon", "10", "--delta", "1e-5", "--ledger", ledger, env=env)
    train = ["train", str(store), "--method", "dp-gd", "--epsilon", "1", "--delta", "1e-6", "--test-fraction", "0"]
    train += ["--n-records", "20000", "--key", key, "--ledger", ledger]
    t0 = time.perf_counter()
    dpdist(*train, env=env)
    train_s = time.perf_counter() - t0
    acc = Accountant(ledger)
    dataset = acc.datasets()[0].dataset
    (rec,) = [r for r in acc.history(dataset) if r.key == key]
    ref = artefacts.references(json.loads(rec.result))[0]
    path = artefacts.locate(ref, acc.artefacts)
    t0 = time.perf_counter()
    model = acc.result(rec)  # read back, digest checked
    read_s = time.perf_counter() - t0
    d = int(model["n_features"])
    raw = 8 * d
    spent = acc.status(dataset).epsilon_basic
    dpdist(*train, env=env)  # the same key again: a replay
    replayed = acc.result([r for r in acc.history(dataset) if r.key == key][0])
    export = tmp / f"export-{acc.backend}.json"
    dpdist("models", "export", key, "--ledger", ledger, "--out", str(export), env=env)
    exported = json.loads(export.read_text())["result"]
    exact = replayed == model == exported and acc.status(dataset).epsilon_basic == spent
    json_row = len(json.dumps(model, sort_keys=True).encode())  # what a schema-7 row held as its result
    return [
        acc.backend,
        f"{d:,}",
        f"{len(model['indices']):,}",
        ref["layout"],
        f"{row_bytes(ledger, key):,}",
        f"{json_row:,}",
        f"{path.stat().st_size:,}",
        f"{raw:,}",
        f"{path.stat().st_size / raw:.5f}",
        "yes" if exact else "NO",
        f"{train_s:.1f}",
        f"{read_s:.2f}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--d", type=int, default=2_000_000)
    ap.add_argument("--postgres", default=None, help="also on this PostgreSQL ledger (an empty database)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(dir=REPO / "benchmarks") as t:
        tmp = Path(t)
        env = dict(os.environ)
        env.pop("DPDIST_ARTEFACTS", None)
        store = tmp / "store"
        dpdist("synth", "kdda", "--n", str(args.n), "--d", str(args.d), "--seed", "1", "--out", str(store), env=env)
        rows.append(measure(store, str(tmp / "ledger.sqlite"), tmp, env))
        if args.postgres:
            rows.append(measure(store, args.postgres, tmp, {**env, "DPDIST_ARTEFACTS": str(tmp / "pg-artefacts")}))
    cols = [
        "backend",
        "columns",
        "weights",
        "layout",
        "ledger row (bytes)",
        "schema-7 row's result (bytes)",
        "artefact (bytes)",
        "raw weights (bytes)",
        "artefact / raw",
        "replay and export exact",
        "train (s)",
        "read + check (s)",
    ]
    ok = all(int(str(r[4]).replace(",", "")) <= ROW_LIMIT and float(str(r[8])) <= FILE_RATIO_LIMIT for r in rows)
    exact = all(r[9] == "yes" for r in rows)
    lines = header(
        f"Model artefacts: a DP-GD model of a {args.d:,}-column store in the ledger",
        "1 per backend (sizes are deterministic given the model's width; the times are one run's, for scale)",
        load,
    )
    lines += [
        f"Store: `dpdist synth kdda --n {args.n} --d {args.d} --seed 1` (KDDA's profile). The model: "
        "`dpdist train --method dp-gd --epsilon 1 --delta 1e-6 --test-fraction 0 --n-records 20000`, then the "
        "same command again (a replay). Ledger row: the sum of the byte lengths of the release's columns as "
        "stored. Schema-7 row's result: the same model as the JSON a schema-7 ledger held in the row (the "
        "baseline of the same run). Raw weights: 8 bytes (float64) a column.",
        "",
        *table(cols, rows),
        "",
        f"Claim: the ledger row <= {ROW_LIMIT} bytes and the artefact <= {FILE_RATIO_LIMIT}x the raw weights: "
        f"**{'met' if ok else 'not met'}**; the replay and the export give back the released weights bit for bit, "
        f"nothing charged again: **{'met' if exact else 'not met'}**.",
    ]
    print("\n".join(lines))
    write_md(topic_dir("ledger") / f"{today()}-model_artefacts.md", lines)


if __name__ == "__main__":
    main()
