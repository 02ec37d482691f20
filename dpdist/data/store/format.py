"""The store's format: its name and versions, the dataset id's domain, codecs, and the tasks a store can hold."""

from __future__ import annotations

from zarr.codecs import BloscCodec

__all__ = ["CODEC", "FORMAT", "FORMAT_VERSION", "ID_DOMAIN", "READABLE_VERSIONS", "TASKS", "VALUES_CODEC", "ranges"]

FORMAT = "dpdist-sparse-store"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
# The dataset id's domain string. It named format version 1 when ids were introduced and is
# kept for every later version: ledgers are keyed by the id, so it must never change.
ID_DOMAIN = f"{FORMAT}/1"
# Blosc LZ4 (typesize follows the dtype): over a byte shuffle for the integer arrays, whose high
# bytes repeat (2.5x smaller CSC row indices, 4-5 GB/s decode), plain for the float values
# (2-3x faster decode than shuffled, at 1.0-1.14x the size); benchmarks/store_codecs.py
CODEC = BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")
VALUES_CODEC = BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle")
TASKS = ("auto", "binary", "multiclass", "regression")


def ranges(n: int, step: int) -> list[tuple[int, int]]:
    """[(0, step), (step, 2 step), ...] covering range(n)."""
    return [(r0, min(r0 + step, n)) for r0 in range(0, n, step)]
