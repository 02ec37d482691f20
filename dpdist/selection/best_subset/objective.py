"""The objective of DP best subset selection and its sensitivity.

References: [DPBSS25] Sec. 2, App. A.1, App. C; docs/algorithms.md §6.1-6.2.

Candidates are the s-subsets S of the p features. Each support is scored by the
*un-normalised* objective (n times the paper's f(S)), so that nothing depends on n:

* least squares (seed (4), docs/algorithms.md §6.1)::

      F(S) = min_{supp(beta) in S, ||beta||_2 <= r}  1/2 ||y - X_S beta||^2 + ridge/2 ||beta||^2

* hinge (seed App. C, y in {-1, +1})::

      F_h(S) = min_{||beta||_2 <= r}  sum_i max(0, 1 - y_i x_{i,S}^T beta) + ridge ||beta||^2

Assumption 1 (||x_i||_inf <= b_x, |y_i| <= b_y) is enforced here: ``bounds="check"``
refuses data outside the bounds (the message names the bound and its parameter, never a
value of the data) and ``bounds="clip"`` clips every entry of every record (a per-record
map, free of privacy cost). Hinge labels must be exactly -1 or +1.

Sensitivity under ADD/REMOVE (the project's neighbouring relation, n private)
-----------------------------------------------------------------------------
Write F_D(S) = min_beta G_D(beta) with G_D(beta) = sum_{i in D} l_i(beta) + R(beta) over the
ball, where l_i >= 0 is record i's loss and R the ridge term. Let D' = D + {d} (one record
added; removal is the same statement read backwards).

1. l_d >= 0, so G_D' >= G_D pointwise and F_D'(S) >= F_D(S).
2. Let beta_D attain F_D(S). Then F_D'(S) <= G_D'(beta_D) = F_D(S) + l_d(beta_D).
3. On the ball and the support, |x_{d,S}^T beta| <= ||x_{d,S}||_2 ||beta||_2 <= sqrt(s) b_x r
   (Cauchy-Schwarz; ||x_{d,S}||_2 <= sqrt(s) ||x_d||_inf). Hence
   least squares: l_d(beta) = 1/2 (y_d - x_d^T beta)^2 <= 1/2 (b_y + b_x r sqrt(s))^2;
   hinge:         l_d(beta) = max(0, 1 - y_d x_d^T beta) <= 1 + b_x r sqrt(s).
4. So for every S: 0 <= F_D'(S) - F_D(S) <= Delta with

      Delta_ls = (b_y + b_x r sqrt(s))^2 / 2,     Delta_hinge = 1 + b_x r sqrt(s).

The utilities u = -F are therefore *monotone* (adding a record can only lower every
utility, by at most Delta), and the exponential mechanism P(S) ∝ exp(-epsilon F(S) / Delta)
is epsilon-DP (McSherry-Talwar for monotone utilities): with u' = u - a(S), a in [0, Delta],
P_D(S)/P_D'(S) = exp(epsilon a(S)/Delta) * Z_D'/Z_D, the first factor in [1, e^eps] and the
second in [e^-eps, 1]. The paper's Lemma A.1 (REPLACE, n public) gives (b_y + b_x r
sqrt(s))^2/(2n) for the normalised f and the scale exp(-eps f/(2 Delta)); on F this is
exp(-eps F / (2 Delta_ls)), i.e. our mechanism at eps/2 (half as sharp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from dpdist.defaults import bss_ridge
from dpdist.exceptions import ParameterError
from dpdist.utils.validation import check_count, check_positive

__all__ = ["BOUND_MODES", "LOSSES", "Problem", "make_problem", "sensitivity", "store_problem"]

LOSSES = ("squared", "hinge")
BOUND_MODES = ("check", "clip")


def sensitivity(loss: str, s: int, r: float, x_bound: float, y_bound: float) -> float:
    """Delta: the largest change of F(S) when one record is added or removed (module docstring)."""
    reach = x_bound * r * math.sqrt(s)  # the largest |x_S^T beta| on the ball
    if loss == "squared":
        return 0.5 * (y_bound + reach) ** 2
    return 1.0 + reach


@dataclass(eq=False)
class Problem:
    """Validated data of one BSS instance and the statistics every solver reuses.

    ``X`` is a dense C-ordered array or a CSC matrix, within the bounds. ``Xty`` = X^T y,
    ``yty`` = y^T y, ``col_sq`` = the squared column norms. ``_gram`` caches columns of X^T X
    (p-vectors) by feature, computed on demand (least squares).
    """

    X: Any
    y: np.ndarray
    s: int
    loss: str
    r: float
    ridge: float
    x_bound: float
    y_bound: float
    Xty: np.ndarray = field(init=False)
    yty: float = field(init=False)
    col_sq: np.ndarray = field(init=False)
    shift: float = field(init=False, default=0.0)
    _gram: dict[int, np.ndarray] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.Xty = np.asarray(self.X.T @ self.y, dtype=np.float64).ravel()
        self.yty = float(self.y @ self.y)
        if sp.issparse(self.X):
            self.col_sq = np.asarray(self.X.multiply(self.X).sum(axis=0), dtype=np.float64).ravel()
        else:
            self.col_sq = np.einsum("ij,ij->j", self.X, self.X)
        n, p = self.X.shape
        if self.loss == "squared" and p <= min(n, _SHIFT_MAX_P):
            self.shift = _psd_shift(self.gram_columns(np.arange(p)))

    @property
    def p(self) -> int:
        return int(self.X.shape[1])

    @property
    def delta(self) -> float:
        """The sensitivity Delta of F (module docstring)."""
        return sensitivity(self.loss, self.s, self.r, self.x_bound, self.y_bound)

    def columns(self, cols: np.ndarray) -> np.ndarray:
        """X[:, cols] as a dense (n, len(cols)) array."""
        cols = np.asarray(cols, dtype=np.int64)
        if sp.issparse(self.X):
            return self.X[:, cols].toarray()
        return np.ascontiguousarray(self.X[:, cols])

    def rmatvec(self, w: np.ndarray) -> np.ndarray:
        """X^T w."""
        return np.asarray(self.X.T @ w, dtype=np.float64).ravel()

    def matvec(self, beta: np.ndarray, cols: np.ndarray | None = None) -> np.ndarray:
        """X beta, or X[:, cols] beta."""
        if cols is None:
            return np.asarray(self.X @ beta, dtype=np.float64).ravel()
        return self.columns(cols) @ beta

    def gram_columns(self, cols: np.ndarray) -> np.ndarray:
        """(X^T X)[:, cols] as a (p, len(cols)) array, cached by feature."""
        cols = np.asarray(cols, dtype=np.int64)
        missing = [int(j) for j in cols if int(j) not in self._gram]
        if missing:
            block = np.asarray(self.X.T @ self.columns(np.asarray(missing)), dtype=np.float64)
            for k, j in enumerate(missing):
                self._gram[j] = np.ascontiguousarray(block[:, k])
        return np.stack([self._gram[int(j)] for j in cols], axis=1)

    def params(self) -> dict[str, Any]:
        """The public parameters of the instance (no statistic of the data)."""
        return {
            "s": self.s,
            "loss": self.loss,
            "r": self.r,
            "ridge": self.ridge,
            "x_bound": self.x_bound,
            "y_bound": self.y_bound,
        }


_SHIFT_MAX_P = 4000


def _psd_shift(gram: np.ndarray) -> float:
    """A delta with X^T X - delta I positive semidefinite: lambda_min less a safety margin.

    LAPACK's symmetric eigensolver is backward stable: the computed lambda_min is within a
    small multiple of p * machine epsilon * ||X^T X|| of the exact one; the margin
    1e-10 * lambda_max covers that with room to spare for p <= 4000.
    """
    ev = np.linalg.eigvalsh(gram)
    return max(0.0, float(ev[0]) - 1e-10 * float(ev[-1]))


def _check_bounds(
    X: Any, y: np.ndarray, loss: str, x_bound: float, y_bound: float, mode: str
) -> tuple[Any, np.ndarray]:
    values = X.data if sp.issparse(X) else X
    if not np.all(np.isfinite(values)) or not np.all(np.isfinite(y)):
        raise ParameterError("X and y must be finite (NaN or infinite entries found)")
    if loss == "hinge" and not np.all((y == 1.0) | (y == -1.0)):
        raise ParameterError("loss='hinge' needs labels y in {-1, +1} (map the labels by a public rule first)")
    if mode == "clip":
        if sp.issparse(X):
            np.clip(X.data, -x_bound, x_bound, out=X.data)
        else:
            np.clip(X, -x_bound, x_bound, out=X)
        if loss == "squared":
            np.clip(y, -y_bound, y_bound, out=y)
        return X, y
    if values.size and np.max(np.abs(values)) > x_bound:
        raise ParameterError(
            f"X violates Assumption 1, |x_ij| <= x_bound = {x_bound:g} (parameter x_bound), which the "
            "sensitivity assumes; pass bounds='clip' (--clip) to clip each record"
        )
    if loss == "squared" and y.size and np.max(np.abs(y)) > y_bound:
        raise ParameterError(
            f"y violates Assumption 1, |y_i| <= y_bound = {y_bound:g} (parameter y_bound), which the "
            "sensitivity assumes; pass bounds='clip' (--clip) to clip each record"
        )
    return X, y


def make_problem(
    X: Any,
    y: Any,
    s: int,
    loss: str = "squared",
    r: float = 1.1,
    ridge: float | None = None,
    x_bound: float = 0.5,
    y_bound: float = 0.5,
    bounds: str = "check",
) -> Problem:
    """Validate the parameters, enforce Assumption 1 and precompute the shared statistics.

    X is copied (dense: C order float64; sparse: CSC float64 with duplicates summed) before
    clipping, so the caller's arrays are never modified.
    """
    if loss not in LOSSES:
        raise ParameterError(f"loss must be one of {LOSSES}, got {loss!r}")
    if bounds not in BOUND_MODES:
        raise ParameterError(f"bounds must be one of {BOUND_MODES}, got {bounds!r}")
    s = check_count(s, "s")
    r = check_positive(r, "r")
    # None: the loss's default (dpdist.defaults.BSS_RIDGE); the OA relaxation's z_j = 0 gradient divides by it
    ridge = check_positive(bss_ridge(loss) if ridge is None else ridge, "ridge")
    x_bound = check_positive(x_bound, "x_bound")
    y_bound = check_positive(y_bound, "y_bound")
    if X is None or len(getattr(X, "shape", ())) != 2:
        raise ParameterError("X must be a 2-d array or sparse matrix")
    n, p = X.shape
    if s >= p:
        raise ParameterError(f"s must be smaller than the number of features p (n_features = {p}), got s={s}")
    # no rows is no refusal: a release is the mechanism's output on whatever the data holds (dpdist.base)
    if sp.issparse(X):
        X = sp.csc_matrix(X, dtype=np.float64, copy=True)
        X.sum_duplicates()
    else:
        X = np.array(X, dtype=np.float64, order="C", copy=True)
    y = np.array(y, dtype=np.float64, copy=True).ravel()
    if y.shape[0] != n:
        raise ParameterError("X and y must have the same number of rows")
    X, y = _check_bounds(X, y, loss, x_bound, y_bound, bounds)
    return Problem(X, y, s, loss, r, ridge, x_bound, y_bound)


def store_problem(store: Any, s: int, loss: str = "squared", **options: Any) -> Problem:
    """The instance of a dpdist store: its rows and its target mapped by the store's public rule.

    ``options`` are the other parameters of :func:`make_problem` (r, ridge, x_bound, y_bound, bounds).
    The store's schema must be declared (public, ``check_schema``) and fit the loss: least
    squares needs a regression target, hinge a binary one (its two labels become -1, +1).
    Nearly dense data (more than 30% non-zeros) is densified: the dense kernels are faster.
    """
    from dpdist.data.store import check_schema
    from dpdist.selection.sis import store_target

    check_schema(store)
    need = "binary" if loss == "hinge" else "regression"
    if loss in LOSSES and store.task != need:
        raise ParameterError(
            f"store {store.path}: loss={loss!r} needs a {need} target (declared task: "
            f"{store.task}); use loss={'squared' if loss == 'hinge' else 'hinge'!r} or another store"
        )
    X = store.csr()
    n, p = X.shape
    if X.nnz > 0.3 * n * p:
        X = X.toarray()
    return make_problem(X, store_target(store), s, loss, **options)
