"""An SQLite ledger on a network filesystem is refused (exit 2), naming the filesystem and the ways out."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.ledger import netfs
from dpdist.privacy.loss import Charge, PrivacyLoss


def _fake_table(tmp_path: Path, fstype: str, point: Path, source: str = "fileserver:/export/home") -> Path:
    """A mount table with the root on ext4 and ``point`` mounted from ``source`` as ``fstype``."""
    table = tmp_path / "mountinfo"
    escaped = str(point).replace(" ", "\\040")
    table.write_text(
        "22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        f"95 22 0:52 / {escaped} rw,relatime shared:40 - {fstype} {source} rw,vers=4.2,addr=10.0.0.2\n"
    )
    return table


@pytest.mark.parametrize("fstype", ["nfs4", "lustre", "gpfs", "fuse.sshfs"])
def test_an_sqlite_ledger_on_a_network_filesystem_is_refused(tmp_path: Path, monkeypatch, fstype: str):
    home = tmp_path / "my home"
    home.mkdir()
    monkeypatch.setattr(netfs, "MOUNTINFO", _fake_table(tmp_path, fstype, home))
    ledger = home / ".dpdist" / "ledger.sqlite"  # not made yet: its nearest existing ancestor decides
    with pytest.raises(ParameterError) as err:
        Accountant(ledger)
    text = str(err.value)
    assert f"network filesystem ({fstype}, fileserver:/export/home mounted at {home})" in text
    assert "local disk" in text and "postgresql://" in text
    assert not ledger.parent.exists()  # nothing was made there


def test_a_local_filesystem_and_a_missing_mount_table_are_accepted(tmp_path: Path, monkeypatch):
    elsewhere = tmp_path / "share"
    elsewhere.mkdir()
    monkeypatch.setattr(netfs, "MOUNTINFO", _fake_table(tmp_path, "nfs", elsewhere))
    Accountant(tmp_path / "local" / "ledger.sqlite").init_budget("ds", 1.0, 0.0)  # on the ext4 root: fine
    monkeypatch.setattr(netfs, "MOUNTINFO", tmp_path / "no-such-table")  # not Linux: nothing detected
    assert netfs.mount_of(tmp_path) is None
    Accountant(tmp_path / "local" / "ledger.sqlite").charge("ds", Charge(PrivacyLoss.pure(0.1), "laplace"), "k")


def test_the_longest_mount_point_wins_and_a_later_mount_covers_an_earlier(tmp_path: Path):
    for sub in ("home/alice", "home/scratch", "data"):
        (tmp_path / sub).mkdir(parents=True)
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 253:1 / / rw - ext4 /dev/vda rw\n"
        f"30 22 0:40 / {tmp_path}/home rw - nfs4 srv:/home rw\n"
        f"31 30 0:41 / {tmp_path}/home/scratch rw - xfs /dev/vdb rw\n"
        f"40 22 0:42 / {tmp_path}/data rw - xfs /dev/vdc rw\n"
        f"41 22 0:43 / {tmp_path}/data rw - lustre mgs@tcp:/fs rw\n"
    )
    home = netfs.network_mount(tmp_path / "home/alice/new/ledger.sqlite", table)
    assert home is not None and (home.fstype, home.source) == ("nfs4", "srv:/home")
    assert netfs.network_mount(tmp_path / "home/scratch/ledger.sqlite", table) is None
    assert netfs.network_mount(tmp_path / "elsewhere.sqlite", table) is None
    data = netfs.mount_of(tmp_path / "data/x", table)
    assert data is not None and data.fstype == "lustre" and data.network


def test_the_cli_exits_2_with_the_refusal(tmp_path: Path, monkeypatch, capsys):
    from dpdist.cli import main

    share = tmp_path / "share"
    share.mkdir()
    Accountant(share / "ledger.sqlite").init_budget("ds", 1.0, 0.0)  # made before the share was mounted
    monkeypatch.setattr(netfs, "MOUNTINFO", _fake_table(tmp_path, "nfs4", share))
    code = main(["budget", "show", "--ledger", str(share / "ledger.sqlite")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "network filesystem (nfs4" in err and "local disk" in err and "postgresql://" in err


@pytest.mark.parametrize("link", ["file", "directory"])
def test_a_dangling_symlink_to_a_network_filesystem_is_refused(tmp_path: Path, monkeypatch, link: str):
    """The link is on a local disk, the file it names on NFS and not made yet: SQLite would create it
    there, so the mount of where the link leads decides."""
    share = tmp_path / "share"
    share.mkdir()
    monkeypatch.setattr(netfs, "MOUNTINFO", _fake_table(tmp_path, "nfs4", share))
    local = tmp_path / "local"
    local.mkdir()
    if link == "file":
        ledger = local / "ledger.sqlite"
        ledger.symlink_to(share / "dpdist" / "ledger.sqlite")  # dangling: nothing there yet
    else:
        (local / "dpdist").symlink_to(share / "dpdist")
        ledger = local / "dpdist" / "ledger.sqlite"
    with pytest.raises(ParameterError, match=r"network filesystem \(nfs4"):
        Accountant(ledger)
    assert list(share.iterdir()) == []  # nothing was made where the link leads
