"""DP-SIS: sure independence screening with a private top-k ([SKDRR24] Sec. 3; docs/algorithms.md §4.1).

Scores q_j = |x_(j)^T y|. With every |X_ij| <= 1 and |y_i| <= 1, adding or removing one
record moves each q_j by at most 1, in either direction: Delta_inf = 1 (ADD/REMOVE; 2 under
REPLACE), non-monotone. The k features are released by a private top-k of q -- by default
the canonical Lipschitz mechanism ([SKDRR24] App. A, Alg. 2; gamma = 1/2), with the
epsilon/2 utility scale required for non-monotone scores (docs/algorithms.md §4.2) -- and nothing else
about q leaves: the scores are never stored on the estimator.

The bounds are enforced, not assumed: ``bounds="check"`` refuses data outside them,
``bounds="clip"`` clips each entry (a per-record map, free of privacy cost). The paper's
pre-processing (centre columns, scale each column by its max, scale y by its max) uses
statistics of the whole data set; it lives in :mod:`dpdist.data.transforms`, which warns
about it, and is not done here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from dpdist.base import PARAMETERS, PrivacyParams, charged_to
from dpdist.data.transforms import BOUND_MODES, Matrix, enforce_bounds
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge
from dpdist.selection.baselines import JointTopK, LaplaceTopK, PeelingTopK
from dpdist.selection.support import FeatureReleaseSelector
from dpdist.selection.topk import CanonicalTopK
from dpdist.utils.random import check_random_state
from dpdist.utils.validation import Count, Delta, Options

__all__ = ["MECHANISMS", "STORE_CLASSES", "DPSIS", "correlation_scores", "store_scores", "store_target"]

MECHANISMS = ("canonical", "peeling", "joint", "laplace")


def correlation_scores(X: Matrix, y: np.ndarray) -> np.ndarray:
    """q_j = |x_(j)^T y| (non-private: the input of a top-k mechanism, never a release)."""
    y = np.asarray(y, dtype=np.float64)
    if X.shape[0] != y.shape[0]:
        raise ParameterError(f"X has {X.shape[0]} rows but y has {y.shape[0]} entries")
    if sp.issparse(X):
        return np.abs(sp.csr_matrix(X).T @ y)
    return np.abs(np.asarray(X, dtype=np.float64).T @ y)


STORE_CLASSES = [-1.0, 1.0]  # a binary store's public labels (:func:`store_target`'s mapping)


def store_target(store: Any, y: np.ndarray | None = None) -> np.ndarray:
    """The store's target mapped into [-1, 1] by a public rule (no statistic of the data).

    Class labels go to their codes 0..K-1 (ascending label order, recorded at ingest), then
    binary codes become {-1, +1} and multiclass codes are divided by K - 1; regression
    targets are returned unchanged and must satisfy |y| <= 1 or be clipped. ``y`` is a slice
    of the store's labels (default: all of them).
    """
    y = np.asarray(store.y if y is None else y, dtype=np.float64)
    mapping = store.meta.get("label_mapping")
    if store.task == "regression" or not mapping:
        return y
    labels = np.array(sorted(float(v) for v in mapping))
    codes = np.searchsorted(labels, y).astype(np.float64)
    if store.task == "binary":
        return 2.0 * codes - 1.0
    return codes / max(1, labels.size - 1)


def store_scores(
    store: Any,
    y: np.ndarray | None = None,
    bounds: str = "check",
    block_rows: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """|X^T y| over a store's row blocks in one process, each block held to the bounds.

    The Dask version of this reduction, one task per range of the CSC copy's columns, is
    ``dpdist.pipelines.sis.correlation_scores``; both give the same scores.
    """
    y = store_target(store) if y is None else np.asarray(y, dtype=np.float64)
    acc = np.zeros(store.shape[1])
    for r0, X_b, _ in store.iter_row_blocks(block_rows):
        X_b, y_b = enforce_bounds(X_b, y[r0 : r0 + X_b.shape[0]], mode=bounds, name=f"store {store.path}")
        acc += X_b.T @ y_b
        if progress is not None:
            progress(r0 + X_b.shape[0], store.shape[0])
    return np.abs(acc)


@dataclass(**PARAMETERS)
class DPSIS(FeatureReleaseSelector, PrivacyParams):
    """Private feature screening: the k features with the largest |x_(j)^T y|, by a DP top-k.

    Parameters
    ----------
    k : number of features to release.
    epsilon, delta : the budget of the release (delta only for ``mechanism="laplace"``).
    mechanism : "canonical" ([SKDRR24]; default), or a baseline of docs/algorithms.md §4.3: "peeling",
        "joint", "laplace".
    gamma, noise : of the canonical mechanism (gamma = 1/2 as in [SKDRR24]; "gumbel" is the
        exact exponential mechanism, "exponential" the original noise; both epsilon-DP).
    bounds : "check" (refuse |X_ij| > 1 or |y_i| > 1) or "clip".
    random_state : None draws noise from OS entropy; an int is for experiments only.

    Notes
    -----
    A scikit-learn selector (``get_support``, ``transform``, usable in a ``Pipeline``);
    parameters are validated in ``fit``. After ``fit``: ``features_`` (ascending indices),
    ``n_features_in_``, ``release_`` (the ledger record when an accountant was given).
    """

    k: int = 10
    delta: float = 0.0  # pure epsilon-DP by default (PrivacyParams: 1e-6)
    mechanism: str = "canonical"
    gamma: float = 0.5
    noise: str = "gumbel"
    bounds: str = "check"
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "k": [Count()],
        "epsilon": "no_validation",  # by the top-k mechanism, as its budget (_make_mechanism)
        "delta": [Delta()],
        "mechanism": [Options(*MECHANISMS)],
        "gamma": "no_validation",  # by the canonical mechanism
        "noise": "no_validation",
        "bounds": [Options(*BOUND_MODES)],
        "random_state": "no_validation",
    }

    def _check_params(self) -> None:
        self._make_mechanism()

    def _key_prefix(self) -> str:
        return "dp-sis"

    def _make_mechanism(self, rng: np.random.Generator | None = None) -> Any:
        """The top-k mechanism (it checks its budget and the canonical mechanism's gamma and noise)."""
        k = int(self.k)
        if self.mechanism == "canonical":
            return CanonicalTopK(k, self.epsilon, 1.0, gamma=self.gamma, noise=self.noise, random_state=rng)
        if self.mechanism == "laplace":
            return LaplaceTopK(k, self.epsilon, self.delta, 1.0, random_state=rng)
        if self.delta:
            raise ParameterError(
                f"mechanism {self.mechanism!r} is pure epsilon-DP; delta must be 0, got {self.delta!r}"
            )
        cls = PeelingTopK if self.mechanism == "peeling" else JointTopK
        return cls(k, self.epsilon, 1.0, random_state=rng)

    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        """What a release is charged (exactly what ``fit`` charges itself): the top-k mechanism's
        loss -- the canonical mechanism with Gumbel noise is an exponential mechanism, so it is
        epsilon-bounded-range (epsilon^2/8-zCDP) as well as epsilon-DP."""
        mech = self._make_mechanism()
        return Charge(mech.privacy_loss, f"dp_sis/{mech.name}")

    def release_params(self, n_features: int | None = None, n_public: int | None = None) -> dict[str, Any]:
        """Every parameter of a release, for the ledger's release identity."""
        return {
            "k": self.k,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "mechanism": self.mechanism,
            "gamma": self.gamma,
            "noise": self.noise,
            "bounds": self.bounds,
            "n_features": n_features,
        }

    def fit(
        self,
        X: Matrix,
        y: np.ndarray,
        accountant: Accountant | None = None,
        dataset: str | None = None,
        key: str | None = None,
    ) -> DPSIS:
        """Screen (X, y) and release the k features (charged to ``accountant`` first when given)."""
        X, y = self._checked_data(X, y, accountant)
        X, y = enforce_bounds(X, np.asarray(y, dtype=np.float64), mode=self.bounds)
        return self.fit_scores(correlation_scores(X, y), accountant, dataset, key)

    def fit_scores(
        self,
        scores: np.ndarray,
        accountant: Accountant | None = None,
        dataset: str | None = None,
        key: str | None = None,
    ) -> DPSIS:
        """Release from scores |X^T y| that the caller computed under the bounds (stores, Dask)."""
        self.check_params()
        ledger = charged_to(accountant, dataset)
        mech = self._make_mechanism(check_random_state(self.random_state))
        scores = np.asarray(scores, dtype=np.float64)
        self._check_k(scores.shape[0])
        if ledger is not None and self.mechanism == "laplace":  # docs/algorithms.md §4.3: recalled, not verified
            raise ParameterError(
                "mechanism 'laplace' (the oneshot Laplace top-k, whose constant and conditions "
                "are unverified) is for experiments only: no release through an accountant"
            )
        compute = lambda: [int(i) for i in mech.select(scores)]  # noqa: E731
        charge = self.privacy_charge() if ledger is not None else None
        out = self._release(charge, self._release_key(key), compute, self.release_params(scores.shape[0]), ledger)
        self.features_ = np.asarray(out, dtype=np.int64)
        self.n_features_in_ = scores.shape[0]
        return self
