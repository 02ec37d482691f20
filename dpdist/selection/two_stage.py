"""Two-stage private sparse regression (Kifer, Smith, Thakurta 2012; docs/algorithms.md §5): the paper-003 baseline.

Stage 1 ("Samp-Agg" support selection, pure epsilon_1-DP under ADD/REMOVE): m disjoint blocks (m public, or
floor(sqrt(n~)) of a Laplace count n~ released in the same charge), each record's block drawn at random from
secret randomness; a LASSO on each block and its vote for its s largest |beta_j|; the top-s of the mean vote
plus Laplace noise of scale 2s/(m eps_v). The procedure and its proof:
[docs/proofs/selection-two_stage.md][proof-two-stage].

Stage 2 fits :class:`dpdist.solvers.objective_perturbation.ObjectivePerturbation` on the
selected columns with epsilon_2 (a release of its own); the two releases compose in the ledger
(the SoK code's 1.5 epsilon is not reproduced).

The block fits are independent: :func:`block_votes` is the unit of work that
``dpdist.pipelines.two_stage`` runs on Dask workers, and :meth:`TwoStageSelector.fit_votes`
releases from the summed votes with a public m.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from dpdist.base import PARAMETERS, PrivacyParams, PrivateEstimator, PurePrivacyParams, charged_to
from dpdist.data.transforms import Matrix
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.privacy.mechanisms import Laplace
from dpdist.selection.support import FeatureReleaseSelector
from dpdist.solvers.lasso import screened_lasso
from dpdist.solvers.objective_perturbation import LOSSES, ObjectivePerturbation
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import Between, Count, Delta, Epsilon, Options, Positive, check_count

__all__ = [
    "TwoStageRegression",
    "TwoStageSelector",
    "assign_blocks",
    "block_labels",
    "block_votes",
    "blocks_from_count",
    "fit_on_support",
    "lasso_coefficients",
    "split_by_label",
    "truncated_vote",
]


def block_labels(n: int, n_blocks: int, random_state: RandomState = None) -> np.ndarray:
    """The block of each of n records, each drawn uniformly from the public ``n_blocks`` independently."""
    m = check_count(n_blocks, "n_blocks")
    return check_random_state(random_state).integers(m, size=n)


def split_by_label(label: np.ndarray, m: int) -> list[np.ndarray]:
    """Indices of each label 0..m-1, ascending within a label."""
    order = np.argsort(label, kind="stable")
    return np.split(order, np.cumsum(np.bincount(label, minlength=m))[:-1])


def assign_blocks(n: int, n_blocks: int, random_state: RandomState = None) -> list[np.ndarray]:
    """Row indices of each of the public ``n_blocks`` blocks, each record placed independently."""
    return split_by_label(block_labels(n, n_blocks, random_state), n_blocks)


def blocks_from_count(noisy_n: float) -> int:
    """m = floor(sqrt(n~)) (at least 1) from a released, noisy row count."""
    return max(1, math.isqrt(max(1, int(round(noisy_n)))))


def _block_lasso(X_b: Matrix, y_b: np.ndarray, alpha: float) -> tuple[np.ndarray | None, np.ndarray]:
    """(columns, their LASSO coefficients) of a block: its non-empty columns (ascending) for sparse
    input, None and all coefficients for dense input (``screened_lasso``: scikit-learn's coordinate
    descent on the columns the strong rule keeps, checked on all; CSC).

    A sparse block is fitted on its non-empty columns only: an all-zero column's coefficient is
    exactly 0 (its gradient is 0, and centering leaves it 0), so the solution is the same. They
    are found and renumbered from the block's own entries, so a 2,593-row block of KDDA's
    20.2M columns costs its ~10^5 entries, not O(20.2M) arrays (which took 80% of its time).
    """
    cols = None
    if sp.issparse(X_b):
        X_b = sp.csr_matrix(X_b)
        cols, local = np.unique(X_b.indices, return_inverse=True)
        X_b = sp.csr_matrix((X_b.data, local, X_b.indptr), shape=(X_b.shape[0], cols.size)).tocsc()
    return cols, screened_lasso(X_b, np.asarray(y_b, dtype=np.float64), alpha)


def lasso_coefficients(X_b: Matrix, y_b: np.ndarray, alpha: float) -> np.ndarray:
    """The block's LASSO coefficients over all columns (see ``_block_lasso``)."""
    cols, coef = _block_lasso(X_b, y_b, alpha)
    if cols is None:
        return coef
    full = np.zeros(X_b.shape[1])
    full[cols] = coef
    return full


def truncated_vote(coef: np.ndarray, s: int) -> np.ndarray:
    """Indices of the s largest |coef_j| among the non-zeros (fewer when fewer are non-zero)."""
    nz = np.flatnonzero(coef)
    if nz.size > s:
        nz = nz[np.argsort(-np.abs(coef[nz]), kind="stable")[:s]]
    return np.sort(nz)


def block_votes(X_b: Matrix, y_b: np.ndarray, s: int, alpha: float) -> np.ndarray:
    """One block's vote: at most s feature indices (on Dask, a group of blocks is the unit of
    parallel work: ``dpdist.pipelines.two_stage``). On the block's
    own columns: they ascend, so the vote (ties broken by column) is the one on all columns."""
    cols, coef = _block_lasso(X_b, y_b, alpha)
    vote = truncated_vote(coef, s)
    return vote if cols is None else cols[vote]


@dataclass(**PARAMETERS)
class TwoStageSelector(FeatureReleaseSelector, PurePrivacyParams):
    """Stage 1: private selection of the k features most often chosen by per-block LASSOs.

    ``n_blocks``: a public number of blocks m; None (default) releases a noisy row count with
    ``count_fraction`` of epsilon and uses m = floor(sqrt(n~)) (module doc).
    """

    mechanism = "two_stage/samp_agg"
    k: int = 10
    alpha: float = 0.1
    n_blocks: int | None = None
    count_fraction: float = 0.1
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "k": [Count()],
        "epsilon": [Epsilon()],
        "alpha": [Positive()],
        "n_blocks": [None, Count()],
        "count_fraction": [Between(0.0, 1.0)],
        "random_state": "no_validation",
    }

    def _key_prefix(self) -> str:
        return "two-stage"

    @property
    def _eps_count(self) -> float:
        return 0.0 if self.n_blocks is not None else float(self.epsilon) * float(self.count_fraction)

    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        """What a release is charged: the Laplace vote release (and the Laplace row count when m is not given)."""
        votes = PrivacyLoss.laplace(float(self.epsilon) - self._eps_count)
        loss = votes if self.n_blocks is not None else PrivacyLoss.compose(PrivacyLoss.laplace(self._eps_count), votes)
        return Charge(loss, self.mechanism)

    def release_params(self, n_features: int | None = None, n_public: int | None = None) -> dict[str, Any]:
        return {
            "k": self.k,
            "epsilon": self.epsilon,
            "alpha": self.alpha,
            "n_blocks": self.n_blocks,
            "count_fraction": self.count_fraction,
            "n_features": n_features,
        }

    def fit(
        self,
        X: Matrix,
        y: np.ndarray,
        accountant: Accountant | None = None,
        dataset: str | None = None,
        key: str | None = None,
    ) -> TwoStageSelector:
        """Select from (X, y); everything that touches the data runs after the charge."""
        X, y = self._checked_data(X, y, accountant)
        self._check_k(X.shape[1])
        rng = check_random_state(self.random_state)

        def compute() -> dict:
            m = self.n_blocks
            out: dict = {}
            if m is None:
                noisy_n = float(Laplace(self._eps_count, 1.0, random_state=rng).randomise(float(X.shape[0])))
                m = blocks_from_count(noisy_n)
                out["noisy_rows"] = float(noisy_n)
            counts = np.zeros(X.shape[1])
            for rows in assign_blocks(X.shape[0], m, rng):
                counts[block_votes(X[rows], y[rows], self.k, self.alpha)] += 1
            out.update(features=self._noisy_top_k(counts, m, rng), n_blocks=int(m))
            return out

        self._select(compute, X.shape[1], accountant, dataset, key)
        return self

    def fit_votes(
        self,
        counts: np.ndarray,
        n_blocks: int,
        accountant: Accountant | None = None,
        dataset: str | None = None,
        key: str | None = None,
    ) -> TwoStageSelector:
        """Release the top-k of counts/m + Lap(2k/(m epsilon)) (counts = votes summed over the public m blocks)."""
        if self.n_blocks is None or int(n_blocks) != int(self.n_blocks):
            raise ParameterError("fit_votes needs the selector's public n_blocks, and votes over that many blocks")
        self.check_params()
        counts = np.asarray(counts, dtype=np.float64)
        self._check_k(counts.shape[0])
        m = int(n_blocks)
        # the sensitivity 2k/m holds only for votes of at most k distinct features per block
        if counts.min() < 0 or counts.max() > m or counts.sum() > self.k * m or np.any(counts != np.round(counts)):
            raise ParameterError(f"counts are not the sum of {m} block votes of at most k={self.k} features each")
        rng = check_random_state(self.random_state)
        self._select(
            lambda: {"features": self._noisy_top_k(counts, m, rng), "n_blocks": m},
            counts.shape[0],
            accountant,
            dataset,
            key,
        )
        return self

    def _noisy_top_k(self, counts: np.ndarray, m: int, rng: np.random.Generator) -> list[int]:
        lap = Laplace(float(self.epsilon) - self._eps_count, sensitivity=2.0 * self.k / m, random_state=rng)
        noisy = lap.randomise(counts / m)
        return sorted(int(i) for i in np.argpartition(-noisy, self.k - 1)[: self.k])

    def _select(
        self,
        compute: Callable[[], dict[str, Any]],
        n_features: int,
        accountant: Accountant | None,
        dataset: str | None,
        key: str | None,
    ) -> None:
        ledger = charged_to(accountant, dataset)
        charge = self.privacy_charge() if ledger is not None else None
        out = self._release(charge, self._release_key(key), compute, self.release_params(n_features), ledger)
        self.features_ = np.asarray(out["features"], dtype=np.int64)
        self.n_blocks_ = int(out["n_blocks"])
        self.n_features_in_ = int(n_features)


@dataclass(**PARAMETERS)
class TwoStageRegression(PrivateEstimator, PrivacyParams):
    """Both stages: private support (epsilon_1) then objective perturbation on it (epsilon_2).

    ``epsilon`` is split as ``epsilon_split`` : 1 - ``epsilon_split`` (50/50 as in the paper-002
    code); ``delta`` > 0 switches stage 2 to Gaussian noise. ``coef_`` has zeros off the support.
    With an accountant the two stages are two releases, ``key`` and ``key + "/stage2"``.
    """

    mechanism = "two_stage/regression"
    k: int = 10
    delta: float = 0.0  # pure epsilon-DP by default (PrivacyParams: 1e-6)
    loss: str = "squared"
    alpha: float = 0.1
    epsilon_split: float = 0.5
    n_blocks: int | None = None
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "k": [Count()],
        "epsilon": [Epsilon()],
        "delta": [Delta()],
        "loss": [Options(*LOSSES)],
        "alpha": [Positive()],
        "epsilon_split": [Between(0.0, 1.0)],
        "n_blocks": [None, Count()],
        "random_state": "no_validation",
    }

    def _stages(self) -> tuple[TwoStageSelector, ObjectivePerturbation]:
        self.check_params()
        eps, rng = float(self.epsilon), check_random_state(self.random_state)
        return (
            TwoStageSelector(
                k=self.k, epsilon=eps * self.epsilon_split, alpha=self.alpha, n_blocks=self.n_blocks, random_state=rng
            ),
            ObjectivePerturbation(
                loss=self.loss, epsilon=eps * (1.0 - self.epsilon_split), delta=self.delta, random_state=rng
            ),
        )

    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        """Both stages composed (what the two releases together cost)."""
        selector, model = self._stages()
        return Charge(PrivacyLoss.compose(selector.privacy_charge().loss, model.privacy_loss), self.mechanism)

    def fit(
        self,
        X: Matrix,
        y: np.ndarray,
        accountant: Accountant | None = None,
        dataset: str | None = None,
        key: str | None = None,
    ) -> TwoStageRegression:
        selector, model = self._stages()
        if model.loss == "logistic":  # labels checked before either charge: no refusal after one
            model._binary_target(np.asarray(y))
        key = key or f"two-stage-regression-{uuid.uuid4().hex}"
        selector.fit(X, y, accountant, dataset, key if accountant else None)
        S = selector.features_
        self.stage2_ = fit_on_support(model, X, y, S, accountant, dataset, f"{key}/stage2" if accountant else None)
        self.coef_ = np.zeros(X.shape[1])
        self.coef_[S] = self.stage2_
        self.features_ = S
        return self

    def decision_function(self, X: Matrix) -> np.ndarray:
        return np.asarray(X @ self.coef_).ravel()

    def predict(self, X: Matrix) -> np.ndarray:
        z = self.decision_function(X)
        return (z > 0).astype(np.int64) if self.loss == "logistic" else z


def fit_on_support(
    model: ObjectivePerturbation,
    X: Matrix,
    y: np.ndarray,
    support: np.ndarray,
    accountant: Accountant | None = None,
    dataset: str | None = None,
    key: str | None = None,
) -> np.ndarray:
    """Stage 2 on the released ``support``: the objective-perturbation coefficients (charged first)."""
    S = np.asarray(support, dtype=np.int64)
    cols = X[:, S]
    X_S = cols.toarray() if isinstance(cols, sp.spmatrix | sp.sparray) else np.asarray(cols)

    if model.loss == "logistic":  # a label refusal comes before the charge, never after it
        model._binary_target(np.asarray(y))

    def compute() -> list[float]:
        return model.fit(X_S, y).coef_.ravel().tolist()

    if accountant is None:
        return np.asarray(compute())
    if dataset is None or key is None:
        raise ParameterError("dataset and key are required to charge the accountant")
    params = {**model.release_params(), "support": S.tolist()}
    return np.asarray(accountant.release(dataset, model.privacy_charge(), key, compute, params))
