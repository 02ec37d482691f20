"""How the passes over X of the fast Frank-Wolfe use numba's threads.

A pass over at least ``_PARALLEL_NNZ`` entries of X (the column passes, the fit's X^T y and its
X_csc digest) runs on all of numba's threads (the cores, unless NUMBA_NUM_THREADS or
numba.set_num_threads says fewer); smaller ones stay on one, where starting the threads would
cost more than it saves. Each column's sum is one thread's, in the same order: the same bits
either way. Each threaded kernel exists in two numba builds of one body
(:func:`_serial_and_parallel`), and the choice is made here, in Python (:func:`_threads`).
"""

from __future__ import annotations

import os
import types
from typing import Any, Callable

import numba

_PARALLEL_NNZ = 1 << 22
_FORKED = [False]  # set in a forked child: GNU OpenMP (numba's threading layer here) kills such a child
if hasattr(os, "register_at_fork"):  # that enters a parallel region (no fork, no hook: Windows)
    os.register_at_fork(after_in_child=lambda: _FORKED.__setitem__(0, True))


def _serial_and_parallel(body: Callable[..., Any]) -> tuple[Any, Any]:
    """Two numba builds of one body: serial (``prange`` is ``range``) and threaded. The threaded one
    compiles a renamed twin: numba keys its on-disk cache by the function's name and bytecode, not
    its flags, so the two builds of one function would load each other from the cache."""
    twin = types.FunctionType(body.__code__, body.__globals__, body.__name__, body.__defaults__, body.__closure__)
    twin.__qualname__ = body.__qualname__ + "_parallel"
    return numba.njit(cache=True)(body), numba.njit(cache=True, parallel=True)(twin)


def _threads(nnz: int) -> int:
    """How many of numba's threads a pass over X (``nnz`` entries) runs on (1: serially): all
    from ``_PARALLEL_NNZ`` entries, never in a forked child (whose parent may have started OpenMP's
    threads, which do not survive a fork: spawn the processes that fit large data). Decided here,
    in Python, and passed to the kernel: a numba function that calls ``numba.get_num_threads``
    cannot be cached on disk (a ctypes pointer), nor can any function that calls it, up to the
    kernel, which would then be compiled anew in every process (tested)."""
    return numba.get_num_threads() if nnz >= _PARALLEL_NNZ and not _FORKED[0] else 1


def _threaded(serial: Callable[..., Any], parallel: Callable[..., Any], nnz: int, *args: Any) -> Any:
    """One of the two builds of a pass over ``nnz`` entries with its last argument, the runs the
    threads take: serially (1 run) unless :func:`_threads` gives it the threads (8 runs each)."""
    threads = _threads(nnz)
    return parallel(*args, 8 * threads) if threads > 1 else serial(*args, 1)
