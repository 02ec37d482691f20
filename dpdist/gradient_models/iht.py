"""DP-IHT learners: noisy iterative hard thresholding (Cai, Wang & Zhang 2021), full-batch DP-GD
whose iterate is cut to its ``s`` largest weights after every step (``dpdist.solvers.dp_iht``).
s-sparse models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from dpdist.base import PARAMETERS, ReleaseRun
from dpdist.exceptions import ParameterError
from dpdist.gradient_models.base import GradientClassifierMixin, GradientRegressorMixin, SteppedModel
from dpdist.solvers.dp_iht import dp_iht
from dpdist.utils.validation import Count

__all__ = ["DPIHTClassifier", "DPIHTRegressor"]


@dataclass(**PARAMETERS)
class _IHT(SteppedModel):
    """Full-batch DP-GD projected on s-sparse vectors after every step."""

    mechanism = "dp-iht"
    s: int = 100
    max_iter: int = 100
    average: bool = False
    _parameter_constraints: ClassVar[dict[str, Any]] = {"s": [Count()], "max_iter": [Count()]}

    def _steps(self, n_public: int) -> tuple[float, int, float]:
        return 1.0, int(self.max_iter), float(n_public)

    def check_width(self, n_features: int) -> None:
        if self.s >= n_features:
            raise ParameterError(f"s={self.s} must be smaller than the number of features ({n_features})")

    def _train(self, X: sp.csr_matrix, y: np.ndarray, run: ReleaseRun) -> tuple[np.ndarray, float]:
        return dp_iht(X, y, self.run_plan(run), int(self.s), run.rng, run.progress)


_IHT_DOC = """
    Parameters
    ----------
    s : the number of non-zero weights (the released model is s-sparse).
    epsilon, delta, max_iter, lr, clip, l2, intercept_scaling, average, row_norm, n_records,
    count_epsilon, random_state : as ``DPGDClassifier``.
"""


@dataclass(**PARAMETERS)
class DPIHTClassifier(GradientClassifierMixin, _IHT):
    __doc__ = "Private s-sparse logistic regression by noisy iterative hard thresholding.\n" + _IHT_DOC

    lr: float = 10000.0
    intercept_scaling: float = 0.01


@dataclass(**PARAMETERS)
class DPIHTRegressor(GradientRegressorMixin, _IHT):
    __doc__ = (
        "Private s-sparse least squares by noisy iterative hard thresholding.\n"
        + _IHT_DOC
        + "    y_bound : the public bound on |y|.\n"
    )

    lr: float = 100.0
    intercept_scaling: float = 0.1
