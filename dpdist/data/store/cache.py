"""The per-process cache of decompressed store blocks."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["BLOCK_CACHE", "BlockCache"]


class BlockCache:
    """Per-process cache of decompressed store blocks (arrays made read-only).

    The budget is a quarter of the Dask worker's memory limit when running on a worker that
    has one, else 1 GiB. Keys name the store path, its dataset id, the array and the block, so
    a store rewritten with different content at the same path is never served stale.

    Eviction is least-recently-used across arrays, but a block never evicts blocks of its own
    array: the graphs read an array in the same order on every pass, and LRU on a cyclic scan
    larger than the budget evicts each block just before it is read again (no hit at all),
    where keeping the first blocks read serves that share of every later pass. A block that
    does not fit beside them is returned uncached. A block read in another partition of the
    same array (other row or column bounds) replaces the cached blocks it overlaps.
    """

    def __init__(self) -> None:
        self._items: OrderedDict[tuple[Any, ...], tuple[np.ndarray, ...]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def budget() -> int:
        if "distributed" in sys.modules:
            try:
                limit = sys.modules["distributed"].get_worker().memory_manager.memory_limit
                if limit:
                    return int(limit) // 4
            except (ValueError, AttributeError):
                pass
        return 1 << 30

    def get(self, key: tuple[Any, ...], load: Callable[[], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
        value = load()
        for a in value:
            a.flags.writeable = False
        size = sum(a.nbytes for a in value)
        budget = self.budget()
        with self._lock:
            self.misses += 1
            if key not in self._items:
                if len(key) == 5:  # (store, id, array, lo, hi): a read in another partition replaces what it overlaps
                    for k in [k for k in self._items if k[:3] == key[:3] and k[3] < key[4] and key[3] < k[4]]:
                        self._bytes -= sum(a.nbytes for a in self._items.pop(k))
                for k in [k for k in self._items if k[:3] != key[:3]]:  # other arrays, least recent first
                    if self._bytes + size <= budget:
                        break
                    self._bytes -= sum(a.nbytes for a in self._items.pop(k))
                if self._bytes + size <= budget:
                    self._items[key] = value
                    self._bytes += size
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
            self.hits = self.misses = 0

    @property
    def nbytes(self) -> int:
        return self._bytes


BLOCK_CACHE = BlockCache()
