"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

These write published outputs (report, released models, CLI results): the file gets the
umask's mode, like any file the user creates. Raw data and privacy state are written
owner-only through ``dpdist.utils.files`` instead.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

__all__ = ["write_bytes_atomic", "write_text_atomic", "write_json_atomic"]


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory, fsync, rename."""
    target = Path(path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".tmp-{secrets.token_hex(8)}"
    # not mkstemp: its 0600 would make a published file unreadable to the readers the umask allows
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """``text`` (UTF-8), written atomically."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return write_bytes_atomic(path, text.encode())


def write_json_atomic(path: str | os.PathLike[str], payload: Any) -> Path:
    """``payload`` as indented, key-sorted JSON, written atomically."""
    return write_text_atomic(path, json.dumps(payload, indent=1, sort_keys=True, default=str))
