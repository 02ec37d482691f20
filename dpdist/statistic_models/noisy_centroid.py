"""A private nearest-centroid classifier on a few privately screened columns, for p >> n.

For tables of a few dozen records and thousands of measurements (microarrays: [SKDRR24]'s
setting), a gradient method spends its budget on p noisy coordinates over a handful of steps.
This learner spends it on three small releases instead, one release in all:

1. **The class counts** (n-, n+) + Laplace(1/eps_c) each: one record changes one count by 1 (a
   histogram: l1-sensitivity 1), so the pair is eps_c-DP. They give public weights
   w+ = m / n~+ and w- = -m / n~-, m = min(n~+, n~-), so |w| <= 1 and the balanced score below
   compares class *means* (a gene expressed highly in every sample scores 0, not n+ - n-).
2. **The columns**: the k largest of s_j = |sum_i w(y_i) x_ij| by the peeling exponential mechanism
   (k rounds at eps_s / k, ``dpdist.selection.baselines.PeelingTopK``). With every |x_ij| <= 1
   and |w| <= 1 (public, released in step 1), one record moves each s_j by at most 1 (in either
   direction: non-monotone): l_inf-sensitivity 1. k eps_s/k-bounded-range mechanisms.
3. **The class sums** on those k columns, S+ and S-, + N(0, sigma^2 I) each: one record adds its
   k values (l2 norm <= sqrt(k)) to one of the two: the pair has l2-sensitivity sqrt(k), a Gaussian
   mechanism of rho = k / (2 sigma^2).

The model is post-processing: the centroids mu+- = S~+- / n~+-, the weights mu+ - mu- and the
threshold at their midpoint (so the classes weigh equally whatever their sizes: a balanced rule).

Privacy (ADD/REMOVE one record; n is never used, only n~): the three steps compose adaptively, charged
as ``PrivacyLoss.compose(laplace(eps_c), bounded_range(eps_s / k, k), zcdp(rho))``; every bound is
enforced (rows by their ``row_norm`` map, then clipped to [-1, 1]; a label outside the public classes
refused before any charge). The claim and its proof:
[docs/proofs/statistic_models-noisy_centroid.md][proof-screened-centroid].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted, validate_data

from dpdist.base import PARAMETERS, PrivacyParams, PrivateClassifierMixin, PrivateLearner, ReleaseRun
from dpdist.data.record_maps import ROW_MAPS, apply_row_map
from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import Charge, PrivacyLoss, calibrate
from dpdist.selection.baselines import PeelingTopK
from dpdist.utils.validation import Between, Count, Delta, Epsilon, Options

__all__ = ["CentroidPlan", "ScreenedCentroidClassifier", "balanced_scores", "noisy_class_counts", "noisy_class_sums"]


class CentroidPlan:
    """The public noise of the three steps: Laplace eps_c, peeling eps_s over k rounds, Gaussian sigma."""

    def __init__(self, count_epsilon: float, select_epsilon: float, k: int, sigma: float) -> None:
        self.count_epsilon, self.select_epsilon, self.k, self.sigma = count_epsilon, select_epsilon, k, sigma

    def loss(self, delta: float) -> PrivacyLoss:
        """The composed loss of the three steps (module docstring)."""
        return PrivacyLoss.compose(
            PrivacyLoss.laplace(self.count_epsilon),
            PrivacyLoss.bounded_range(self.select_epsilon / self.k, self.k),
            PrivacyLoss.zcdp(self.k / (2.0 * self.sigma**2), delta),
        )


def noisy_class_counts(y: np.ndarray, epsilon: float, rng: np.random.Generator) -> tuple[float, float]:
    """(n~-, n~+): the counts of y = -1 and y = +1, each + Laplace(1/epsilon), at least 1 (post-processing)."""
    exact = np.array([np.count_nonzero(y < 0), np.count_nonzero(y > 0)], dtype=np.float64)
    noisy = np.maximum(exact + rng.laplace(scale=1.0 / epsilon, size=2), 1.0)
    return float(noisy[0]), float(noisy[1])


def balanced_scores(X: np.ndarray, y: np.ndarray, counts: tuple[float, float]) -> np.ndarray:
    """|sum_i w(y_i) x_i| with w+ = m / n~+, w- = -m / n~-, m = min(n~): each |w| <= 1 (never a release)."""
    m = min(counts)
    w = np.where(y > 0, m / counts[1], -m / counts[0])
    return np.abs(np.asarray(X.T @ w, dtype=np.float64).ravel())


def noisy_class_sums(
    X: np.ndarray, y: np.ndarray, sigma: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(S~-, S~+): the column sums of each class + N(0, sigma^2 I)."""
    k = X.shape[1]
    neg = np.asarray(X[y < 0].sum(axis=0)).ravel() + rng.normal(scale=sigma, size=k)
    pos = np.asarray(X[y > 0].sum(axis=0)).ravel() + rng.normal(scale=sigma, size=k)
    return neg, pos


@dataclass(**PARAMETERS)
class ScreenedCentroidClassifier(PrivateClassifierMixin, PrivateLearner, PrivacyParams):
    """Private nearest-centroid classifier on k privately screened columns (module docstring).

    Parameters
    ----------
    epsilon, delta : the release's budget (the three steps composed).
    k : the number of columns screened (the model has k non-zero weights).
    count_share, select_share : the shares of epsilon the class counts and the screening spend (their
        standalone epsilons); the class sums' Gaussian noise takes the rest (calibrated on the tight
        composition).
    row_norm : the per-record map (``dpdist.data.record_maps``; ``"rank"`` for dense measurements, ``"l2"``
        for sparse rows), then every entry clipped to [-1, 1].
    classes : the two labels [negative, positive], public (required with an accountant).
    random_state : None (OS entropy) or a seed (experiments only).
    """

    mechanism = "screened-centroid"
    k: int = 1
    count_share: float = 0.07
    select_share: float = 0.6
    row_norm: str | None = "rank"
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "epsilon": [Epsilon()],
        "delta": [Delta(zero=False)],
        "k": [Count()],
        "count_share": [Between(0.0, 1.0)],
        "select_share": [Between(0.0, 1.0)],
        "row_norm": [Options(*ROW_MAPS)],
        "classes": "no_validation",  # the fit's coding of the labels
        "random_state": "no_validation",
    }

    def _check_params(self) -> None:
        c, s = float(self.count_share), float(self.select_share)
        if not c + s < 1:
            raise ParameterError(f"count_share and select_share must be > 0 with a sum < 1, got {c!r}, {s!r}")

    def check_width(self, n_features: int) -> None:
        if self.k >= n_features:
            raise ParameterError(f"k={self.k} must be smaller than the number of features ({n_features})")

    def plan(self) -> CentroidPlan:
        """The public noise: the counts' and the screening's epsilons, and the largest rho for the sums
        (the smallest sigma) whose composition with them meets (epsilon, delta). Public values only."""
        self.check_params()
        eps, delta, k = float(self.epsilon), float(self.delta), int(self.k)
        ec, es = eps * float(self.count_share), eps * float(self.select_share)
        inv = calibrate(lambda x: CentroidPlan(ec, es, k, 1.0 / x).loss(delta), eps, delta, 1e3, tol=1e-6)
        return CentroidPlan(ec, es, k, 1.0 / inv)

    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        plan = self.plan()
        details = {"count_epsilon": plan.count_epsilon, "select_epsilon": plan.select_epsilon, "sigma": plan.sigma}
        return Charge(plan.loss(float(self.delta)), "screened-centroid/balanced", details)

    def _bounded(self, X: Any) -> Any:
        """Each record mapped alone into [-1, 1]: its ``row_norm`` map (ranks read every entry of a row, so
        sparse rows are made dense first: a table's rows, few by the rule that picks this learner), then
        clipped."""
        if self.row_norm == "rank" and sp.issparse(X):
            X = X.toarray()
        Xm = apply_row_map(X, self.row_norm)
        if sp.issparse(Xm):
            Xm.data = np.clip(Xm.data, -1.0, 1.0)
            return Xm
        return np.clip(Xm, -1.0, 1.0)

    def release_on(self, X: Any, y: np.ndarray, run: ReleaseRun) -> dict[str, Any]:
        """The three steps (module docstring) on the records, y > 0 the positive class: the released model."""
        plan = self.plan()
        signs = np.where(np.asarray(y) > 0, 1.0, -1.0)
        Xb = self._bounded(X)
        counts = noisy_class_counts(signs, plan.count_epsilon, run.rng)
        scores = balanced_scores(Xb, signs, counts)
        cols = PeelingTopK(int(self.k), plan.select_epsilon, random_state=run.rng).select(scores)
        neg, pos = noisy_class_sums(Xb[:, cols], signs, plan.sigma, run.rng)
        mu_neg, mu_pos = neg / counts[0], pos / counts[1]
        w = mu_pos - mu_neg
        return {
            "indices": [int(j) for j in cols],
            "values": w.tolist(),
            "intercept": float(-0.5 * (mu_pos + mu_neg) @ w),
            "n_features": int(X.shape[1]),
            "row_norm": self.row_norm,
            "method": self.mechanism,
            "class_counts": [counts[0], counts[1]],
            **run.extra,
        }

    def _set_released(self, out: dict[str, Any]) -> None:
        self.n_features_in_ = int(out["n_features"])
        w = np.zeros(self.n_features_in_)
        w[np.asarray(out["indices"], dtype=np.int64)] = out["values"]
        self.coef_ = w[np.newaxis, :]
        self.intercept_ = float(out["intercept"])
        self._from_result(out)

    def _margins(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return np.asarray(self._bounded(X) @ self.coef_.ravel()).ravel() + self.intercept_

    def __sklearn_tags__(self):  # noqa: ANN204
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
