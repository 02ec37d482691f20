"""A migration of an SQLite ledger to PostgreSQL killed at any point between (or inside) its commits
leaves exactly one of the two ledgers taking charges, and running it again finishes it
(dpdist.privacy.ledger.moves)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dpdist.exceptions import ParameterError, UnknownDataset
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.ledger.migrate import migrate
from dpdist.privacy.loss import Charge, PrivacyLoss


def C(epsilon: float) -> Charge:
    return Charge(PrivacyLoss.approx(epsilon, 0.0), "laplace")


# the child: a migration that SIGKILLs itself right after POINT
_KILLED = r"""
import os, signal, sys
import psycopg
import dpdist.privacy.ledger.migrate as m
from dpdist.privacy.ledger.postgres import PostgresLedger, connection_parameters
source, target, point = sys.argv[1:4]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if point == "the target's commit":  # however the code is arranged: the first write that leaves releases there
    real_write = PostgresLedger.write
    def write(self, body):
        out = real_write(self, body)
        with psycopg.connect(**connection_parameters(target)) as pg:
            if pg.execute("SELECT count(*) FROM releases").fetchone()[0]:
                die()
        return out
    PostgresLedger.write = write
else:  # a step of dpdist.privacy.ledger.migrate (its seams)
    real = getattr(m, point)
    def step(*args, **kwargs):
        out = real(*args, **kwargs)
        die()
        return out
    setattr(m, point, step)
m.migrate(source, target)
print("finished")
"""

# where the child dies, and which ledger takes charges then
POINTS = {
    "announce": "source",  # the source announced, nothing copied
    "_copy": "source",  # inside the target's copy transaction, before its commit
    "the target's commit": "target",  # the copy committed, the source not yet marked
    "copy_into": "target",  # (the same, at the step's seam)
    "mark_moved": "target",  # the source's mark written, its transaction not committed
}


def _source(path: Path) -> Accountant:
    acc = Accountant(path)
    acc.init_budget("ds", 10.0, 1e-6, name="study")
    acc.init_budget("half-own", 1.0, 0.0)
    acc.release("half-own", C(0.2), "old", lambda: [1.0])
    acc.budget_of(SimpleNamespace(dataset_id="half-own", budget_id="ds"))
    acc.release("ds", Charge(PrivacyLoss.gaussian(4.0, 1e-7), "gaussian"), "g", lambda: {"coef": [0.1]})
    acc.charge("ds", C(0.05), "pending")
    return acc


def _takes_charges(location: Path | str, key: str) -> bool:
    try:
        Accountant(location).charge("ds", C(0.01), key)
    except (ParameterError, UnknownDataset):
        return False
    return True


@pytest.mark.parametrize("point", list(POINTS))
def test_a_migration_killed_at_any_point_leaves_one_ledger_taking_charges_and_a_rerun_finishes_it(
    point: str, tmp_path: Path, postgres_ledger_url: str
):
    src = _source(tmp_path / "l.sqlite")
    res = subprocess.run(
        [sys.executable, "-c", _KILLED, str(src.path), postgres_ledger_url, point],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert res.returncode == -signal.SIGKILL, res.stderr
    taking = [
        name
        for name, location in (("source", src.path), ("target", postgres_ledger_url))
        if _takes_charges(location, f"after the kill, on the {name}")
    ]
    assert taking == [POINTS[point]]  # exactly one, never both

    copied = migrate(src.path, postgres_ledger_url)  # the same command again finishes the move
    assert (copied.budgets, copied.links) == (2, 1)
    with pytest.raises(ParameterError, match="was moved to"):
        Accountant(src.path).charge("ds", C(0.01), "after the rerun, on the source")
    dst = Accountant(postgres_ledger_url)
    dst.charge("ds", C(0.01), "after the rerun")
    on_target = [r.key for r in dst.history("ds")]
    on_source = [r.key for r in src.history("ds")]
    assert on_target[: len(on_source)] == on_source  # every record of the source, in its order
    assert on_target[len(on_source) :] == (["after the kill, on the target"] if taking == ["target"] else []) + [
        "after the rerun"
    ]
    assert dst.status("half-own") == src.status("half-own") and dst.split_key("ds") == src.split_key("ds")


def _another_schema(url: str) -> str:
    """A ledger URL on the server of ``url``, in a new empty schema."""
    import re
    import secrets

    import psycopg

    from dpdist.privacy.ledger.postgres import connection_parameters

    name = f"other_{secrets.token_hex(4)}"
    with psycopg.connect(**connection_parameters(url), autocommit=True) as con:
        con.execute(f'CREATE SCHEMA "{name}"')
    return re.sub(r"search_path%3D[^&%]*", f"search_path%3D{name}", url)


def test_a_source_announced_for_one_target_refuses_another(tmp_path: Path, postgres_ledger_url: str, monkeypatch):
    import dpdist.privacy.ledger.migrate as m

    src = _source(tmp_path / "l.sqlite")

    def broken(*args, **kwargs):
        raise ParameterError("the target went away")

    monkeypatch.setattr(m, "copy_into", broken)
    with pytest.raises(ParameterError, match="went away"):
        migrate(src.path, postgres_ledger_url)
    monkeypatch.undo()
    other = _another_schema(postgres_ledger_url)
    with pytest.raises(ParameterError, match="is being moved to"):
        migrate(src.path, other)
    assert _takes_charges(src.path, "still the source's")  # nothing copied: the source keeps the budget
    assert migrate(src.path, postgres_ledger_url).releases == 4
