"""An SQLite ledger's file as an operator meets it: damaged (one line naming it, exit 2), read-only (a
0444 file or a read-only mount: the reading commands read it and leave its mode alone)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss

READING = (
    ["budget", "show"],
    ["budget", "show", "--dataset", "study"],
    ["budget", "history", "--dataset", "study"],
    ["models", "list"],
)


def _ledger(path: Path) -> Path:
    acc = Accountant(path)
    acc.init_budget("ds", 10.0, 1e-6, name="study")
    for i in range(40):
        acc.release("ds", Charge(PrivacyLoss.gaussian(30.0, 1e-8), "gaussian"), f"r{i}", lambda: [0.5] * 20)
    return path


def _dpdist(capsys: pytest.CaptureFixture[str], *argv: str) -> subprocess.CompletedProcess[str]:
    """``dpdist ARGV`` in this process: its exit code, stdout and stderr."""
    from dpdist.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(list(argv), code, out.out, out.err)


@pytest.mark.parametrize("damage", ["pages", "header"])
def test_a_damaged_ledger_exits_2_in_one_line_naming_the_file(tmp_path: Path, damage: str, capsys):
    path = _ledger(tmp_path / "l.sqlite")
    data = bytearray(path.read_bytes())
    start, stop = (8192, len(data)) if damage == "pages" else (100, 4096)
    for off in range(start, stop):
        data[off] = (off * 37) & 0xFF  # what a bad disk or a half-copied file leaves
    path.write_bytes(bytes(data))
    for argv in (*READING, ["ledger", "init"]):
        res = _dpdist(capsys, *argv, "--ledger", str(path))
        assert res.returncode == 2, (argv, res.stderr)
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
        assert f"ledger {path} is damaged" in res.stderr and "restore it from a backup" in res.stderr


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_read_only_ledger_file_reads_and_keeps_its_mode(tmp_path: Path, capsys):
    path = _ledger(tmp_path / "ledger" / "l.sqlite")
    os.chmod(path, 0o444)
    before = sorted(os.listdir(path.parent))
    for argv in READING:
        res = _dpdist(capsys, *argv, "--ledger", str(path), "--json")
        assert res.returncode == 0, (argv, res.stderr)
        assert _mode(path) == 0o444, argv  # not made owner-writable (0600) by a command that only reads
    assert sorted(os.listdir(path.parent)) == before  # no -wal or -shm made beside it
    history = json.loads(
        _dpdist(capsys, "budget", "history", "--dataset", "study", "--ledger", str(path), "--json").stdout
    )
    assert len(history["releases"]) == 40 and history["releases"][-1]["result"] == [0.5] * 20


def test_a_command_that_writes_never_makes_a_read_only_ledger_writable(tmp_path: Path):
    path = _ledger(tmp_path / "l.sqlite")
    os.chmod(path, 0o444)
    Accountant(path)  # opened to charge: group/other bits dropped, no bit added
    assert _mode(path) == 0o400
    if os.geteuid() != 0:  # (root writes any file)
        from dpdist.exceptions import LedgerUnavailable

        with pytest.raises(LedgerUnavailable, match="readonly"):
            Accountant(path).charge("ds", Charge(PrivacyLoss.pure(0.1), "laplace"), "new")


def _read_only_mount_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs unshare -m (root) for a read-only bind mount")
def test_a_ledger_on_a_read_only_mount_reads(tmp_path: Path):
    """The ledger's directory bind-mounted read-only in a mount namespace of its own (an archive, a
    snapshot): the file, its directory and a -wal are all impossible to write, even for root."""
    path = _ledger(tmp_path / "archive" / "l.sqlite")
    directory = path.parent
    script = (
        'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && touch "$0/probe" 2>/dev/null && exit 9; exec "$@"'
    )
    for argv in (READING[0], READING[2]):
        cli = [sys.executable, "-c", "import sys; from dpdist.cli import main; sys.exit(main())", *argv]
        res = subprocess.run(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                str(directory),
                *cli,
                "--ledger",
                str(path),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert res.returncode == 0, (argv, res.returncode, res.stderr)
        assert "study" in res.stdout or "gaussian" in res.stdout
