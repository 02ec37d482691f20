"""The fast Frank-Wolfe kernel called directly, with the arguments its solver builds, for the tests that
look inside it (its path, its sampler's state, its column passes)."""

from __future__ import annotations

import numpy as np

from dpdist.solvers.fast_fw.solver import _extra_args, _fast_fw, _kernel_args
from dpdist.solvers.samplers import block_shift


def sparse_arrays(X, Xc) -> tuple:
    """X's CSR arrays and its CSC arrays (``Xc``) in the kernel's index types, as its data holds them."""
    return (
        X.indptr.astype(np.int64),
        X.indices.astype(np.int32),
        X.data,
        Xc.indptr.astype(np.int64),
        Xc.indices.astype(np.int32),
        Xc.data,
    )


def run_kernel(X, y, lam, T, loss, mode, eps0, refresh, plan=None, init=None) -> tuple:
    """``_fast_fw`` on CSR ``X`` (L = 1, every step recorded, the generator seeded 7), screened by ``plan``
    from ``init``: what it returns (coef, path, ..., the sampler's state, the band of its column passes)."""
    Xc = X.tocsc()
    data = (*sparse_arrays(X, Xc), y, np.asarray(X.T @ y))
    cfg = (lam, T, loss == "logistic", mode, eps0, 1.0, refresh, 0, block_shift(X.shape[1]))
    done = np.zeros(1, dtype=np.int64)
    return _fast_fw(*_kernel_args((*data, *cfg, np.random.default_rng(7), done, *_extra_args(plan, Xc, T, init))))
