"""DP-SGD and full-batch DP-GD learners: Poisson batches of expected size ``batch_size`` for
``epochs`` passes [ACG+16], or ``max_iter`` steps over every record (DP-GD, the sampling rate 1;
``dpdist.pipelines.dp_gd`` runs its steps as a Dask reduction). ``dpdist.solvers.dp_sgd`` has the
algorithm and its proof. Dense models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from dpdist.base import PARAMETERS, ReleaseRun
from dpdist.exceptions import ParameterError
from dpdist.gradient_models.base import (
    EpochSchedule,
    GradientClassifierMixin,
    GradientRegressorMixin,
    SteppedModel,
)
from dpdist.solvers.dp_sgd import dp_sgd
from dpdist.utils.validation import Count, Positive

__all__ = ["DPGDClassifier", "DPGDRegressor", "DPSGDClassifier", "DPSGDRegressor"]


class _DPSGD(SteppedModel):
    """A learner whose steps are DP-SGD's on all columns (``dpdist.solvers.dp_sgd``), at its schedule."""

    def _train(self, X: sp.csr_matrix, y: np.ndarray, run: ReleaseRun) -> tuple[np.ndarray, float]:
        return dp_sgd(X, y, self.run_plan(run), run.rng, run.progress)


@dataclass(**PARAMETERS)
class _SGD(EpochSchedule, _DPSGD):
    """DP-SGD: Poisson batches of expected size ``batch_size`` for ``epochs`` passes, on all columns."""

    mechanism = "dp-sgd"


@dataclass(**PARAMETERS)
class _GD(_DPSGD):
    """Full-batch DP-GD: ``max_iter`` steps over every record (``dpdist.pipelines.dp_gd`` runs the same steps
    as a Dask reduction over a store's row blocks)."""

    mechanism = "dp-gd"
    max_iter: int = 100
    _parameter_constraints: ClassVar[dict[str, Any]] = {"max_iter": [Count()]}

    def _steps(self, n_public: int) -> tuple[float, int, float]:
        return 1.0, int(self.max_iter), float(n_public)


_SGD_DOC = """
    Parameters
    ----------
    epsilon, delta : the model's budget ((epsilon, delta)-DP; the count's release aside).
    epochs, batch_size : the schedule: q = batch_size / n~ (1 when the batch is the whole set),
        T = epochs / q steps.
    lr, clip, l2 : step size, per-record gradient clipping norm C, public L2 penalty.
    intercept_scaling : the intercept's feature value c (unpenalised intercept; 0: none).
    average : release the mean of the second half's iterates (post-processing) instead of the last.
    row_norm : "l2" (default), "max" or None: each row divided by its norm (a per-record map).
    n_records : a public count of the training records (e.g. a released noisy count), or None:
        the fit releases its own Laplace count at ``count_epsilon`` first.
    random_state : None (OS entropy, every release) or a seed (experiments only).
"""
_GD_DOC = _SGD_DOC.replace(
    """    epochs, batch_size : the schedule: q = batch_size / n~ (1 when the batch is the whole set),
        T = epochs / q steps.""",
    """    max_iter : the number of full-batch steps.""",
)
_CLASSES_DOC = "    classes : the two labels, public (default: the labels seen in y).\n"
_Y_BOUND_DOC = "    y_bound : the public bound on |y| (targets clipped to it, a per-record map).\n"


@dataclass(**PARAMETERS)
class DPSGDClassifier(GradientClassifierMixin, _SGD):
    __doc__ = "Private logistic regression (two classes) by DP-SGD.\n" + _SGD_DOC + _CLASSES_DOC

    lr: float = 10.0


@dataclass(**PARAMETERS)
class DPSGDRegressor(GradientRegressorMixin, _SGD):
    __doc__ = "Private least squares by DP-SGD.\n" + _SGD_DOC + _Y_BOUND_DOC

    lr: float = 1.0


@dataclass(**PARAMETERS)
class DPGDClassifier(GradientClassifierMixin, _GD):
    __doc__ = "Private logistic regression (two classes) by full-batch DP-GD.\n" + _GD_DOC + _CLASSES_DOC

    lr: float = 3000.0
    intercept_scaling: float = 0.02


@dataclass(**PARAMETERS)
class DPGDRegressor(GradientRegressorMixin, _GD):
    __doc__ = (
        "Private least squares by full-batch DP-GD.\n"
        + _GD_DOC.replace(
            "    lr, clip, l2 : step size,",
            "    lr : the step size; None: 1 / L, L = 1 + c^2 + l2 the smoothness of the mean squared loss on\n"
            "        rows of l2 norm <= 1 (a public bound); above 2 / L (gradient descent can diverge) it is refused.\n"
            "    clip, l2 :",
        )
        + _Y_BOUND_DOC
    )
    lr: float | None = None
    intercept_scaling: float = 0.1
    _parameter_constraints: ClassVar[dict[str, Any]] = {"lr": [None, Positive()]}

    def _smoothness(self) -> float:
        """L: every record's squared loss 1/2 (x.w + c b - y)^2 has Hessian z z^T, z = (x, c), of norm
        ||x||^2 + c^2 <= 1 + c^2 on rows of l2 norm <= 1 (``row_norm="l2"`` enforces it); plus the penalty."""
        return 1.0 + float(self.intercept_scaling) ** 2 + float(self.l2)

    def _check_params(self) -> None:
        if self.row_norm != "l2":
            if self.lr is None:
                raise ParameterError(
                    "lr=None takes its step from the bound ||x|| <= 1 of row_norm='l2'; with "
                    f"row_norm={self.row_norm!r} pass lr"
                )
            return
        limit = 2.0 / self._smoothness()
        if self.lr is not None and float(self.lr) > limit:
            raise ParameterError(
                f"lr={self.lr!r} is above 2 / (1 + c^2 + l2) = {limit:.4g}, where full-batch gradient descent on the "
                "squared loss of unit rows can diverge: lr=None takes 1 / (1 + c^2 + l2)"
            )

    def step_size(self) -> float:
        return 1.0 / self._smoothness() if self.lr is None else float(self.lr)
