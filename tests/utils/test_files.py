"""Owner-only raw data and privacy state whatever the umask; published files keep the umask's mode.

Each test runs under umask 0022 (the usual default: new files world-readable) and 0000 (new
files world-writable): stores from every ingest path (svmlight, table, synthetic, split), their
temporaries and CSC buckets, and the ledger with its -wal/-shm must have no group/other bit.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import dpdist.data.store.buckets as store_buckets
from dpdist.data.ingest import ingest_svmlight
from dpdist.data.split import split_store
from dpdist.data.store import StoreWriter, open_store
from dpdist.data.synthetic import write_synthetic
from dpdist.data.tables import ingest_table
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.utils.files import open_private, private_dir, private_file, private_sqlite, restrict_tree
from dpdist.utils.io import write_text_atomic

UMASKS = [0o022, 0o000]


@pytest.fixture(params=UMASKS, ids=lambda m: f"umask{m:04o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def open_to_others(root: Path) -> list[str]:
    """Every path under ``root`` (``root`` included) with a group/other bit, with its mode."""
    paths = [root, *root.rglob("*")]
    assert len(paths) > 1 or root.is_file()
    return [f"{p} {mode(p):04o}" for p in paths if mode(p) & 0o077]


def test_helpers_make_owner_only_paths(tmp_path: Path, umask: int) -> None:
    d = private_dir(tmp_path / "pub" / "priv")
    assert mode(d) == 0o700 and mode(tmp_path / "pub") == 0o777 & ~umask  # a missing parent: default mode
    f = private_file(d / "f")
    assert mode(f) == 0o600 and f.stat().st_size == 0
    with open_private(d / "g") as fh:
        fh.write(b"x")
    assert mode(d / "g") == 0o600
    loose = tmp_path / "loose"
    (loose / "sub").mkdir(parents=True)
    (loose / "sub" / "a").write_text("a")
    os.chmod(loose / "sub" / "a", 0o666)
    restrict_tree(loose)
    assert open_to_others(loose) == [] and mode(loose / "sub") == 0o700 and mode(loose / "sub" / "a") == 0o600
    os.chmod(f, 0o644)
    private_file(f)  # an existing file of ours is tightened, its content kept
    assert mode(f) == 0o600


def test_published_files_keep_the_umask_mode(tmp_path: Path, umask: int) -> None:
    p = write_text_atomic(tmp_path / "report.md", "# report")
    assert mode(p) == 0o666 & ~umask  # readable by whoever the umask lets read it


def test_every_ingest_path_writes_owner_only_stores(
    tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    buckets: list[int] = []

    def recording_open_private(path, mode_="wb"):
        f = open_private(path, mode_)
        buckets.append(mode(Path(path)))
        return f

    monkeypatch.setattr(store_buckets, "open_private", recording_open_private)
    stores = tmp_path / "stores"
    stores.mkdir()
    rng = np.random.default_rng(0)
    X = sp.random(300, 50, density=0.1, format="csr", random_state=1)
    y = np.where(rng.random(300) < 0.5, -1.0, 1.0)
    from sklearn.datasets import dump_svmlight_file

    dump_svmlight_file(X, y, str(tmp_path / "data.svm"))
    ingest_svmlight(
        tmp_path / "data.svm", stores / "svm", n_features=50, zero_based="yes"
    )  # scikit-learn writes 0-based
    (tmp_path / "t.csv").write_text("y,a,b\n" + "".join(f"{i % 2},{i},{i * 0.5}\n" for i in range(40)))
    ingest_table(tmp_path / "t.csv", stores / "table", target="y")
    write_synthetic("fan-lv", stores / "synth", seed=1, n=60, d=80)
    split_store(stores / "svm", stores / "train", stores / "test", 0.25, bytes(32))

    # a store being written: its temporary directory is private from the first byte
    w = StoreWriter(stores / "pending")
    w.append(X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data, y)
    assert mode(w.tmp) == 0o700
    w.finish(n_features=50)

    names = sorted(p.name for p in stores.iterdir())
    assert names == ["pending", "svm", "synth", "table", "test", "train"]  # no temporaries left
    for name in names:
        assert open_to_others(stores / name) == [], name
        assert mode(stores / name) == 0o700
        open_store(stores / name)  # and the owner still reads it
    assert buckets and set(buckets) == {0o600}  # every CSC bucket file, at creation


def test_ledger_and_its_wal_are_owner_only(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "dpdist-home" / "ledger.sqlite"
    acc = Accountant(path)
    # a reader holding the database open keeps -wal and -shm on disk while the accountant writes
    reader = sqlite3.connect(path)
    reader.execute("SELECT count(*) FROM sqlite_master").fetchall()
    try:
        acc.init_budget("ds", epsilon=1.0, delta=1e-6)
        acc.charge("ds", Charge(PrivacyLoss.pure(0.5), "test"), key="k1")
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert all(p.exists() for p in files)
        assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
        assert mode(path.parent) == 0o700  # the directory the ledger created
    finally:
        reader.close()

    old = tmp_path / "old.sqlite"  # a ledger written before this change, world-readable
    Accountant(old).init_budget("ds", epsilon=1.0, delta=1e-6)
    os.chmod(old, 0o644)
    assert Accountant(old).status("ds").epsilon_spent == 0.0 and mode(old) == 0o600


def test_ledger_in_an_existing_directory_leaves_the_directory_alone(tmp_path: Path, umask: int) -> None:
    shared = tmp_path / "results"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    private_sqlite(shared / "ledger.sqlite")
    assert mode(shared) == 0o755 and mode(shared / "ledger.sqlite") == 0o600


def test_a_sidecar_removed_by_another_connections_close_is_no_error(tmp_path: Path, monkeypatch) -> None:
    import dpdist.utils.files as files

    db = tmp_path / "ledger.sqlite"
    db.write_bytes(b"")
    Path(f"{db}-wal").write_bytes(b"x")
    real = files._tighten

    def racing(path: Path, mode: int) -> None:  # the last connection closes between the look and the chmod
        if path.name.endswith("-wal"):
            path.unlink()
        real(path, mode)

    monkeypatch.setattr(files, "_tighten", racing)
    assert private_sqlite(db) == db and not Path(f"{db}-wal").exists()


@pytest.mark.parametrize("existing", [False, True], ids=["dangling", "to-a-directory"])
def test_a_ledger_made_through_a_symlink_is_owner_only(tmp_path: Path, umask: int, existing: bool) -> None:
    """SQLite follows the link and creates the file where it leads: that file is made 0600 first."""
    target = tmp_path / "elsewhere" / "ledger.sqlite"
    if existing:
        target.parent.mkdir()
    link = tmp_path / "ledger.sqlite"
    link.symlink_to(target)
    acc = Accountant(link)
    acc.init_budget("ds", epsilon=1.0, delta=0.0)
    acc.charge("ds", Charge(PrivacyLoss.pure(0.5), "test"), key="k1")
    assert link.is_symlink() and target.is_file()
    assert mode(target) == 0o600
    assert all(mode(p) == 0o600 for p in target.parent.iterdir() if p.name.startswith("ledger.sqlite"))
    if not existing:
        assert mode(target.parent) == 0o700  # the directory the ledger made
