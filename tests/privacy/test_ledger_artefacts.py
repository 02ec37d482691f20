"""Released models' weights as binary artefacts (dpdist.privacy.ledger.artefacts): the ledger's row holds
their SHA-256 and where they lie; every read checks it; the artefact is whole before its row commits."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dpdist.exceptions import ParameterError, SolverFailure
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.ledger import artefacts
from dpdist.privacy.loss import Charge, PrivacyLoss

CHARGE = Charge(PrivacyLoss.pure(0.01), "gd")


def model(d: int, nnz: int | None = None, seed: int = 0) -> dict:
    """A released model's result of width ``d`` (every column weighted unless ``nnz``)."""
    rng = np.random.default_rng(seed)
    idx = np.arange(d) if nnz is None else np.sort(rng.choice(d, nnz, replace=False))
    return {
        "indices": idx.tolist(),
        "values": rng.normal(size=idx.size).tolist(),
        "intercept": 0.25,
        "n_features": d,
        "row_norm": None,
        "method": "dp-gd",
    }


def row_of(path: Path, key: str) -> tuple:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT * FROM releases WHERE key = ?", (key,)).fetchone()
    finally:
        con.close()


@pytest.fixture
def acc(tmp_path: Path, monkeypatch) -> Accountant:
    monkeypatch.delenv("DPDIST_ARTEFACTS", raising=False)
    a = Accountant(tmp_path / "ledger.sqlite")
    a.init_budget("ds", 100.0, 1e-6, name="study")
    return a


def test_a_model_is_an_artefact_beside_the_ledger_and_its_row_holds_the_digest(acc: Accountant, tmp_path: Path):
    m = model(50_000)
    out = acc.release("ds", CHARGE, "gd-1", lambda: m)
    assert out == m  # returned whole, bit for bit
    root = tmp_path / "ledger.sqlite.artefacts"
    assert acc.artefacts == root
    (rec,) = acc.history("ds")
    stored = json.loads(rec.result)
    ref = stored[artefacts.MARK]
    assert "indices" not in stored and "values" not in stored and stored["intercept"] == 0.25
    path = root / ref["file"]
    assert ref["file"] == f"{ref['sha256']}.npz" and hashlib.sha256(path.read_bytes()).hexdigest() == ref["sha256"]
    assert (ref["layout"], ref["n_features"], ref["nnz"]) == ("dense", 50_000, 50_000)
    assert path.stat().st_size <= 1.1 * 8 * 50_000 and path.stat().st_mode & 0o777 == 0o600
    assert path.stat().st_mtime == 0  # no time of writing on the file
    assert sum(len(str(v)) for v in row_of(tmp_path / "ledger.sqlite", "gd-1")) <= 4096
    # a replay reads it back (no new draw), and so do `models` readers
    assert acc.release("ds", CHARGE, "gd-1", lambda: pytest.fail("drew again")) == m
    assert acc.result(rec) == m
    # the same weights make the same bytes: the digest is a function of the released weights only
    assert artefacts.split(m, root)[1].digest == ref["sha256"]


def test_a_sparse_model_stores_indices_and_values_and_other_results_stay_in_the_row(acc: Accountant, tmp_path: Path):
    m = model(1_000_000, nnz=300, seed=1)
    assert acc.release("ds", CHARGE, "fw-1", lambda: m) == m
    assert acc.release("ds", CHARGE, "sel-1", lambda: [3, 1, 4]) == [3, 1, 4]
    fw, sel = acc.history("ds")
    ref = json.loads(fw.result)[artefacts.MARK]
    assert (ref["layout"], ref["nnz"]) == ("sparse", 300) and ref["bytes"] < 300 * 16 + 1024
    assert json.loads(sel.result) == [3, 1, 4]  # a selection is no model: whole in its row, as before
    assert acc.result(fw) == m


def test_a_searchs_model_is_an_artefact_and_from_release_of_its_record_reads_it(acc: Accountant):
    from dpdist.gradient_models import DPSGDRegressor

    m = model(30_000, seed=8)
    out = {"candidate": 0, "model": m, "validation_score": 2.5}
    assert acc.release("ds", CHARGE, "search", lambda: out) == out
    (rec,) = acc.history("ds")
    stored = json.loads(rec.result)
    assert stored["validation_score"] == 2.5 and artefacts.reference(stored["model"])["nnz"] == 30_000
    assert len(rec.result) < 1024
    # a ledger record's model, as `budget history --json` shows it, rebuilt: its weights from the artefact
    est = DPSGDRegressor.from_release(stored["model"])
    np.testing.assert_array_equal(est.coef_, np.asarray(m["values"]))


def test_a_retry_removes_the_artefact_an_interrupted_attempt_left_before_it_draws(acc: Accountant, monkeypatch):
    first, second = model(2000, seed=9), model(2000, seed=10)
    real = Accountant._record

    def killed(self, dataset, key, encoded):
        raise KeyboardInterrupt  # after the artefact is written, before its row records it

    monkeypatch.setattr(Accountant, "_record", killed)
    with pytest.raises(KeyboardInterrupt):
        acc.release("ds", CHARGE, "gd", lambda: first)
    left = artefacts.split(first, acc.artefacts)[1].ref["file"]
    assert (acc.artefacts / left).is_file()  # the unrecorded draw is on disk, listed by its attempt
    monkeypatch.setattr(Accountant, "_record", real)
    assert acc.release("ds", CHARGE, "gd", lambda: second) == second  # charged once, drawn again
    assert not (acc.artefacts / left).exists()  # removed before the new draw
    assert [p.name for p in acc.artefacts.glob("*.npz")] == [artefacts.split(second, acc.artefacts)[1].ref["file"]]
    assert not list((acc.artefacts / ".pending").iterdir()) and acc.status("ds").releases == 1


def test_an_artefact_a_recorded_row_refers_to_is_never_removed(acc: Accountant):
    m = model(500, seed=11)
    acc.release("ds", CHARGE, "a", lambda: m)
    acc.charge("ds", CHARGE, "b")
    (ref,) = artefacts.references(json.loads(acc.history("ds")[0].result))
    name = acc.name("ds")
    attempt = artefacts.Attempt(acc.artefacts, str(acc.path.resolve()), name, "b")
    with attempt:  # an attempt at "b" killed after listing a file of the same bytes as "a"'s
        os.write(attempt._fd, (ref["file"] + "\n").encode())
    assert acc.release("ds", CHARGE, "b", lambda: [1]) == [1]
    assert acc.result(acc.history("ds")[0]) == m  # "a"'s file kept: a row refers to it


def _listed_by_a_killed_attempt(acc: Accountant, key: str, *names: str) -> None:
    """What an attempt at ``key`` SIGKILLed after listing ``names`` leaves in its list."""
    with artefacts.Attempt(acc.artefacts, str(acc.path.resolve()), acc.name("ds"), key) as attempt:
        for name in names:
            attempt._list(name)


def test_a_retry_removes_the_temporary_file_a_kill_left_holding_the_whole_draw(acc: Accountant):
    first, second = model(300, seed=20), model(300, seed=21)
    art = artefacts.split(first, acc.artefacts)[1]
    acc.artefacts.mkdir(parents=True, exist_ok=True, mode=0o700)  # owner-only, as dpdist makes it
    tmp = acc.artefacts / f".{art.digest}.0123456789ab.tmp"
    tmp.write_bytes(art.payload)  # killed after the write, before the link: the whole unrecorded draw
    linked = artefacts.split(model(300, seed=22), acc.artefacts)[1]
    tmp2 = acc.artefacts / f".{linked.digest}.ba9876543210.tmp"
    tmp2.write_bytes(linked.payload)
    os.link(tmp2, acc.artefacts / linked.ref["file"])  # killed after the link, before the artefact was listed
    acc.charge("ds", CHARGE, "gd")
    _listed_by_a_killed_attempt(acc, "gd", tmp.name, tmp2.name)
    assert acc.release("ds", CHARGE, "gd", lambda: second) == second
    left = sorted(p.name for p in acc.artefacts.iterdir() if p.name != ".pending")
    assert left == [artefacts.split(second, acc.artefacts)[1].ref["file"]]


def test_the_attempt_that_loses_the_race_to_record_removes_its_own_draw(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("DPDIST_ARTEFACTS", str(tmp_path / "alice"))
    alice = Accountant(tmp_path / "ledger.sqlite")
    alice.init_budget("ds", 10.0, 1e-6)
    monkeypatch.setenv("DPDIST_ARTEFACTS", str(tmp_path / "bob"))
    bob = Accountant(tmp_path / "ledger.sqlite")
    hers, his = model(400, seed=30), model(400, seed=31)

    def slow():  # bob's run of the same key records first while alice's computes
        assert bob.release("ds", CHARGE, "gd", lambda: his) == his
        return hers

    assert alice.release("ds", CHARGE, "gd", slow) == his  # the recorded draw, read from bob's directory
    assert list((tmp_path / "alice").glob("*.npz")) == []  # her draw of the one charge is not kept
    assert [p.name for p in (tmp_path / "bob").glob("*.npz")] == [artefacts.split(his, bob.artefacts)[1].ref["file"]]
    assert alice.status("ds").releases == 1


def test_a_file_an_attempt_found_there_is_not_listed_so_its_retry_leaves_it(acc: Accountant, monkeypatch):
    empty = {**model(50, nnz=0), "n_features": 50}
    art = artefacts.split(empty, acc.artefacts)[1]
    acc.charge("ds", CHARGE, "b")
    with artefacts.Attempt(acc.artefacts, str(acc.path.resolve()), acc.name("ds"), "b") as b:
        b.write(art)  # "b" made the file and is computing on; its row not yet recorded
        real = Accountant._record

        def killed(self, dataset, key, encoded):
            raise KeyboardInterrupt

        monkeypatch.setattr(Accountant, "_record", killed)
        with pytest.raises(KeyboardInterrupt):  # "a" finds the same bytes there, and is killed
            acc.release("ds", CHARGE, "a", lambda: {**model(70, nnz=0), "n_features": 50})
        monkeypatch.setattr(Accountant, "_record", real)
        assert acc.release("ds", CHARGE, "a", lambda: [2]) == [2]  # "a"'s retry
        assert (acc.artefacts / art.ref["file"]).is_file()  # "b"'s file stays
        encoded = json.dumps(artefacts.split_models(empty, acc.artefacts)[0], sort_keys=True)
        assert acc._record("ds", "b", encoded) == encoded
    assert acc.result(next(r for r in acc.history("ds") if r.key == "b")) == empty


def test_a_retry_waits_for_an_attempt_holding_a_file_it_made_before_removing_it(acc: Accountant):
    import threading

    empty = {**model(50, nnz=0), "n_features": 50}
    art = artefacts.split(empty, acc.artefacts)[1]
    acc.charge("ds", CHARGE, "a")
    artefacts.write(acc.artefacts, art)
    _listed_by_a_killed_attempt(acc, "a", art.ref["file"])  # "a" made it and was killed
    acc.charge("ds", CHARGE, "b")
    with artefacts.Attempt(acc.artefacts, str(acc.path.resolve()), acc.name("ds"), "b") as b:
        b.write(art)  # "b" finds it there: held until its row is recorded
        retry = threading.Thread(target=acc.release, args=("ds", CHARGE, "a", lambda: [3]))
        retry.start()
        retry.join(1.0)
        assert retry.is_alive()  # "a"'s retry waits for "b"
        encoded = json.dumps(artefacts.split_models(empty, acc.artefacts)[0], sort_keys=True)
        acc._record("ds", "b", encoded)
    retry.join(30)
    assert not retry.is_alive() and (acc.artefacts / art.ref["file"]).is_file()  # a row refers to it: kept
    assert acc.recorded("ds", "a")


def test_an_unusable_pending_directory_is_refused_before_the_charge(acc: Accountant, monkeypatch):
    acc.artefacts.mkdir(mode=0o700)
    (acc.artefacts / ".pending").write_text("")  # not a directory
    with pytest.raises(ParameterError, match="cannot hold a release's attempt.*nothing was charged"):
        acc.release("ds", CHARGE, "gd", lambda: model(10))
    (acc.artefacts / ".pending").unlink()

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(artefacts.fcntl, "flock", no_flock)
    with pytest.raises(ParameterError, match="No locks available.*nothing was charged"):
        acc.release("ds", CHARGE, "gd", lambda: model(10))
    assert acc.status("ds").releases == 0 and acc.history("ds") == []


def test_a_changed_or_missing_artefact_is_refused_naming_it(acc: Accountant, tmp_path: Path):
    m = model(1000)
    acc.release("ds", CHARGE, "gd-1", lambda: m)
    (rec,) = acc.history("ds")
    path = acc.artefacts / json.loads(rec.result)[artefacts.MARK]["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1  # one bit of one weight
    path.write_bytes(bytes(data))
    with pytest.raises(ParameterError, match=f"{path}.*does not match the SHA-256"):
        acc.result(rec)
    with pytest.raises(ParameterError, match="does not match"):
        acc.release("ds", CHARGE, "gd-1", lambda: m)
    path.unlink()
    with pytest.raises(ParameterError, match="artefact .* is missing"):
        acc.result(rec)


def test_the_cli_reads_and_checks_the_artefact_exit_2_on_a_mismatch(acc: Accountant, tmp_path: Path):
    from dpdist.cli import main

    m = model(20)
    acc.release("ds", CHARGE, "gd-1", lambda: m)
    ledger = str(tmp_path / "ledger.sqlite")
    out = tmp_path / "model.json"
    assert main(["models", "export", "gd-1", "--ledger", ledger, "--out", str(out)]) == 0
    assert json.loads(out.read_text())["result"] == m  # an export holds the weights: from_release takes it
    from dpdist.cli.models import load_released

    assert load_released("gd-1", ledger)["result"] == m == load_released(str(out))["result"]
    (rec,) = acc.history("ds")
    path = acc.artefacts / json.loads(rec.result)[artefacts.MARK]["file"]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10  # one bit of one weight
    path.write_bytes(bytes(data))
    test = tmp_path / "test.svm"
    test.write_text("1 1:0.5\n-1 2:0.5\n")
    for argv in (
        ["models", "show", "gd-1", "--ledger", ledger],
        ["models", "export", "gd-1", "--ledger", ledger, "--out", str(tmp_path / "again.json")],
        ["evaluate", "gd-1", "--ledger", ledger, "--public-test", str(test)],
    ):
        assert main(argv) == 2
    assert not (tmp_path / "again.json").exists()


def test_an_unwritable_artefact_directory_is_refused_before_the_charge(tmp_path: Path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("DPDIST_ARTEFACTS", str(blocker / "artefacts"))  # no directory can be made there
    acc = Accountant(tmp_path / "ledger.sqlite")
    acc.init_budget("ds", 1.0, 0.0)
    with pytest.raises(ParameterError, match="artefact directory .* cannot be written"):
        acc.release("ds", CHARGE, "gd-1", lambda: model(10))
    assert acc.status("ds").releases == 0


def test_a_model_whose_artefact_the_disk_refuses_is_a_recorded_failure(tmp_path: Path, file_size_limit):
    code = (
        "import sys, numpy as np\n"
        "from dpdist.privacy.accountant import Accountant\n"
        "from dpdist.privacy.loss import Charge, PrivacyLoss\n"
        "acc = Accountant(sys.argv[1]); acc.init_budget('ds', 10.0, 1e-6)\n"
        "m = {'indices': list(range(200000)), 'values': [1.5] * 200000, 'n_features': 200000, 'intercept': 0.0}\n"
        "acc.release('ds', Charge(PrivacyLoss.pure(0.1), 'gd'), 'big', lambda: m)\n"
    )
    ledger = tmp_path / "ledger.sqlite"
    env = {k: v for k, v in os.environ.items() if k != "DPDIST_ARTEFACTS"}
    res = subprocess.run(
        [sys.executable, "-c", code, str(ledger)],
        preexec_fn=file_size_limit(1_000_000),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert res.returncode == 1 and "could not be written" in res.stderr
    acc = Accountant(ledger)
    with pytest.raises(SolverFailure, match="could not be written"):
        acc.release("ds", Charge(PrivacyLoss.pure(0.1), "gd"), "big", lambda: pytest.fail("drew again"))
    assert not [p for p in acc.artefacts.iterdir() if p.suffix == ".npz"]


def _as_v7(path: Path, key: str, result: dict) -> tuple:
    """Record ``result`` whole in ``key``'s row, as dpdist wrote schema 7, and mark the ledger v7."""
    con = sqlite3.connect(path)
    con.execute("UPDATE releases SET result = ? WHERE key = ?", (json.dumps(result, sort_keys=True), key))
    con.execute("PRAGMA user_version = 7")
    con.commit()
    rows = con.execute("SELECT * FROM releases ORDER BY id").fetchall()
    con.close()
    return rows


def test_a_v7_ledgers_json_models_move_into_artefacts_and_every_record_is_kept(acc: Accountant, tmp_path: Path):
    path = tmp_path / "ledger.sqlite"
    dense, sparse = model(3000, seed=2), model(90_000, nnz=40, seed=3)
    acc.release("ds", CHARGE, "sel", lambda: [1, 2])
    acc.charge("ds", CHARGE, "dense")
    acc.charge("ds", CHARGE, "sparse")
    acc.charge("ds", CHARGE, "pending")  # charged, never recorded
    _as_v7(path, "dense", dense)
    before = _as_v7(path, "sparse", sparse)
    assert len(before[1][7]) > 3000 * 10  # the weights were in the row
    before_status = acc.status("ds")
    acc = Accountant(path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 8
    after = con.execute("SELECT * FROM releases ORDER BY id").fetchall()
    con.close()
    assert len(after) == len(before) == 4
    result_col = 7
    for b, a in zip(before, after):
        assert b[:result_col] + b[result_col + 1 :] == a[:result_col] + a[result_col + 1 :]  # every other column
    assert after[0][result_col] == before[0][result_col] and after[3][result_col] is None
    assert all(len(a[result_col]) < 1024 for a in after[1:3])
    assert [acc.result(r) for r in acc.history("ds")] == [[1, 2], dense, sparse, None]
    assert acc.status("ds") == before_status
    # the guards are back: a recorded outcome cannot be changed after the upgrade
    con = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        con.execute("UPDATE releases SET result = '[]' WHERE key = 'dense'")
    con.close()
    Accountant(path)  # opening again is a no-op


def test_an_interrupted_v8_upgrade_changes_no_row(acc: Accountant, tmp_path: Path, monkeypatch):
    path = tmp_path / "ledger.sqlite"
    acc.charge("ds", CHARGE, "a")
    acc.charge("ds", CHARGE, "b")
    _as_v7(path, "a", model(100, seed=4))
    before = _as_v7(path, "b", model(100, seed=5))
    calls = []

    def dies_on_second(root, artefact):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(root, artefact)

    real = artefacts.write
    monkeypatch.setattr(artefacts, "write", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        Accountant(path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 7
    assert con.execute("SELECT * FROM releases ORDER BY id").fetchall() == before
    con.close()
    monkeypatch.undo()
    acc = Accountant(path)  # the upgrade runs again, whole (the same bytes: the same names)
    assert [acc.result(r) for r in acc.history("ds")] == [model(100, seed=4), model(100, seed=5)]


_KILLED = """
import sys, numpy as np
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss
acc = Accountant(sys.argv[1])
acc.init_budget("ds", 1e6, 1e-6)
i = 0
while True:
    w = np.random.default_rng().normal(size=300_000)
    m = {"indices": list(range(w.size)), "values": w.tolist(), "n_features": w.size, "intercept": 0.0}
    acc.release("ds", Charge(PrivacyLoss.pure(0.01), "gd"), f"{sys.argv[2]}-{i}", lambda: m)
    print(i, flush=True)
    i += 1
"""


def check_every_row_has_its_artefact(acc: Accountant) -> int:
    """Every recorded model's artefact is whole (its digest checked); the number of models."""
    n = 0
    for rec in acc.history(acc.resolve(acc.datasets()[0].name)):
        if rec.result is not None and artefacts.reference(json.loads(rec.result)) is not None:
            assert len(acc.result(rec)["values"]) == 300_000
            n += 1
    return n


def _kill_at_random_points(location: str, tmp_path: Path, rounds: int = 6) -> Accountant:
    rng = np.random.default_rng()
    for r in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", _KILLED, location, f"r{r}"], stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()  # at least one release recorded: the loop is running
        time.sleep(float(rng.uniform(0.0, 0.6)))  # then a random point of a later release
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    return Accountant(location)


def test_sigkill_at_random_points_leaves_no_row_without_its_artefact_sqlite(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("DPDIST_ARTEFACTS", raising=False)
    acc = _kill_at_random_points(str(tmp_path / "ledger.sqlite"), tmp_path)
    assert check_every_row_has_its_artefact(acc) >= 6


def test_sigkill_at_random_points_leaves_no_row_without_its_artefact_postgres(tmp_path: Path, postgres_ledger_url):
    acc = _kill_at_random_points(postgres_ledger_url, tmp_path)
    assert acc.artefacts == Path(os.environ["DPDIST_ARTEFACTS"])
    assert check_every_row_has_its_artefact(acc) >= 6


def test_a_v7_postgres_ledger_is_upgraded_and_replays(postgres_ledger_url):
    import psycopg

    from dpdist.privacy.ledger.postgres import connection_parameters

    acc = Accountant(postgres_ledger_url)
    acc.init_budget("ds", 10.0, 1e-6)
    acc.charge("ds", CHARGE, "old")
    m = model(5000, seed=6)
    with psycopg.connect(**connection_parameters(postgres_ledger_url), autocommit=True) as pg:
        pg.execute("UPDATE releases SET result = %s WHERE key = 'old'", (json.dumps(m),))
        pg.execute("UPDATE dpdist_ledger SET version = 7")
    from dpdist.privacy.ledger import postgres

    postgres._prepared.clear()  # as a new process opens it
    acc = Accountant(postgres_ledger_url)
    (rec,) = acc.history("ds")
    assert artefacts.reference(json.loads(rec.result)) is not None and acc.result(rec) == m
    assert acc.release("ds", CHARGE, "old", lambda: pytest.fail("drew again")) == m
    with psycopg.connect(**connection_parameters(postgres_ledger_url), autocommit=True) as pg:
        with pytest.raises(psycopg.Error, match="append-only"):
            pg.execute("UPDATE releases SET result = '[]' WHERE key = 'old'")


def test_migrate_to_postgres_carries_the_artefacts(tmp_path: Path, postgres_ledger_url, monkeypatch):
    from dpdist.privacy.ledger.migrate import migrate

    monkeypatch.delenv("DPDIST_ARTEFACTS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the PostgreSQL ledger's default directory
    src = Accountant(tmp_path / "ledger.sqlite")
    src.init_budget("ds", 10.0, 1e-6, name="study")
    m = model(7000, seed=7)
    src.release("ds", CHARGE, "gd", lambda: m)
    assert not (tmp_path / "home").exists()
    migrate(tmp_path / "ledger.sqlite", postgres_ledger_url)
    dst = Accountant(postgres_ledger_url)
    assert dst.artefacts == tmp_path / "home" / ".dpdist" / "artefacts"
    (rec,) = dst.history(dst.resolve("study"))
    ref = json.loads(rec.result)[artefacts.MARK]
    assert (dst.artefacts / ref["file"]).is_file()
    (src.artefacts / ref["file"]).unlink()  # the target reads its own copy
    assert dst.result(rec) == m


def test_migrate_refuses_a_source_whose_artefact_is_missing_and_commits_nothing(
    tmp_path: Path, postgres_ledger_url, monkeypatch
):
    from dpdist.privacy.ledger.migrate import migrate

    monkeypatch.delenv("DPDIST_ARTEFACTS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    src = Accountant(tmp_path / "ledger.sqlite")
    src.init_budget("ds", 10.0, 1e-6)
    src.release("ds", CHARGE, "gd", lambda: model(100))
    for p in src.artefacts.glob("*.npz"):
        p.unlink()
    with pytest.raises(ParameterError, match="artefact .* is missing"):
        migrate(tmp_path / "ledger.sqlite", postgres_ledger_url)
    assert Accountant(postgres_ledger_url).datasets() == []


def test_the_artefact_directory_is_owner_only_whatever_the_umask(tmp_path) -> None:
    """mkdir's mode is the last component's: the root made on the way to ``.pending`` took the umask's
    (0777 under umask 0), opening every released model's file names and times to other users."""
    import os
    import stat

    from dpdist.privacy.ledger import artefacts

    old = os.umask(0)
    try:
        root = tmp_path / "ledger.sqlite.artefacts"
        artefacts.check_writable(root)
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert stat.S_IMODE((root / ".pending").stat().st_mode) == 0o700


def test_an_artefact_directory_open_to_others_is_refused_before_the_charge(tmp_path) -> None:
    """Others who can list the directory read each file's inode change and birth times: when its release
    finished (a private search's duration is secret)."""
    import os

    from dpdist.exceptions import ParameterError
    from dpdist.privacy.ledger import artefacts

    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o755)
    with pytest.raises(ParameterError, match="open to other users"):
        artefacts.check_writable(root)
    os.chmod(root, 0o700)
    artefacts.check_writable(root)
