"""Streaming svmlight / LIBSVM reader with bounded memory.

The file (plain, ``.bz2``, ``.xz`` or ``.gz``) is read in blocks of about ``block_bytes`` of
text cut at line ends; each block is parsed by scikit-learn's compiled svmlight parser
(``load_svmlight_file`` on an in-memory buffer), so memory is bounded by the block size,
not the file size. Indices are returned exactly as written in the file (the caller decides
between zero- and one-based). A malformed line raises ``SvmlightFormatError`` naming the
file and the 1-based line number, found by bisecting the failing block.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
from sklearn.datasets import load_svmlight_file

from dpdist.exceptions import ParameterError

__all__ = ["SvmlightBlock", "SvmlightFormatError", "iter_svmlight_blocks", "open_text"]

DEFAULT_BLOCK_BYTES = 32 << 20


class SvmlightFormatError(ParameterError):
    """A malformed svmlight line; ``path`` and ``line`` (1-based) say where."""

    def __init__(self, path: str | os.PathLike[str], line: int, reason: str) -> None:
        self.path, self.line, self.reason = str(path), line, reason
        super().__init__(f"{path}:{line}: malformed svmlight line: {reason}")


@dataclass(frozen=True)
class SvmlightBlock:
    """Rows parsed from one block of text; ``indices`` are raw (as written in the file)."""

    indptr: np.ndarray  # int64, starts at 0
    indices: np.ndarray  # int64, raw
    data: np.ndarray  # float64
    y: np.ndarray  # float64
    text_bytes: int


def open_text(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing ``.bz2``, ``.xz`` and ``.gz`` by suffix."""
    p = Path(path)
    if not p.is_file():
        raise ParameterError(f"input file {p} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".bz2":
        return bz2.open(p, "rb")
    if suffix == ".xz":
        return lzma.open(p, "rb")
    if suffix == ".gz":
        return gzip.open(p, "rb")
    return open(p, "rb")


def _parse(text: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    X, y = load_svmlight_file(io.BytesIO(text), zero_based=True, dtype=np.float64)
    if not (np.all(np.isfinite(X.data)) and np.all(np.isfinite(y))):
        raise ValueError("non-finite label or feature value (nan/inf)")
    return (
        X.indptr.astype(np.int64, copy=False),
        X.indices.astype(np.int64, copy=False),
        X.data,
        np.asarray(y, dtype=np.float64),
    )


def _locate_error(lines: list[bytes]) -> tuple[int, str]:
    """Index of the first line that fails to parse on its own, and the parser's reason."""
    lo, hi = 0, len(lines)
    reason = "unparseable"
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            _parse(b"".join(lines[lo:mid]))
            lo = mid
        except ValueError as e:
            reason, hi = str(e), mid
    try:
        _parse(lines[lo])
    except ValueError as e:
        reason = str(e)
    return lo, reason


def iter_svmlight_blocks(
    path: str | os.PathLike[str], block_bytes: int = DEFAULT_BLOCK_BYTES
) -> Iterator[SvmlightBlock]:
    """Yield the file's rows in blocks of about ``block_bytes`` of text."""
    line_no = 1
    carry = b""
    with open_text(path) as f:
        while True:
            chunk = f.read(block_bytes)
            text = carry + chunk
            if not chunk:
                carry = b""
            else:
                cut = text.rfind(b"\n") + 1
                if cut == 0:  # a single line longer than the block: keep reading
                    carry = text
                    continue
                text, carry = text[:cut], text[cut:]
            if text:
                try:
                    indptr, indices, data, y = _parse(text)
                except ValueError:
                    lines = text.splitlines(keepends=True)
                    offset, reason = _locate_error(lines)
                    raise SvmlightFormatError(path, line_no + offset, reason) from None
                yield SvmlightBlock(indptr, indices, data, y, len(text))
                line_no += text.count(b"\n") + (0 if text.endswith(b"\n") else 1)
            if not chunk:
                break
