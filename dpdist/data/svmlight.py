"""Streaming svmlight / LIBSVM reader with bounded memory, parsing blocks in parallel.

The file (plain, ``.bz2``, ``.xz`` or ``.gz``) is read in blocks of about ``block_bytes`` of
text cut at line ends by one reader thread (which also decompresses); the blocks are parsed
by a pool of threads running a numba kernel that releases the GIL, and are yielded in file
order. At most a few blocks are in flight, so memory is bounded by the block size, not the
file size.

The kernel accepts a strict subset of the format and gives exactly what scikit-learn's
``load_svmlight_file`` (the reference, ``_parse_reference``) gives on it: labels and values
``[+-]digits[.digits][(e|E)[+-]digits]``, indices ``digits``, an optional leading ``qid:...``
token (ignored), ``#`` comments, blank lines. A number is converted in the kernel when that
is exact (Clinger's fast path: at most 2^53 as a decimal integer times 10^k, |k| <= 22, one
correctly rounded IEEE operation), otherwise by Python's ``float`` on the token (correctly
rounded, as scikit-learn's). Anything outside the subset, and every malformed line, sends
the whole block to the reference parser, so results and error messages never depend on
which parser ran or how the file was cut into blocks.

Indices are returned exactly as written in the file (the caller decides between zero- and
one-based). A malformed line raises ``SvmlightFormatError`` naming the file and the 1-based
line number, found by bisecting the failing block.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import queue
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import numba
import numpy as np

from dpdist.exceptions import ParameterError

__all__ = [
    "SvmlightBlock",
    "SvmlightFormatError",
    "iter_svmlight_blocks",
    "open_text",
    "parse_block",
    "undecompressable",
]

DEFAULT_BLOCK_BYTES = 16 << 20


# The parser's reasons quote the offending token (a value of the data); the message names the kind only.
_REASONS = (
    ("non-finite", "a non-finite label or value (nan/inf)"),
    ("float", "a label or value that is not a number"),
    ("sorted", "column indices not in ascending order, or repeated"),
    ("unpack", "a feature that is not index:value"),
    ("int()", "a column index that is not an integer"),
    ("index", "an invalid column index"),
)


def _public_reason(reason: str) -> str:
    """The kind of error in a parser's ``reason``, without the token it quotes."""
    return next((kind for key, kind in _REASONS if key in reason.lower()), "not svmlight text")


class SvmlightFormatError(ParameterError):
    """A malformed svmlight line; ``path`` and ``line`` (1-based) say where, ``reason`` the kind of
    error (never the line's text: error messages hold no value of the data)."""

    def __init__(self, path: str | os.PathLike[str], line: int, reason: str) -> None:
        self.path, self.line, self.reason = str(path), line, _public_reason(reason)
        super().__init__(f"{path}:{line}: malformed svmlight line: {self.reason}")


@dataclass(frozen=True)
class SvmlightBlock:
    """Rows parsed from one block of text; ``indices`` are raw (as written in the file)."""

    indptr: np.ndarray  # int64, starts at 0
    indices: np.ndarray  # int32 (fast parser) or int64 (reference parser), raw
    data: np.ndarray  # float64
    y: np.ndarray  # float64
    text_bytes: int
    first_line: int = 1  # the file's line number of the block's first line


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
        return cast(IO[bytes], gzip.open(p, "rb"))
    return open(p, "rb")


# ----------------------------------------------------------------------- reference parser


def _parse_reference(text: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's parser on ``text``; ValueError on a malformed or non-finite line."""
    from sklearn.datasets import load_svmlight_file  # imported only when a block needs it

    try:
        X, y = load_svmlight_file(io.BytesIO(text), zero_based=True, dtype=np.float64)
    except OverflowError as e:  # an index beyond the parser's C int
        raise ValueError(f"index out of range ({e})") from None
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
            _parse_reference(b"".join(lines[lo:mid]))
            lo = mid
        except ValueError as e:
            reason, hi = str(e), mid
    try:
        _parse_reference(lines[lo])
    except ValueError as e:
        reason = str(e)
    return lo, reason


# ---------------------------------------------------------------------------- fast kernel

_POW10 = np.array([10.0**k for k in range(23)])  # exact doubles
_MAX_INDEX = 2**31 - 1  # the reference parser holds indices in a C int
_NL, _HASH, _COLON = 10, 35, 58


@numba.njit(inline="always")
def _is_ws(c: int) -> bool:  # bytes.split() whitespace other than the line end
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@numba.njit(inline="always")
def _next_token(buf: np.ndarray, i: int) -> int:
    """The position of the next token from i: past white space, and at the line's newline when a
    comment (``#`` to the end of the line) comes first."""
    while _is_ws(buf[i]):
        i += 1
    if buf[i] == _HASH:
        while buf[i] != _NL:
            i += 1
    return i


@numba.njit(inline="always")
def _ends_token(c: int) -> bool:
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12 or c == _NL or c == _HASH


@numba.njit(inline="always")
def _float_token(buf: np.ndarray, i: int) -> tuple[float, int, int]:
    """Parse ``[+-]digits[.digits][(e|E)[+-]digits]`` at i: (value, next i, status).

    status 0: value exact; 1: valid token the kernel cannot convert exactly (the caller
    converts it with Python's float); -1: not such a token."""
    neg = False
    c = buf[i]
    if c == 43 or c == 45:
        neg = c == 45
        i += 1
    w = 0
    sig = 0  # significant digits in w
    exp10 = 0
    n_digits = 0
    exact = True
    while 48 <= buf[i] <= 57:
        d = buf[i] - 48
        n_digits += 1
        if sig < 18:
            w = w * 10 + d
            if w != 0:
                sig += 1
        else:
            exact = False
        i += 1
    if buf[i] == 46:  # '.'
        i += 1
        while 48 <= buf[i] <= 57:
            d = buf[i] - 48
            n_digits += 1
            if sig < 18:
                w = w * 10 + d
                exp10 -= 1
                if w != 0:
                    sig += 1
            else:
                exact = False
            i += 1
    if n_digits == 0:
        return 0.0, i, -1
    if buf[i] == 101 or buf[i] == 69:  # 'e' / 'E'
        i += 1
        eneg = False
        if buf[i] == 43 or buf[i] == 45:
            eneg = buf[i] == 45
            i += 1
        e = 0
        e_digits = 0
        while 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (buf[i] - 48)
            e_digits += 1
            i += 1
        if e_digits == 0:
            return 0.0, i, -1
        exp10 += -e if eneg else e
    if w == 0:
        v = 0.0
    elif exact and w <= 9007199254740992 and -22 <= exp10 <= 22:
        v = float(w)
        v = v * _POW10[exp10] if exp10 >= 0 else v / _POW10[-exp10]
    else:
        return 0.0, i, 1
    return (-v if neg else v), i, 0


@numba.njit(inline="always")
def _note_slow(slow: np.ndarray, n_slow: int, kind: int, pos: int, start: int, end: int) -> tuple[np.ndarray, int]:
    """(slow, n_slow) with the token (kind, pos, start, end) appended, ``slow`` doubled when full."""
    if n_slow == slow.shape[0]:
        grown = np.empty((2 * n_slow, 4), dtype=np.int64)
        grown[:n_slow] = slow
        slow = grown
    slow[n_slow, 0], slow[n_slow, 1], slow[n_slow, 2], slow[n_slow, 3] = kind, pos, start, end
    return slow, n_slow + 1


@numba.njit(inline="always")
def _skip_qid(buf: np.ndarray, i: int) -> tuple[int, bool]:
    """(the position after a ``qid:...`` token at i, whether it had its ':')."""
    colon = False
    while not _ends_token(buf[i]):
        colon |= buf[i] == _COLON
        i += 1
    return i, colon


@numba.njit(inline="always")
def _feature_index(buf: np.ndarray, i: int, prev: int) -> tuple[int, int, bool]:
    """(index, the position after its ':', ok) of an ``index:`` at i; ok needs digits, at most
    ``_MAX_INDEX``, a ':' and an index above ``prev``."""
    idx = 0
    k = i
    while 48 <= buf[i] <= 57:
        idx = idx * 10 + (buf[i] - 48)
        if idx > _MAX_INDEX:
            return idx, i, False
        i += 1
    if i == k or buf[i] != _COLON or idx <= prev:
        return idx, i, False
    return idx, i + 1, True


@numba.njit(inline="always")
def _row_features(
    buf: np.ndarray, i: int, out: tuple[np.ndarray, np.ndarray], nnz: int, slow: np.ndarray, n_slow: int
) -> tuple[bool, int, int, np.ndarray, int]:
    """A row's ``index:value`` pairs from i (after its label) through its newline, written to
    ``out`` = (indices, data) from ``nnz``: (ok, the next line's position, nnz, slow, n_slow)."""
    indices, data = out
    prev = -1
    first = True
    while True:
        i = _next_token(buf, i)
        c = buf[i]
        if c == _NL:
            return True, i + 1, nnz, slow, n_slow
        if first and c == 113 and buf[i + 1] == 105 and buf[i + 2] == 100:  # "qid": skipped, needs a ':'
            i, colon = _skip_qid(buf, i)
            if not colon:
                return False, i, nnz, slow, n_slow
            first = False
            continue
        first = False
        idx, i, ok = _feature_index(buf, i, prev)
        if not ok:
            return False, i, nnz, slow, n_slow
        start = i
        v, i, st = _float_token(buf, i)
        if st < 0 or not _ends_token(buf[i]):
            return False, i, nnz, slow, n_slow
        if st == 1:
            slow, n_slow = _note_slow(slow, n_slow, 1, nnz, start, i)
        indices[nnz] = idx
        data[nnz] = v
        nnz += 1
        prev = idx


@numba.njit(nogil=True, cache=True)
def _parse_kernel(buf: np.ndarray) -> tuple[Any, ...]:
    """Parse a block that ends with a newline. Returns (ok, indptr, indices, data, y, slow),
    where slow[k] = (0 for a label / 1 for a value, its position, token start, token end)."""
    n = buf.shape[0]
    if n == 0 or buf[n - 1] != _NL:  # every scan below stops at a newline: the last byte must be one
        return (
            False,
            np.zeros(1, dtype=np.int64),
            np.empty(0, dtype=np.int32),
            np.empty(0),
            np.empty(0),
            np.empty((0, 4), dtype=np.int64),
        )
    max_rows = 0
    max_nnz = 0
    for i in range(n):
        max_rows += buf[i] == _NL
        max_nnz += buf[i] == _COLON
    indptr = np.empty(max_rows + 1, dtype=np.int64)
    indices = np.empty(max_nnz, dtype=np.int32)
    data = np.empty(max_nnz, dtype=np.float64)
    y = np.empty(max_rows, dtype=np.float64)
    slow = np.empty((16, 4), dtype=np.int64)
    n_slow = 0
    rows = 0
    nnz = 0
    indptr[0] = 0
    i = 0
    fail = (False, indptr[:1], indices[:0], data[:0], y[:0], slow[:0])
    while i < n:
        i = _next_token(buf, i)
        if buf[i] == _NL:  # blank or comment-only line: no row
            i += 1
            continue
        start = i
        v, i, st = _float_token(buf, i)
        if st < 0 or not _ends_token(buf[i]):
            return fail
        if st == 1:
            slow, n_slow = _note_slow(slow, n_slow, 0, rows, start, i)
        y[rows] = v
        ok, i, nnz, slow, n_slow = _row_features(buf, i, (indices, data), nnz, slow, n_slow)
        if not ok:
            return fail
        rows += 1
        indptr[rows] = nnz
    return True, indptr[: rows + 1], indices[:nnz], data[:nnz], y[:rows], slow[:n_slow]


def _parse_fast(text: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The kernel on ``text``, or None when the block needs the reference parser."""
    if not text.endswith(b"\n"):
        text += b"\n"
    buf = np.frombuffer(text, dtype=np.uint8)
    ok, indptr, indices, data, y, slow = _parse_kernel(buf)
    if not ok:
        return None
    for kind, pos, a, b in slow.tolist():
        v = float(text[a:b])  # the grammar was checked: this parses; correctly rounded
        if not np.isfinite(v):
            return None
        (data if kind else y)[pos] = v
    return indptr, indices, data, y


def parse_block(text: bytes, path: str | os.PathLike[str] = "<text>", first_line: int = 1) -> SvmlightBlock:
    """Parse whole lines of svmlight text; a malformed line raises SvmlightFormatError
    naming ``path`` and its line number (``first_line`` is the number of the text's first line)."""
    parsed = _parse_fast(text)
    if parsed is None:
        try:
            parsed = _parse_reference(text)
        except ValueError:
            offset, reason = _locate_error(text.splitlines(keepends=True))
            raise SvmlightFormatError(path, first_line + offset, reason) from None
    return SvmlightBlock(*parsed, len(text), first_line)


def find_line(path: str | os.PathLike[str], first_line: int, bad: Callable[[int], bool]) -> int:
    """The number of the first line from ``first_line`` on with a column index ``i`` (as written)
    for which ``bad(i)``, or ``first_line`` if none (only called when a block holds one)."""
    with open_text(path) as f:
        for number, line in enumerate(f, 1):
            if number < first_line:
                continue
            for token in line.split(b"#", 1)[0].split()[1:]:
                index, _, _ = token.partition(b":")
                if index != b"qid" and index.lstrip(b"-").isdigit() and bad(int(index)):
                    return number
    return first_line


# ------------------------------------------------------------------------------- reading


def _read_blocks(f: IO[bytes], block_bytes: int) -> Iterator[tuple[bytes, int]]:
    """(text, number of its first line): whole lines, about ``block_bytes`` each."""
    line_no = 1
    carry = b""
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
            yield text, line_no
            line_no += text.count(b"\n") + (0 if text.endswith(b"\n") else 1)
        if not chunk:
            return


def undecompressable(path: str | os.PathLike[str], e: BaseException) -> ParameterError | None:
    """The one-line refusal of a compressed file (``.gz``, ``.bz2``, ``.xz``, ``.zip``) that cannot be
    decompressed -- corrupt, truncated, not of its suffix's format -- naming it; None for any other
    failure (a machine's I/O error keeps its errno)."""
    if isinstance(e, OSError) and e.errno is not None:
        return None
    if isinstance(e, (EOFError, lzma.LZMAError, zlib.error, zipfile.BadZipFile, OSError)):  # gzip's, bz2's: OSError
        return ParameterError(f"{path}: corrupt or truncated (its {Path(path).suffix.lstrip('.')} data cannot be read)")
    return None


def _n_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


_DONE = object()


def iter_svmlight_blocks(
    path: str | os.PathLike[str], block_bytes: int = DEFAULT_BLOCK_BYTES, n_threads: int | None = None
) -> Iterator[SvmlightBlock]:
    """Yield the file's rows in blocks of about ``block_bytes`` of text, in file order.

    One thread reads (and decompresses), ``n_threads`` (default: the CPUs this process may
    use) parse; at most ``2 n_threads + 1`` blocks are in flight. The first malformed line in
    file order raises, after every block before it has been yielded.
    """
    n_threads = n_threads or _n_threads()
    f = open_text(path)
    pending: queue.Queue[Any] = queue.Queue(maxsize=2 * n_threads + 1)
    stop = threading.Event()

    def reader(pool: ThreadPoolExecutor) -> None:
        try:
            for text, line_no in _read_blocks(f, block_bytes):
                fut = pool.submit(parse_block, text, path, line_no)
                while not stop.is_set():
                    try:
                        pending.put(fut, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            pending.put(_DONE)
        except BaseException as e:  # an I/O or decompression error: raised by the consumer
            failed: Future[Any] = Future()
            failed.set_exception(undecompressable(path, e) or e)
            pending.put(failed)

    with f, ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="svmlight-parse") as pool:
        thread = threading.Thread(target=reader, args=(pool,), name="svmlight-read", daemon=True)
        thread.start()
        try:
            while (item := pending.get()) is not _DONE:
                yield item.result()
        finally:
            stop.set()
            while thread.is_alive():  # unblock the reader, drop what it queued
                try:
                    pending.get(timeout=0.1)
                except queue.Empty:
                    pass
            thread.join()
