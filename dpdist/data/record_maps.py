"""Per-record maps: functions of one record at a time that put a row into a public domain.

A map that reads only the record it transforms costs no privacy (adding or removing a record
changes no other record's image), and a released model carries its map's name so that
``predict`` applies it again to new rows. Each map here ends in a public bound that the
mechanisms downstream assume; the map *enforces* it, whatever the data:

* ``"l2"``: x / ||x||_2 (a zero row stays zero): ||x||_2 <= 1.
* ``"max"``: x / max_j |x_j|: |x_j| <= 1.
* ``"sqrt-l2"``: sign(x) sqrt(|x|), then / its l2 norm: ||x||_2 <= 1. A variance-stabilising
  compression of raw counts and magnitudes (the Hellinger map of count vectors) before the
  normalisation: on rows where a few raw columns are many orders above the rest (tables in raw
  units), "l2" leaves every other column near 0, "sqrt-l2" keeps them. It is homogeneous
  (sqrt(c x) = sqrt(c) sqrt(x)), so its image is the same whether the rows come raw or already
  normalised.
* ``"rank"`` (dense rows only): each entry replaced by its rank within its own row, mapped
  linearly onto [-1, 1] (ties get their mean rank): |x_j| <= 1. The per-sample quantile
  normalisation of microarrays: invariant to any increasing transform of the record's values, so
  no per-gene statistic (a private quantity) is needed to put genes on one scale.
* ``None``: the row as it is (no bound: the learner must clip).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.stats import rankdata
from sklearn.preprocessing import normalize

from dpdist.exceptions import ParameterError

__all__ = ["ROW_MAPS", "apply_row_map", "check_row_map", "map_rows", "row_lengths"]

ROW_MAPS = ("l2", "max", "sqrt-l2", "rank", None)


def check_row_map(name: Any) -> str | None:
    """``name`` when it is one of :data:`ROW_MAPS`, else a ``ParameterError`` naming them."""
    if name not in ROW_MAPS:
        raise ParameterError(f"row_norm must be one of {ROW_MAPS}, got {name!r}")
    return None if name is None else str(name)


def _signed_sqrt(X: sp.csr_matrix | np.ndarray) -> sp.csr_matrix | np.ndarray:
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64, copy=True)
        X.data = np.sign(X.data) * np.sqrt(np.abs(X.data))
        return X
    X = np.asarray(X, dtype=np.float64)
    return np.sign(X) * np.sqrt(np.abs(X))


def _ranks(X: np.ndarray) -> np.ndarray:
    p = X.shape[1]
    if p == 1:
        return np.zeros_like(X, dtype=np.float64)
    ranks = np.asarray(rankdata(X, axis=1), dtype=np.float64)
    out: np.ndarray = (ranks - 1.0) * (2.0 / (p - 1)) - 1.0
    return out


def apply_row_map(X: Any, name: str | None) -> Any:
    """The image of every row of ``X`` under the map ``name`` (module docstring); a copy.

    Sparse input stays sparse (CSR) for every map but ``"rank"``, which needs dense rows (it is
    for dense tables such as microarrays, whose every entry is a measurement)."""
    check_row_map(name)
    if name is None or X.shape[0] == 0:  # no rows: nothing to map (scikit-learn's normalize refuses them)
        return sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else np.array(X, dtype=np.float64)
    if name == "rank":
        if sp.issparse(X):
            raise ParameterError('row_norm="rank" needs dense rows (a table of measurements), not a sparse matrix')
        return _ranks(np.asarray(X, dtype=np.float64))
    if name == "sqrt-l2":
        return normalize(_signed_sqrt(X), norm="l2", copy=False)
    if sp.issparse(X):
        return normalize(sp.csr_matrix(X, dtype=np.float64), norm=name, copy=True)
    return normalize(np.asarray(X, dtype=np.float64), norm=name, copy=True)


def row_lengths(X: Any) -> np.ndarray:
    """The l2 norm of every row of ``X`` (dense or sparse)."""
    if sp.issparse(X):
        squares = np.asarray(sp.csr_matrix(X).multiply(X).sum(axis=1), dtype=np.float64).ravel()
    else:
        squares = np.sum(np.asarray(X, dtype=np.float64) ** 2, axis=1)
    out: np.ndarray = np.sqrt(squares)
    return out


def map_rows(X: Any, name: str | None) -> Any:
    """The rows of ``X`` as a released model reads them: :func:`apply_row_map`, sparse rows made dense
    first for ``"rank"`` (which reads every entry of a record)."""
    if name == "rank" and sp.issparse(X):
        X = X.toarray()
    return apply_row_map(X, name)
