"""Two-stage private sparse regression (Kifer, Smith, Thakurta 2012; spec 5): the seed-003 baseline.

Stage 1 ("Samp-Agg" support selection, pure epsilon_1-DP):

1. m = floor(sqrt(n)) disjoint blocks. Each record draws its block uniformly at random,
   independently of every other record (a fixed random assignment by record, spec 5.1), so
   adding, removing or replacing one record changes exactly one block.
2. On each block a LASSO, (1/(2 n_b))||y_b - X_b beta||^2 + alpha ||beta||_1 (scikit-learn's
   coordinate descent; seed 003 uses alpha = 0.1), and the vote v^(b) = indicator of the
   s largest |beta_j| among its non-zeros. The truncation to s is what bounds the
   sensitivity.
3. a = (1/m) sum_b v^(b) has l1-sensitivity 2s/m; release the top-s of a + Lap(2s/(m eps_1))^p.

Stage 2 fits :class:`dpdist.solvers.objective_perturbation.ObjectivePerturbation` on the
selected columns with epsilon_2; the total is epsilon_1 + epsilon_2 by basic composition
(the SoK code's 1.5 epsilon is not reproduced).

The block fits are independent: :func:`block_votes` is the unit of work that
``pipelines.two_stage`` runs on Dask workers, and :meth:`TwoStageSelector.fit_votes`
releases from the summed votes.
"""

from __future__ import annotations

import math
import time
import uuid
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso

from dpdist.data.transforms import Matrix
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.mechanisms import Laplace
from dpdist.solvers.objective_perturbation import ObjectivePerturbation
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_epsilon, check_positive

__all__ = ["TwoStageRegression", "TwoStageSelector", "assign_blocks", "block_labels", "block_votes", "lasso_coefficients",
           "split_by_label", "truncated_vote"]


def block_labels(n: int, random_state: RandomState = None, n_blocks: int | None = None) -> tuple[np.ndarray, int]:
    """(block of each record, m): m = floor(sqrt(n)) blocks, each record placed independently."""
    m = n_blocks if n_blocks is not None else math.isqrt(n)
    if m < 1 or m > n:
        raise ParameterError(f"n_blocks must lie in [1, n={n}], got {m}")
    return check_random_state(random_state).integers(m, size=n), m


def split_by_label(label: np.ndarray, m: int) -> list[np.ndarray]:
    """Indices of each label 0..m-1, ascending within a label."""
    order = np.argsort(label, kind="stable")
    return np.split(order, np.cumsum(np.bincount(label, minlength=m))[:-1])


def assign_blocks(n: int, random_state: RandomState = None, n_blocks: int | None = None) -> list[np.ndarray]:
    """Row indices of each of m = floor(sqrt(n)) blocks, each record placed independently."""
    return split_by_label(*block_labels(n, random_state, n_blocks))


def lasso_coefficients(X_b: Matrix, y_b: np.ndarray, alpha: float) -> np.ndarray:
    """The block's LASSO coefficients (scikit-learn coordinate descent; CSC for sparse input)."""
    if X_b.shape[0] == 0:
        return np.zeros(X_b.shape[1])
    model = Lasso(alpha=alpha, max_iter=5000, tol=1e-4)
    with warnings.catch_warnings():  # an unconverged block still casts a valid (truncated) vote
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(sp.csc_matrix(X_b) if sp.issparse(X_b) else X_b, y_b)
    return model.coef_


def truncated_vote(coef: np.ndarray, s: int) -> np.ndarray:
    """Indices of the s largest |coef_j| among the non-zeros (fewer when fewer are non-zero)."""
    nz = np.flatnonzero(coef)
    if nz.size > s:
        nz = nz[np.argsort(-np.abs(coef[nz]), kind="stable")[:s]]
    return np.sort(nz)


def block_votes(X_b: Matrix, y_b: np.ndarray, s: int, alpha: float) -> np.ndarray:
    """One block's vote: at most s feature indices (the unit of parallel work)."""
    return truncated_vote(lasso_coefficients(X_b, y_b, alpha), s)


class TwoStageSelector:
    """Stage 1: private selection of the k features most often chosen by per-block LASSOs."""

    name = "two_stage/samp_agg"

    def __init__(self, k: int, epsilon: float, alpha: float = 0.1, n_blocks: int | None = None,
                 random_state: RandomState = None) -> None:
        self.k = check_count(k, "k")
        self.epsilon = check_epsilon(epsilon)
        self.alpha = check_positive(alpha, "alpha")
        self.n_blocks = n_blocks
        self.delta = 0.0
        self._rng = check_random_state(random_state)

    def blocks(self, n: int) -> list[np.ndarray]:
        return assign_blocks(n, self._rng, self.n_blocks)

    def fit(self, X: Matrix, y: np.ndarray, accountant: Accountant | None = None, dataset: str | None = None,
            key: str | None = None) -> TwoStageSelector:
        y = np.asarray(y, dtype=np.float64)
        if X.shape[0] != y.shape[0]:
            raise ParameterError(f"X has {X.shape[0]} rows but y has {y.shape[0]} entries")
        X = sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        blocks = self.blocks(X.shape[0])
        counts = np.zeros(X.shape[1])
        for rows in blocks:
            counts[block_votes(X[rows], y[rows], self.k, self.alpha)] += 1
        return self.fit_votes(counts, len(blocks), accountant, dataset, key)

    def privacy_charge(self) -> tuple[float, float, str]:
        """(epsilon, delta, mechanism) a release must be charged: what ``fit`` charges itself."""
        return self.epsilon, 0.0, self.name

    def fit_votes(self, counts: np.ndarray, n_blocks: int, accountant: Accountant | None = None,
                  dataset: str | None = None, key: str | None = None) -> TwoStageSelector:
        """Release the top-k of counts/m + Lap(2k/(m epsilon)) (counts = votes summed over m blocks)."""
        t0 = time.perf_counter()
        counts = np.asarray(counts, dtype=np.float64)
        if self.k >= counts.shape[0]:
            raise ParameterError(f"k={self.k} must be smaller than the number of features {counts.shape[0]}")
        m = check_count(n_blocks, "n_blocks")
        # the sensitivity 2k/m holds only for votes of at most k distinct features per block
        if counts.min() < 0 or counts.max() > m or counts.sum() > self.k * m or np.any(counts != np.round(counts)):
            raise ParameterError(f"counts are not the sum of {m} block votes of at most k={self.k} features each")
        lap = Laplace(self.epsilon, sensitivity=2.0 * self.k / m, random_state=self._rng)

        def compute() -> list[int]:
            noisy = lap.randomise(counts / m)
            return sorted(int(i) for i in np.argpartition(-noisy, self.k - 1)[: self.k])

        if accountant is None:
            out, self.release_ = compute(), None
        else:
            if dataset is None:
                raise ParameterError("dataset is required to charge the accountant")
            key = key or f"two-stage-{uuid.uuid4().hex}"
            out = accountant.release(dataset, *self.privacy_charge(), key, compute)
            self.release_ = {"dataset": dataset, "key": key}
        self.features_ = np.asarray(out, dtype=np.int64)
        self.n_features_in_ = counts.shape[0]
        self.seconds_ = time.perf_counter() - t0
        return self


class TwoStageRegression:
    """Both stages: private support (epsilon_1) then objective perturbation on it (epsilon_2).

    ``epsilon`` is split as ``epsilon_split`` : 1 - ``epsilon_split`` (50/50 as in the seed-002
    code); ``delta`` > 0 switches stage 2 to Gaussian noise. ``coef_`` has zeros off the support.
    """

    def __init__(self, k: int, epsilon: float, delta: float = 0.0, loss: str = "squared", alpha: float = 0.1,
                 epsilon_split: float = 0.5, random_state: RandomState = None) -> None:
        check_epsilon(epsilon)
        if not 0.0 < float(epsilon_split) < 1.0:
            raise ParameterError(f"epsilon_split must lie in (0, 1), got {epsilon_split!r}")
        rng = check_random_state(random_state)
        self.epsilon, self.delta, self.loss = float(epsilon), delta, loss
        self.selector = TwoStageSelector(k, epsilon * epsilon_split, alpha, random_state=rng)
        self.model = ObjectivePerturbation(loss, epsilon * (1.0 - epsilon_split), delta, random_state=rng)

    def fit(self, X: Matrix, y: np.ndarray) -> TwoStageRegression:
        self.selector.fit(X, y)
        S = self.selector.features_
        X_S = X[:, S]
        self.model.fit(X_S.toarray() if sp.issparse(X_S) else X_S, y)
        self.coef_ = np.zeros(X.shape[1])
        self.coef_[S] = self.model.coef_
        self.features_ = S
        return self

    def decision_function(self, X: Matrix) -> np.ndarray:
        return np.asarray(X @ self.coef_).ravel()

    def predict(self, X: Matrix) -> np.ndarray:
        z = self.decision_function(X)
        return (z > 0).astype(np.int64) if self.loss == "logistic" else z
