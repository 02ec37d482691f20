"""AdaSSP: private least squares by sufficient-statistics perturbation with an adaptive ridge.

Reference: Y.-X. Wang 2018, "Revisiting differentially private linear regression: optimal and
adaptive prediction & estimation in unbounded domain" (UAI), Algorithm 2; accounted here in zCDP.

Each record is mapped, alone, into the public domain the mechanism assumes: the row by its
``row_norm`` map (``dpdist.data.record_maps``; then scaled down to l2 norm <= 1 should it exceed
it), an intercept column c appended and the whole scaled by a = 1 / sqrt(1 + c^2), so that
z = a (x, c) has ||z||_2 <= 1; the target clipped to [-B, B] (B = ``y_bound``). Three Gaussian
releases follow:

1. ``lambda_min(Z^T Z) + N(0, s1^2)``: adding a record adds z z^T (positive semi-definite, of
   norm ||z||^2 <= 1), which moves every eigenvalue up by at most 1 (Weyl): sensitivity 1;
2. ``Z^T Z + W``, W symmetric with independent N(0, s2^2) entries on and above the diagonal: the
   upper triangle of z z^T has l2 norm at most ||z z^T||_F = ||z||^2 <= 1;
3. ``Z^T y + N(0, s3^2 I)``: z y_i has l2 norm at most B.

Privacy (ADD/REMOVE one record; n never enters): each release is a Gaussian mechanism of the stated
sensitivity, so the three compose to rho = 1/(2 s1^2) + 1/(2 s2^2) + B^2/(2 s3^2)-zCDP, charged as
``PrivacyLoss.zcdp``; the ridge lambda and theta = (A~ + lambda I)^-1 b~ are post-processing. The claim
and its proof: [docs/proofs/statistic_models-adassp.md][proof-adassp].

Wide data: with ``k`` set, the k columns are first chosen by the Gaussian top-k on |Z^T y|
(``dpdist.selection.gaussian``; sensitivity B: ||z y_i||_2 <= B), a fourth zCDP release, and the
three releases above run on those k columns (a subvector of z has norm <= 1 too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted, validate_data

from dpdist.base import PARAMETERS, PrivacyParams, PrivateLearner, PrivateRegressorMixin, ReleaseRun
from dpdist.data.record_maps import ROW_MAPS, apply_row_map, row_lengths
from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.selection.gaussian import GaussianTopK, zcdp_for
from dpdist.utils.validation import AtLeast, Between, Count, Delta, Epsilon, Options, Positive

__all__ = ["AdaSSPRegressor", "SSPPlan", "adassp_solve", "bounded_records", "noisy_statistics"]


@dataclass(frozen=True)
class SSPPlan:
    """The public noise scales of one AdaSSP release (``s1`` 0: no lambda_min release)."""

    s1: float
    s2: float
    s3: float
    y_bound: float

    @property
    def rho(self) -> float:
        """The zCDP rho of the three releases (module docstring)."""
        first = 0.0 if self.s1 == 0.0 else 1.0 / (2.0 * self.s1**2)
        return first + 1.0 / (2.0 * self.s2**2) + self.y_bound**2 / (2.0 * self.s3**2)

    @classmethod
    def for_rho(cls, rho: float, shares: tuple[float, float, float], y_bound: float) -> SSPPlan:
        """The scales that spend ``shares`` of ``rho`` on the three releases (a share 0 only for the first)."""
        r1, r2, r3 = (s * rho for s in shares)
        s1 = 0.0 if r1 == 0.0 else 1.0 / math.sqrt(2.0 * r1)
        return cls(s1, 1.0 / math.sqrt(2.0 * r2), y_bound / math.sqrt(2.0 * r3), y_bound)


def bounded_records(X: Any, y: np.ndarray, row_norm: str | None, c: float, y_bound: float) -> tuple[Any, np.ndarray]:
    """(Z, y clipped): each row mapped, scaled to l2 norm <= 1, the column c appended, all times
    1 / sqrt(1 + c^2), so ||z_i||_2 <= 1 for every record whatever the data (module docstring)."""
    Xm = apply_row_map(X, row_norm)
    shrink = 1.0 / np.maximum(row_lengths(Xm), 1.0)
    a = 1.0 / math.sqrt(1.0 + c * c)
    if sp.issparse(Xm):
        Z = sp.hstack([sp.diags(shrink * a) @ Xm, sp.csr_matrix(np.full((Xm.shape[0], 1), c * a))], format="csr")
    else:
        Z = np.hstack([Xm * (shrink * a)[:, None], np.full((Xm.shape[0], 1), c * a)])
    if c == 0.0:
        Z = Z[:, :-1]
    return Z, np.clip(np.asarray(y, dtype=np.float64), -y_bound, y_bound)


def _gram(Z: Any) -> np.ndarray:
    G = Z.T @ Z
    return np.asarray(G.toarray() if sp.issparse(G) else G, dtype=np.float64)


def noisy_statistics(
    Z: Any, y: np.ndarray, plan: SSPPlan, rng: np.random.Generator
) -> tuple[float, np.ndarray, np.ndarray]:
    """(lambda~_min, A~, b~): the three Gaussian releases on records already bounded (``bounded_records``)."""
    A = _gram(Z)
    p = A.shape[0]
    lam = 0.0
    if plan.s1 > 0.0:
        lam = float(np.linalg.eigvalsh(A)[0]) + plan.s1 * rng.standard_normal()
    W = np.triu(rng.standard_normal((p, p)))
    W = W + np.triu(W, 1).T
    b = np.asarray(Z.T @ y).ravel()
    return lam, A + plan.s2 * W, b + plan.s3 * rng.standard_normal(p)


def adassp_solve(lam_min: float, A: np.ndarray, b: np.ndarray, plan: SSPPlan, beta: float) -> tuple[np.ndarray, float]:
    """(theta, the ridge lambda): the post-processing of the releases (module docstring)."""
    p = A.shape[0]
    tail = math.sqrt(math.log(1.0 / beta))
    noise = plan.s2 * (2.0 * math.sqrt(p) + 2.0 * tail)
    low = max(0.0, lam_min - plan.s1 * math.sqrt(2.0) * tail) if plan.s1 > 0.0 else 0.0
    lam = max(0.0, noise - low)
    w, V = np.linalg.eigh(A + lam * np.eye(p))
    theta = V @ ((V.T @ b) / np.maximum(w, plan.s2))
    return theta, lam


@dataclass(**PARAMETERS)
class AdaSSPRegressor(PrivateRegressorMixin, PrivateLearner, PrivacyParams):
    """Private least squares by AdaSSP (module docstring), with an unpenalised intercept.

    Parameters
    ----------
    epsilon, delta : the release's budget ((epsilon, delta)-DP by the zCDP conversion).
    y_bound : the public bound B on |y| (targets clipped to it).
    row_norm : the per-record map of the rows (``dpdist.data.record_maps``), then norm <= 1 enforced.
    intercept_scaling : the intercept column's value c (0: no intercept).
    shares : the shares of rho spent on lambda_min, Z^T Z and Z^T y (the first may be 0).
    k : None (every column), or the number of columns a Gaussian top-k screens first (wide data).
    screen_share : the share of rho the screening spends when ``k`` is set.
    beta : the failure probability of the ridge's noise bound.
    random_state : None (OS entropy) or a seed (experiments only).
    """

    mechanism = "adassp"
    row_norm: str | None = "sqrt-l2"
    intercept_scaling: float = 1.0
    shares: tuple[float, float, float] = (0.05, 0.75, 0.2)
    k: int | None = None
    screen_share: float = 0.2
    beta: float = 0.05
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "epsilon": [Epsilon()],
        "delta": [Delta(zero=False)],
        "y_bound": [Positive()],
        "row_norm": [Options(*ROW_MAPS)],
        "intercept_scaling": [AtLeast(0.0)],
        "shares": "no_validation",  # _check_params: three shares summing to 1
        "k": [None, Count()],
        "screen_share": [Between(0.0, 1.0)],
        "beta": [Between(0.0, 1.0)],
        "random_state": "no_validation",
    }

    def _check_params(self) -> None:
        try:
            shares = tuple(float(s) for s in self.shares)
        except (TypeError, ValueError):
            shares = ()
        if len(shares) != 3 or shares[0] < 0 or min(shares[1:]) <= 0 or abs(sum(shares) - 1.0) > 1e-9:
            raise ParameterError(f"shares must be 3 numbers summing to 1, the last two > 0, got {self.shares!r}")

    def check_width(self, n_features: int) -> None:
        if self.k is not None and self.k >= n_features:
            raise ParameterError(f"k={self.k} must be smaller than the number of features ({n_features})")

    def _rhos(self) -> tuple[float, float]:
        """(the screening's rho (0 without k), the three releases' rho)."""
        rho = zcdp_for(float(self.epsilon), float(self.delta))
        if self.k is None:
            return 0.0, rho
        return float(self.screen_share) * rho, (1.0 - float(self.screen_share)) * rho

    def plan(self) -> SSPPlan:
        """The public noise scales of the three releases."""
        self.check_params()
        return SSPPlan.for_rho(self._rhos()[1], tuple(self.shares), float(self.y_bound))  # type: ignore[arg-type]

    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        """rho-zCDP at the budget (no count of the records is needed)."""
        screen, ssp = self._rhos()
        details = {"rho": screen + ssp, "screen_rho": screen}
        return Charge(PrivacyLoss.zcdp(screen + ssp, float(self.delta)), "adassp/squared", details)

    def release_params(self, n_features: int | None = None, n_public: int | None = None) -> dict[str, Any]:
        params = super().release_params(n_features, n_public)
        params["shares"] = [float(s) for s in self.shares]
        return params

    def release_on(self, X: Any, y: np.ndarray, run: ReleaseRun) -> dict[str, Any]:
        """The four (or three) Gaussian releases and their post-processing: the released model."""
        c = float(self.intercept_scaling)
        Z, yc = bounded_records(X, y, self.row_norm, c, float(self.y_bound))
        d = X.shape[1]
        cols = np.arange(d)
        screen_rho, _ = self._rhos()
        if self.k is not None:
            Zx = Z[:, :d]
            scores = np.abs(np.asarray(Zx.T @ yc).ravel())
            cols = GaussianTopK(int(self.k), screen_rho, float(self.delta), float(self.y_bound)).select(scores, run.rng)
            Z = Z[:, np.append(cols, d)] if c > 0 else Z[:, cols]
        plan = self.plan()
        theta, lam = adassp_solve(*noisy_statistics(Z, yc, plan, run.rng), plan, float(self.beta))
        a = 1.0 / math.sqrt(1.0 + c * c)
        w = np.zeros(d)
        w[cols] = a * theta[: cols.size]
        nz = np.flatnonzero(w)
        return {
            "indices": nz.tolist(),
            "values": w[nz].tolist(),
            "intercept": float(a * c * theta[-1]) if c > 0 else 0.0,
            "n_features": int(d),
            "row_norm": self.row_norm,
            "method": self.mechanism,
            "ridge": float(lam),
            **run.extra,
        }

    def _set_released(self, out: dict[str, Any]) -> None:
        self.n_features_in_ = int(out["n_features"])
        w = np.zeros(self.n_features_in_)
        w[np.asarray(out["indices"], dtype=np.int64)] = out["values"]
        self.coef_ = w
        self.intercept_ = float(out["intercept"])
        self.ridge_ = float(out["ridge"])

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "coef_")
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        Xm = apply_row_map(X, self.row_norm)
        return np.asarray(Xm @ self.coef_).ravel() / np.maximum(row_lengths(Xm), 1.0) + self.intercept_

    def __sklearn_tags__(self):  # noqa: ANN204
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
