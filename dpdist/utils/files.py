"""Owner-only files and directories for raw data and privacy state, whatever the umask.

Stores (raw records, their temporaries and CSC buckets) and the ledger (the SQLite file and
its ``-wal``/``-shm``) are made with no group/other permission: directories 0700, files 0600.
The mode is set explicitly after creation, so a permissive umask (0000) cannot widen it and a
strict one cannot lock the owner out. Published outputs (report, plots, released models) are
not made here; they keep the umask's mode (``dpdist.utils.io``).

An existing path is tightened (group/other bits dropped; no bit is ever added, so a read-only
ledger stays read-only) only when it belongs to the current user; a path owned by someone else is
left as it is (changing it is the operator's call).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Any

__all__ = [
    "PRIVATE_DIR",
    "PRIVATE_FILE",
    "private_dir",
    "private_file",
    "open_private",
    "restrict_tree",
    "private_sqlite",
]

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


def _tighten(path: Path, mode: int) -> None:
    """Drop from ``path``'s mode every bit ``mode`` lacks (group/other); never add one (a read-only
    file stays read-only)."""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
        return
    current = stat.S_IMODE(st.st_mode)
    if current & ~mode:
        os.chmod(path, current & mode)


def private_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory only its owner can use (0700); missing parents get the default mode."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        p.mkdir(mode=PRIVATE_DIR)
    except FileExistsError:
        if not p.is_dir():
            raise
    _tighten(p, PRIVATE_DIR)
    return p


def private_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as a file only its owner can read and write (0600), created empty if missing."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)
    except FileExistsError:
        _tighten(p, PRIVATE_FILE)
    else:
        os.fchmod(fd, PRIVATE_FILE)
        os.close(fd)
    return p


def open_private(path: str | os.PathLike[str], mode: str = "wb") -> IO[Any]:
    """A file opened for writing (``wb``/``w``: new or truncated; ``ab``: appended to), readable
    by its owner only (0600)."""
    if mode not in ("wb", "w", "ab"):
        raise ValueError(f"open_private writes only ('wb', 'w' or 'ab'), got {mode!r}")
    how = os.O_APPEND if mode == "ab" else os.O_TRUNC
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | how | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)
    return os.fdopen(fd, mode)


def restrict_tree(root: str | os.PathLike[str]) -> None:
    """Every directory under ``root`` (``root`` included) 0700 and every file 0600.

    For trees written by libraries that create files with the umask's mode (zarr): call it on
    the tree's private temporary directory before the tree is renamed into place.
    """
    root = Path(root)
    _tighten(root, PRIVATE_DIR)
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for d in dirnames:
            _tighten(base / d, PRIVATE_DIR)
        for f in filenames:
            _tighten(base / f, PRIVATE_FILE)


def private_sqlite(path: str | os.PathLike[str]) -> Path:
    """A SQLite database file made owner-only before SQLite opens it.

    Creates the parent directory 0700 when it does not exist (an existing one, which may hold
    other things, is left alone) and the database file 0600, and tightens leftover
    ``-wal``/``-shm``/``-journal`` files. SQLite creates those with the database file's own
    permissions (unix VFS ``findCreateFileMode``), so they stay 0600 too. Through a symbolic link
    (a dangling one included) all of this is done where the link leads, where SQLite opens and
    creates the file.
    """
    p = Path(path)
    real = Path(os.path.realpath(p))
    if not real.parent.exists():
        private_dir(real.parent)
    private_file(real)
    for suffix in _SQLITE_SIDECARS:
        side = Path(f"{real}{suffix}")
        try:
            _tighten(side, PRIVATE_FILE)
        except FileNotFoundError:  # none, or another connection's close removed it just now
            pass
    return p
