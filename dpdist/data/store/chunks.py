"""Fast reads of a store's 1-d arrays: their chunks read and decompressed straight into the result, in threads,
with reused buffers (zarr's own reads for any other layout); and the streamed reads of a column range."""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeAlias, cast

import numpy as np
import numpy.typing as npt
import zarr
from zarr.codecs import BloscCodec

from dpdist.exceptions import ParameterError

__all__ = ["Array", "ColumnStream", "Decoder", "all_equal", "array", "chunk_decoder", "read_range"]

Array: TypeAlias = "zarr.Array[Any]"
# numcodecs' decompress(source, dest=None): into ``dest`` when given, else returns the bytes
Decoder: TypeAlias = Callable[..., Any]

_READ_POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="store-read")


def array(g: zarr.Group, name: str) -> Array:
    """The 1-d array ``name`` of a store's group (a store whose layout differs is refused)."""
    a = g[name]
    if not isinstance(a, zarr.Array):
        raise ParameterError(f"{g.store}: {g.path}/{name} is not an array")
    return a


def chunk_decoder(arr: Array) -> Decoder | None:
    """numcodecs' decompress-into-a-buffer for a 1-d array of ours (a plain little-endian
    BytesCodec then Blosc or Zstd, on a local directory), else None (zarr reads it)."""
    from zarr.codecs import BytesCodec, ZstdCodec
    from zarr.storage import LocalStore

    codecs = arr.metadata.codecs if arr.metadata.zarr_format == 3 else ()
    if (
        len(codecs) != 2
        or not isinstance(codecs[0], BytesCodec)
        or arr.ndim != 1
        or not isinstance(arr.store, LocalStore)
        or arr.dtype.byteorder == ">"
        or (codecs[0].endian is not None and codecs[0].endian.value != sys.byteorder)
    ):
        return None
    if isinstance(codecs[1], BloscCodec):
        from numcodecs.blosc import decompress
    elif isinstance(codecs[1], ZstdCodec):
        from numcodecs.zstd import decompress
    else:
        return None
    return cast(Decoder, decompress)


def _chunk_path(arr: Array, k: int) -> Path:
    """The file of chunk k of a 1-d array on a local directory."""
    return Path(str(cast(Any, arr.store).root)) / arr.path / arr.metadata.encode_chunk_key((k,))


def _raw_chunk(arr: Array, k: int) -> bytes | None:
    """The stored (compressed) bytes of chunk k of a 1-d array on a local directory; None when the
    chunk is not written (zarr skips a chunk equal to the fill value)."""
    try:
        return _chunk_path(arr, k).read_bytes()
    except FileNotFoundError:
        return None


def read_range(arr: Array, a: int, b: int, dtype: npt.DTypeLike | None = None) -> np.ndarray:
    """arr[a:b] of a 1-d array, its chunks read and decompressed straight into the result in
    threads (faster than zarr's generic path for our arrays: no intermediate buffers);
    zarr's own read for any other layout. ``dtype``: the result's (default the array's); the
    chunks are converted one at a time, so no whole-range copy in the stored dtype is made."""
    dtype = arr.dtype if dtype is None else np.dtype(dtype)
    decompress = chunk_decoder(arr)
    if decompress is None or b <= a:
        if dtype == arr.dtype:
            return np.asarray(arr[a:b])
        out = np.empty(max(0, b - a), dtype=dtype)
        c = arr.chunks[0]
        for lo in [a, *range((a // c + 1) * c, b, c)]:  # chunk by chunk
            hi = min(b, (lo // c + 1) * c)
            out[lo - a : hi - a] = arr[lo:hi]
        return out
    c = arr.chunks[0]
    out = np.empty(b - a, dtype=dtype)
    fill = _fill_value(arr)

    def read_chunk(k: int) -> None:
        lo, hi = max(a, k * c), min(b, (k + 1) * c)
        dst = out[lo - a : hi - a]
        raw = _raw_chunk(arr, k)
        if raw is None:
            dst[:] = fill
        elif hi - lo == c and dtype == arr.dtype:
            decompress(raw, dst)
        else:  # a chunk partly inside [a, b) (chunks are stored whole, the last one padded), or converted
            dst[:] = np.frombuffer(decompress(raw), dtype=arr.dtype)[lo - k * c : hi - k * c]

    for f in [_READ_POOL.submit(read_chunk, k) for k in range(a // c, (b - 1) // c + 1)]:
        f.result()
    return out


_SCRATCH: queue.Queue[np.ndarray | None] = (
    queue.Queue()
)  # reused chunk buffers: at most 4 (64 MB) per process, whatever its cores
for _ in range(4):
    _SCRATCH.put(None)


# (decoder, dtype, chunk length, value) -> the stored bytes of a whole chunk found all equal to
# value: a chunk stored as the same bytes decodes to the same elements, so it is not decompressed again
_EQUAL_CHUNK: dict[tuple[Any, ...], bytes] = {}


def all_equal(arr: Array, a: int, b: int, value: float) -> bool:
    """Whether every element of arr[a:b] equals ``value``, its chunks decompressed in threads into
    reused scratch buffers (``_SCRATCH``), so the range is never in memory whole (on this kind of
    VM the first touch of fresh memory costs more than the decompression); zarr's own read for
    any other layout. Stops reading once a chunk differs (the first is read before the others).

    A chunk stored as the same bytes as a whole chunk already found all equal (``_EQUAL_CHUNK``,
    e.g. 2M stored 1.0s of a binary store: 69 kB) is equal without being decompressed: the decoder
    is a function of those bytes."""
    decompress = chunk_decoder(arr)
    if decompress is None or b <= a:
        return bool(np.all(arr[a:b] == value))
    c = arr.chunks[0]
    differs = threading.Event()
    known = (decompress, arr.dtype.str, c, value)

    def check_chunk(k: int) -> None:
        if differs.is_set():
            return
        raw = _raw_chunk(arr, k)
        if raw is None:
            equal = bool(_fill_value(arr) == value)
        elif raw == _EQUAL_CHUNK.get(known):
            equal = True
        else:
            buf = _SCRATCH.get()
            try:
                if buf is None or buf.dtype != arr.dtype or buf.shape[0] != c:
                    buf = np.empty(c, dtype=arr.dtype)
                decompress(raw, buf)  # chunks are stored whole (the last one padded)
                equal = bool(np.all(buf[max(a, k * c) - k * c : min(b, (k + 1) * c) - k * c] == value))
                if equal and a <= k * c and (k + 1) * c <= b:  # all c elements were compared
                    _EQUAL_CHUNK[known] = raw
            finally:
                _SCRATCH.put(buf)
        if not equal:
            differs.set()

    first, last = a // c, (b - 1) // c
    check_chunk(first)  # a range that is not binary mostly differs in its first chunk: no other is read
    for f in [_READ_POOL.submit(check_chunk, k) for k in range(first + 1, last + 1)]:
        f.result()
    return not differs.is_set()


_PIECE_BUFFERS = threading.local()  # per thread: (array name, dtype, chunk length) -> a reused chunk buffer


def _fill_value(arr: Array) -> Any:
    """The value of an unwritten chunk's elements."""
    return cast(Any, arr.metadata).fill_value


def _raw_chunk_into(arr: Array, k: int) -> memoryview | None:
    """``_raw_chunk`` read into a bytearray of the calling thread that the next call overwrites
    (grown as needed): no allocation per chunk. (A Dask worker's allocator returns freed memory
    to the system at once, ``MALLOC_TRIM_THRESHOLD_``, so a fresh bytes object per chunk pays
    the first touch of its pages every time.)"""
    try:
        f = open(_chunk_path(arr, k), "rb", buffering=0)
    except FileNotFoundError:
        return None
    with f:
        n = os.fstat(f.fileno()).st_size
        buf = getattr(_PIECE_BUFFERS, "raw", None)
        if buf is None or len(buf) < n:
            buf = _PIECE_BUFFERS.raw = bytearray(max(n, 1 << 20))
        view = memoryview(buf)[:n]
        got = 0
        while got < n:
            r = f.readinto(view[got:])
            if not r:  # the message names the array, not the chunk (whose number follows from the data)
                raise OSError(f"store {cast(Any, arr.store).root}: a chunk file of {arr.path} ended early")
            got += r
        return view


def _piece_buffer(name: str, dtype: np.dtype[Any], n: int) -> np.ndarray:
    buffers: dict[tuple[str, str, int], np.ndarray] = _PIECE_BUFFERS.__dict__.setdefault("buffers", {})
    key = (name, np.dtype(dtype).str, n)
    if key not in buffers:
        buffers[key] = np.empty(n, dtype=dtype)
    return buffers[key]


class ColumnStream:
    """The CSC entries of a column range, read in pieces without holding the range in memory.

    ``indptr`` holds the range's column pointers (from its first entry's absolute position,
    ``indptr[0]``); ``binary`` says that every stored value of the range is 1.0 (then the pieces
    carry no values: read x_ij as 1). ``pieces(lo, hi)`` yields (p, rows, values) over the
    entries at positions [lo, hi) of the range (counted from its first entry), in order: rows
    and values (None when binary) of the entries p, p+1, ... With our stores' codecs each piece
    is one stored chunk decompressed into a buffer of the calling thread that the next piece
    overwrites: no fresh memory, which on this kind of VM can cost more to touch the first time
    than the decompression itself. Any other layout yields one piece read
    whole. Which ranges are binary depends on the data and changes only memory and time,
    never a value read through it.
    """

    def __init__(self, g: zarr.Group, indptr: np.ndarray, binary: bool) -> None:
        self._g = g
        self.binary = binary
        self.indptr = indptr

    def pieces(self, lo: int, hi: int) -> Iterator[tuple[int, np.ndarray, np.ndarray | None]]:
        if hi <= lo:
            return
        a = int(self.indptr[0])
        arrays = [array(self._g, "indices")] + ([] if self.binary else [array(self._g, "data")])
        found = [chunk_decoder(x) for x in arrays]
        decoders = [d for d in found if d is not None]
        if len(decoders) < len(arrays) or len({x.chunks[0] for x in arrays}) > 1:
            read = [read_range(x, a + lo, a + hi) for x in arrays]
            yield lo, read[0], None if self.binary else read[1]
            return
        c = arrays[0].chunks[0]
        for k in range((a + lo) // c, (a + hi - 1) // c + 1):
            p0, p1 = max(a + lo, k * c), min(a + hi, (k + 1) * c)
            read = []
            for x, decompress in zip(arrays, decoders):
                buf = _piece_buffer(x.basename, x.dtype, c)
                raw = _raw_chunk_into(x, k)
                if raw is None:
                    buf[:] = _fill_value(x)
                else:
                    decompress(raw, buf)  # chunks are stored whole (the last one padded)
                read.append(buf[p0 - k * c : p1 - k * c])
            yield p0 - a, read[0], None if self.binary else read[1]
