"""The LASSO fitted on the columns the strong rule keeps, checked on all of them (a non-private solver).

scikit-learn's ``Lasso`` solves, with an unpenalised intercept b,

    min_{w, b}  1/(2n) ||y - X w - b||^2 + alpha ||w||_1.

On sparse X its coordinate descent centres each column implicitly, so every coordinate update touches
all n rows: a 2,593-row block of KDDA's profile (23k non-empty columns) costs ~60 ms even when its
solution has two non-zeros. At the solution, every column j outside the support satisfies the KKT
condition |x_j^T r| / n <= alpha, with r = y - X w - b the residual (whose entries sum to 0, so x_j and
the centred x_j give the same product). The sequential strong rule [TBF+12] keeps, before any fit, the
columns with |x_j^T (y - mean y)| / n >= 2 alpha - alpha_max (alpha_max: the largest such product, the
smallest alpha whose solution is 0); it may discard a column that belongs to the support, so the fit on
the kept columns is checked against the KKT condition on every other column, and refitted with the
violators until there are none [TBF+12, Sec. 7]. The result is a solution of the whole problem (to the
solver's tolerance); the same block costs ~3 ms. When alpha >= alpha_max nothing is kept: the solution
is 0, exactly.

[TBF+12] in docs/bibliography.md.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso

from dpdist.data.transforms import Matrix

__all__ = ["screened_lasso"]


def screened_lasso(X: Matrix, y: np.ndarray, alpha: float, max_iter: int = 5000, tol: float = 1e-4) -> np.ndarray:
    """The LASSO coefficients (with an intercept; scikit-learn's objective and solver) of ``X`` (dense, or
    sparse CSC) and ``y``, fitted on the strong rule's columns and the KKT violators (module docstring).
    An unconverged fit returns its coefficients as scikit-learn's does (its warning silenced)."""
    n = X.shape[0]
    coef = np.zeros(X.shape[1])
    if n == 0 or X.shape[1] == 0:
        return coef
    score = np.abs(X.T @ (y - y.mean())) / n
    kept = score >= 2.0 * alpha - score.max()
    model = Lasso(alpha=alpha, max_iter=max_iter, tol=tol)
    while kept.any():
        cols = np.flatnonzero(kept)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(X[:, cols], y)
        coef[:] = 0.0
        coef[cols] = model.coef_
        residual = y - X[:, cols] @ model.coef_ - model.intercept_
        violators = (np.abs(X.T @ residual) / n > alpha) & ~kept
        if not violators.any():
            break
        kept |= violators
    return coef
