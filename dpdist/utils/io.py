"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

These write published outputs (report, released models, CLI results): the file gets the
umask's mode, like any file the user creates. Raw data and privacy state are written
owner-only through ``dpdist.utils.files`` instead.

An output can be prepared before its content exists (:class:`AtomicFile`): its temporary is
created where the write will rename it, so an output that cannot be written is refused before
the work -- and the privacy charge -- whose result it holds.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
from pathlib import Path
from typing import Any

__all__ = [
    "AtomicFile",
    "check_directory",
    "make_parents",
    "remove_made",
    "write_bytes_atomic",
    "write_text_atomic",
    "write_json_atomic",
]


def make_parents(directory: Path) -> list[Path]:
    """Make ``directory`` and its missing parents; the directories made, outermost first."""
    missing: list[Path] = []
    d = directory
    while not d.exists() and d != d.parent:
        missing.append(d)
        d = d.parent
    made: list[Path] = []
    try:
        for m in reversed(missing):
            m.mkdir(exist_ok=True)
            made.append(m)
    except BaseException:
        remove_made(made)
        raise
    return made


def remove_made(made: list[Path]) -> None:
    """Remove the directories :func:`make_parents` made, innermost first, while they are empty."""
    for d in reversed(made):
        try:
            d.rmdir()
        except OSError:  # something else was put there meanwhile: it stays
            return


class AtomicFile:
    """The file ``path``, to be written atomically once its content exists.

    Creating it makes the missing parent directories and the temporary file, in the target's
    directory, that :meth:`write` fills, fsyncs and renames onto ``path``: an output that cannot
    be written (a directory in its place, a read-only or missing file system, no permission)
    raises its ``OSError`` here, before the work whose result it will hold. :meth:`discard` removes
    the temporary and the directories made for it (after a write it does nothing).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).resolve()
        if self.path.is_dir():  # os.replace would refuse it only at the end
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        self._made = make_parents(self.path.parent)
        self._tmp = self.path.parent / f".tmp-{secrets.token_hex(8)}"
        try:  # not mkstemp: its 0600 would make a published file unreadable to the readers the umask allows
            self._fd: int | None = os.open(
                self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666
            )
        except BaseException:
            remove_made(self._made)
            raise
        self._done = False

    def write(self, data: bytes) -> Path:
        """Write ``data`` to the temporary, fsync it and rename it onto the target; the target's path."""
        if self._done or self._fd is None:
            raise ValueError(f"{self.path}: already written or discarded")
        fd, self._fd = self._fd, None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(self._tmp, self.path)
        except BaseException:
            self.discard()
            raise
        self._done = True
        return self.path

    def write_json(self, payload: Any) -> Path:
        """``payload`` as :func:`write_json_atomic` writes it."""
        return self.write(_json_text(payload).encode())

    def discard(self) -> None:
        """Remove the temporary and the directories made for it, unless the file was written."""
        if self._done:
            return
        self._done = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._tmp.unlink(missing_ok=True)
        remove_made(self._made)


def check_directory(directory: str | os.PathLike[str]) -> None:
    """Raise the ``OSError`` of ``directory`` if it cannot receive new files: it (and its missing parents)
    and a file in it are made, then removed again."""
    AtomicFile(Path(directory) / f".dpdist-check-{secrets.token_hex(4)}").discard()


def _json_text(payload: Any) -> str:
    return json.dumps(payload, indent=1, sort_keys=True, default=str)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory, fsync, rename."""
    return AtomicFile(path).write(data)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """``text`` (UTF-8), written atomically."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return write_bytes_atomic(path, text.encode())


def write_json_atomic(path: str | os.PathLike[str], payload: Any) -> Path:
    """``payload`` as indented, key-sorted JSON, written atomically."""
    return write_text_atomic(path, _json_text(payload))
