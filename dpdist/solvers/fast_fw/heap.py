"""The lazy max-queue of the non-private fast Frank-Wolfe (Alg. 3 of [RKL23]).

A binary max-heap of upper bounds on |alpha_k|: a step pushes a new key only for a coordinate
whose |alpha_k| grew past its live key (:func:`_heap_update`), and :func:`_heap_next` pops keys
until the top key is below the best true value seen, so the argmax is exact while a step costs
O(moved coordinates x log D) instead of O(D). A popped coordinate's stale duplicates are told
apart by ``cur`` (its live key). The state is the :class:`~dpdist.solvers.fast_fw.state.Heap`
tuple; the heap's size is the caller's scalar, passed and returned.
"""

from __future__ import annotations

import numba
import numpy as np

from dpdist.solvers.fast_fw.state import Heap


@numba.njit(cache=True)
def _heap_push(keys: np.ndarray, items: np.ndarray, size: int, key: float, item: int) -> int:
    """Insert ``item`` with ``key``; returns the new size."""
    i = size
    keys[i], items[i] = key, item
    while i > 0:
        parent = (i - 1) // 2
        if keys[parent] >= keys[i]:
            break
        keys[parent], keys[i] = keys[i], keys[parent]
        items[parent], items[i] = items[i], items[parent]
        i = parent
    return size + 1


@numba.njit(cache=True)
def _heap_pop(keys: np.ndarray, items: np.ndarray, size: int) -> int:
    """Remove the top entry; returns the new size."""
    size -= 1
    keys[0], items[0] = keys[size], items[size]
    i = 0
    while True:
        left, right, top = 2 * i + 1, 2 * i + 2, i
        if left < size and keys[left] > keys[top]:
            top = left
        if right < size and keys[right] > keys[top]:
            top = right
        if top == i:
            break
        keys[top], keys[i] = keys[i], keys[top]
        items[top], items[i] = items[i], items[top]
        i = top
    return size


@numba.njit(cache=True)
def _heap_build(alpha: np.ndarray, keys: np.ndarray, items: np.ndarray, cur: np.ndarray) -> int:
    """The heap from scratch: one live entry |alpha_k| per coordinate; returns its size."""
    size = 0
    for k in range(alpha.shape[0]):
        cur[k] = abs(alpha[k])
        size = _heap_push(keys, items, size, cur[k], k)
    return size


@numba.njit(cache=True)
def _heap_next(
    alpha: np.ndarray, keys: np.ndarray, items: np.ndarray, size: int, cur: np.ndarray, popped: np.ndarray
) -> tuple[int, int]:
    """Exact argmax_k |alpha_k| (lowest k on ties) from upper-bound keys; returns (k, new size)."""
    best_val, best_k, n_popped = -1.0, -1, 0
    while size > 0 and keys[0] >= best_val:
        key, k = keys[0], items[0]
        size = _heap_pop(keys, items, size)
        if key != cur[k]:
            continue  # a stale duplicate: k has a newer entry
        cur[k] = -1.0  # popped: no live entry until re-inserted
        popped[n_popped] = k
        n_popped += 1
        true = abs(alpha[k])
        if true > best_val or (true == best_val and k < best_k):
            best_val, best_k = true, k
    for i in range(n_popped):
        k = popped[i]
        cur[k] = abs(alpha[k])
        size = _heap_push(keys, items, size, cur[k], k)
    return best_k, size


@numba.njit(cache=True)
def _heap_update(alpha: np.ndarray, touched: np.ndarray, n_touched: int, heap: Heap, size: int) -> int:
    """The queue after a move: a new key for each of the ``n_touched`` moved coordinates (listed in
    ``touched``) whose |alpha_k| grew past its live key, compacting to one live entry per
    coordinate when the heap is full; returns the new size."""
    for p in range(n_touched):
        k = touched[p]
        ak = abs(alpha[k])
        if ak > heap.cur[k]:
            if size == heap.keys.shape[0]:  # compact: one live entry per coordinate
                size = _heap_build(alpha, heap.keys, heap.items, heap.cur)
            size = _heap_push(heap.keys, heap.items, size, ak, k)
            heap.cur[k] = ak
    return size
