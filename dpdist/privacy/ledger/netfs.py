"""Whether a path lies on a network filesystem, read from the mount table (``/proc/self/mountinfo``).

SQLite's documentation says its WAL mode does not work over a network filesystem (the WAL index is
shared memory on one host) and that POSIX advisory locks over NFS are unreliable: two processes on
two hosts sharing one ledger file could both pass the budget check, or corrupt the file. An SQLite
ledger on such a filesystem is refused (:mod:`dpdist.privacy.ledger.sqlite`); a team ledger belongs
on PostgreSQL (:mod:`dpdist.privacy.ledger.postgres`).

The mount of a path is the mount-table entry with the longest mount point that contains the nearest
existing ancestor of where the path leads (every symbolic link followed, a dangling one included).
Where there is no mount table (not Linux), nothing is detected.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MOUNTINFO", "NETWORK_FILESYSTEMS", "Mount", "mount_of", "network_mount"]

MOUNTINFO = Path("/proc/self/mountinfo")

# filesystem types (mountinfo's field after " - ") whose files are shared between hosts
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ncpfs",
        "afs",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "glusterfs",
        "pvfs2",
        "orangefs",
        "panfs",
        "wekafs",
        "9p",
        "davfs",
        "fuse.sshfs",
        "fuse.glusterfs",
        "fuse.cephfs",
        "fuse.ceph-fuse",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.juicefs",
        "fuse.rclone",
    }
)


@dataclass(frozen=True)
class Mount:
    """One mount-table entry: where it is mounted, its filesystem type and its source."""

    point: str
    fstype: str
    source: str

    @property
    def network(self) -> bool:
        return self.fstype in NETWORK_FILESYSTEMS


_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space, ...) decoded."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def _mounts(table: Path) -> list[Mount]:
    """The entries of a mountinfo file: ``ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE ...``."""
    mounts = []
    for line in table.read_text(errors="replace").splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or not rest:
            continue
        mounts.append(Mount(_unescape(fields[4]), rest[0], _unescape(rest[1]) if len(rest) > 1 else ""))
    return mounts


def _existing(path: Path) -> Path:
    """The nearest existing ancestor of where ``path`` leads (itself if it exists): its symbolic links
    followed first, a dangling one's too, since SQLite creates the file where the link points."""
    target = Path(os.path.realpath(path))
    for candidate in (target, *target.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def mount_of(path: str | os.PathLike[str], table: Path | None = None) -> Mount | None:
    """The mount that holds ``path`` (or would, for a path not made yet); ``None`` without a mount table."""
    table = MOUNTINFO if table is None else table
    try:
        mounts = _mounts(table)
    except OSError:
        return None
    where = _existing(Path(path))
    best: Mount | None = None
    for m in mounts:
        point = Path(m.point)
        if (where == point or point in where.parents) and (best is None or len(m.point) >= len(best.point)):
            best = m  # a later entry at the same point is mounted over the earlier one
    return best


def network_mount(path: str | os.PathLike[str], table: Path | None = None) -> Mount | None:
    """The network filesystem mount that holds ``path``, or ``None`` when it is on a local one."""
    m = mount_of(path, table)
    return m if m is not None and m.network else None
