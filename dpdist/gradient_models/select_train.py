"""Select-then-train learners: a private screening of the ``k`` features most correlated with y
(Gaussian noise on |X^T y| of the normalised rows, then the top k: ``dpdist.selection.gaussian``),
then DP-SGD on those k columns, charged as one release. k-sparse models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import normalize

from dpdist.base import PARAMETERS, ReleaseRun
from dpdist.exceptions import ParameterError
from dpdist.gradient_models.base import (
    EpochSchedule,
    GradientClassifierMixin,
    GradientRegressorMixin,
    SteppedModel,
)
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.selection.gaussian import GaussianTopK
from dpdist.solvers.dp_sgd import dp_sgd
from dpdist.utils.validation import Between, Count

__all__ = ["SelectTrainClassifier", "SelectTrainRegressor"]


@dataclass(**PARAMETERS)
class _SelectTrain(EpochSchedule, SteppedModel):
    """Private screening of k columns (Gaussian noise on |X^T y|), then DP-SGD on them.

    The two phases are one release: the screening's loss (zCDP, ``GaussianTopK``) composed with
    DP-SGD's on the k columns (``PrivacyLoss.compose``). Each is calibrated to its share of
    (epsilon, delta) -- ``selection_share`` of both for the screening, the rest for DP-SGD -- and
    then both noises are scaled down by one common factor until the composed loss is (epsilon,
    delta) (their Renyi curves compose tighter than their epsilons add). The screening's output
    fixes which columns DP-SGD reads, not its loss.
    """

    mechanism = "select-train"
    k: int = 100
    selection_share: float = 0.3
    epochs: float = 100.0
    _parameter_constraints: ClassVar[dict[str, Any]] = {"k": [Count()], "selection_share": [Between(0.0, 1.0)]}

    def check_width(self, n_features: int) -> None:
        if self.k >= n_features:
            raise ParameterError(f"k={self.k} must be smaller than the number of features ({n_features})")

    def _training_budget(self) -> tuple[float, float]:
        rest = 1.0 - float(self.selection_share)
        return rest * float(self.epsilon), rest * float(self.delta)

    def _loss_at(self, n_public: int, scale: float) -> tuple[PrivacyLoss, float, float]:
        """(composed loss, screening rho, DP-SGD's z) with both phases' share calibrations' noise times
        ``scale``."""
        share = float(self.selection_share)
        rho = GaussianTopK.for_budget(int(self.k), share * self.epsilon, share * self.delta).rho / (scale * scale)
        z = self._base_noise(n_public) * scale
        loss = PrivacyLoss.compose(PrivacyLoss.zcdp(rho, share * self.delta), self._training_loss(z, n_public))
        return loss, rho, z

    def _joint_scale(self, n_public: int) -> float:
        """The common factor (<= 1) on both phases' noise whose composed loss is (epsilon, delta):
        each phase calibrated to its share alone leaves budget unused, as their Renyi curves compose
        tighter than their epsilons add. Bisection on public quantities (cached)."""
        cache = self.__dict__.setdefault("_noise_cache", {})
        key = ("joint", n_public, repr(sorted(self.get_params().items())))
        if key not in cache:
            ok = lambda x: self._loss_at(n_public, x)[0].epsilon <= self.epsilon  # noqa: E731
            lo, hi = 0.05, 1.0  # hi meets the target (basic composition of the shares)
            if ok(lo):
                hi = lo
            while hi - lo > 1e-3 * hi:
                mid = 0.5 * (lo + hi)
                lo, hi = (lo, mid) if ok(mid) else (mid, hi)
            cache[key] = hi
        return cache[key]

    def _scaled_charge(self, n_public: int, noise_scale: float) -> Charge:
        scale = noise_scale * self._joint_scale(n_public)
        loss, rho, z = self._loss_at(n_public, scale)
        return Charge(loss, f"{self.mechanism}/{self._loss}", {"noise_multiplier": z, "screening_rho": rho})

    def _train(self, X: sp.csr_matrix, y: np.ndarray, run: ReleaseRun) -> tuple[np.ndarray, float]:
        if self.k >= X.shape[1]:
            raise ParameterError(f"k={self.k} must be smaller than the number of features ({X.shape[1]})")
        yb = np.clip(y, -1.0, 1.0)  # the screening's bound (|y_i| <= 1; rows have ||x_i||_2 <= 1 below)
        Xs = normalize(X, norm="l2") if self.row_norm != "l2" else X
        screen = GaussianTopK(
            int(self.k), run.charge.details["screening_rho"], float(self.selection_share) * self.delta
        )
        cols = screen.select(np.abs(Xs.T @ yb), run.rng)
        w_k, b = dp_sgd(X[:, cols], y, self.run_plan(run), run.rng, run.progress)
        w = np.zeros(X.shape[1])
        w[cols] = w_k
        return w, b


_ST_DOC = """
    Parameters
    ----------
    k : the number of columns screened (the released model has at most k non-zero weights).
    selection_share : the share of epsilon and delta the screening spends.
    epsilon, delta, epochs, batch_size, lr, clip, l2, intercept_scaling, average, row_norm,
    n_records, count_epsilon, random_state : as ``DPSGDClassifier`` (DP-SGD on the k columns).

    The screening reads the rows normalised to unit l2 norm and y clipped to [-1, 1] (its bounds:
    the score vector's l2 sensitivity is then 1); DP-SGD reads the rows as ``row_norm`` makes them.
"""


@dataclass(**PARAMETERS)
class SelectTrainClassifier(GradientClassifierMixin, _SelectTrain):
    __doc__ = "Private k-sparse logistic regression: a private screening of k columns, then DP-SGD on them.\n" + _ST_DOC

    lr: float = 100.0


@dataclass(**PARAMETERS)
class SelectTrainRegressor(GradientRegressorMixin, _SelectTrain):
    __doc__ = (
        "Private k-sparse least squares: a private screening of k columns, then DP-SGD on them.\n"
        + _ST_DOC
        + "    y_bound : the public bound on |y|.\n"
    )

    lr: float = 1.0
