"""The grouped state of the fast Frank-Wolfe kernels: typed namedtuples of arrays and settings.

The kernels of :mod:`dpdist.solvers.fast_fw` pass the solver's state around in a few groups, as
skglm's numba solvers do, instead of dozens of loose arrays: numba types a namedtuple of arrays as
a struct of array views, so a field read is a plain load and grouping changes neither the work nor
the floating-point operations of a step. The scalars a step changes (the scale ``wm`` of the
weights, the heap's size, the column layout once built) stay the kernel's locals, passed and
returned by value.

The constants shared by several kernels (how far ahead the row pass prefetches) live here too.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Config", "Data", "Heap", "Iterate", "Layout", "Sampler", "Scratch", "Screen"]

# Software prefetch in the row pass of a move (:func:`dpdist.solvers.fast_fw.move._move`) and the
# re-weighting of the moved coordinates (:func:`dpdist.solvers.fast_fw.weights._reweight`): each
# entry's scattered access (alpha_k, its mark, beta_k, W_k) is asked for this many entries ahead, so
# the loads overlap instead of waiting one by one (a hint: the same results to the bit).
# The distance was chosen with ``benchmarks/fw_prefetch.py --row-pass`` on Webspam- and KDDA-shaped
# rows: 64 is near the fastest distance for both shapes. _ROWS_AHEAD:
# the rows of column j whose vbar, qbar and first entries are asked for ahead (rows of a few
# entries, as KDDA's, are shorter than _AHEAD); not tuned.
_AHEAD = 64
_ROWS_AHEAD = 8


class Data(NamedTuple):
    """X in CSR (``r_*``) and canonical CSC (``c_*``) form, the labels, X^T y and the Gram matrix.

    Pointers are int64 (nnz may pass 2**31), indices int32; ``gram`` is X^T X (squared loss with
    ``gram``) or an empty (0, 0) array."""

    r_ptr: np.ndarray
    r_idx: np.ndarray
    r_val: np.ndarray
    c_ptr: np.ndarray
    c_idx: np.ndarray
    c_val: np.ndarray
    y: np.ndarray
    ybar: np.ndarray
    gram: np.ndarray


class Config(NamedTuple):
    """The run's settings: the ball's radius ``lam``, the iterations ``T``, the loss, the selection
    mode (0 queue, 1 BSLS sampler, 2 brute-force race, 3 Laplace noisy max), the privacy constants
    (``eps0``, the Lipschitz bound ``L``, ``scale`` = eps0 / (2 L)), the refresh and recording
    periods, the sampler's block shift, the share of X above which a move goes by columns
    (``heavy``), the rows per band of the column passes, their threads and whether beta moves by
    rows of the Gram matrix (``use_gram``)."""

    lam: float
    T: int
    logistic: bool
    mode: int
    eps0: float
    L: float
    scale: float
    refresh: int
    record_every: int
    shift: int
    heavy: float
    band: int
    threads: int
    use_gram: bool


class Iterate(NamedTuple):
    """The iterate and its gradient state: w = wm * wt, X w = wm * vbar, the cached row derivatives
    ``q`` (logistic) and ``alpha`` = X^T q, or beta = X^T X wt (squared loss)."""

    wt: np.ndarray
    vbar: np.ndarray
    alpha: np.ndarray
    q: np.ndarray
    beta: np.ndarray


class Scratch(NamedTuple):
    """A move's buffers: the first-touch ``mark`` and list ``touched`` of the moved coordinates, and
    the column passes' g (``gbuf``), first rows (``fcol``) and counting-sort counts (``nfirst``);
    the last three are empty when no move goes by columns."""

    mark: np.ndarray
    touched: np.ndarray
    gbuf: np.ndarray
    fcol: np.ndarray
    nfirst: np.ndarray


class Heap(NamedTuple):
    """The lazy max-queue (Alg. 3 of [RKL23]): keys and items of the binary heap, each coordinate's
    live key ``cur`` (-1: none) and the scratch of the popped coordinates."""

    keys: np.ndarray
    items: np.ndarray
    cur: np.ndarray
    popped: np.ndarray


class Sampler(NamedTuple):
    """The exponential mechanism's weights W with block sums ``c``, their error bounds ``err``, the
    shared reference ``st`` = (ref, e^-2ref) (:mod:`dpdist.solvers.samplers`) and scratch."""

    W: np.ndarray
    c: np.ndarray
    err: np.ndarray
    st: np.ndarray
    xbuf: np.ndarray
    wbuf: np.ndarray
    bits: np.ndarray


class Screen(NamedTuple):
    """A screening plan as the kernel reads it: its mode code (0: none), the iterations it runs at,
    the column norms, the rule's coefficients, the zeroings made (iteration, coordinate) and their
    count, and the scratch of the chosen coordinates."""

    mode: int
    mask: np.ndarray
    colnorm: np.ndarray
    scoef: np.ndarray
    events: np.ndarray
    n_events: np.ndarray
    zero_buf: np.ndarray


class Layout(NamedTuple):
    """The row-order copies of X the column passes read (:func:`dpdist.solvers.fast_fw.layout._column_layout`)."""

    band: int
    hot: np.ndarray
    hbounds: np.ndarray
    hptr: np.ndarray
    h_col: np.ndarray
    h_val: np.ndarray
    rc: np.ndarray
    bounds: np.ndarray
    tptr: np.ndarray
    e_row: np.ndarray
    e_col: np.ndarray
    e_val: np.ndarray
    acc: np.ndarray
    fc: np.ndarray
