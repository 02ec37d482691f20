"""Noisy iterative hard thresholding (DP-IHT; Cai, Wang & Zhang 2021, "The cost of privacy", Alg. 4).

Full-batch DP-GD (``dp_sgd`` with q = 1: the clipped gradient sum of every record, Gaussian noise
on all d coordinates, divided by the public count) followed, after every step, by keeping only
the s largest |w_j| (hard thresholding); the intercept is never thresholded. The release is the
last iterate, s-sparse.

Privacy: each step's noisy sum is a Gaussian mechanism of l2-sensitivity C (``dp_sgd``), so T
steps are T / (2 z^2)-zCDP; the thresholding looks only at the noisy iterate (post-processing).
Cai et al. add noise only to the chosen coordinates and choose them by "peeling" (s report-noisy-
max steps of l_inf-bounded records). On l2-bounded rows the Gaussian noise on the whole vector is
cheaper at the same rho: its scale does not grow with s (``dpdist.selection.gaussian``); the
d draws per step are its cost, and ``gaussian_noise`` draws them in threads.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from dpdist.exceptions import ParameterError
from dpdist.solvers.dp_sgd import SGDPlan, clipped_gradient_sum, csr_parts

__all__ = ["dp_iht", "hard_threshold"]


def hard_threshold(w: np.ndarray, s: int) -> None:
    """Zero every entry of ``w`` but its ``s`` largest in magnitude (in place; ties by position)."""
    if s < w.size:
        w[np.argpartition(-np.abs(w), s - 1)[s:]] = 0.0


def dp_iht(
    X: sp.csr_matrix | sp.csr_array,
    y: np.ndarray,
    plan: SGDPlan,
    s: int,
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, float]:
    """Run ``plan`` (full batch: ``plan.sampling_rate`` must be 1) with an s-sparse projection after
    each step; return (w, b), w s-sparse."""
    if plan.sampling_rate != 1.0:
        raise ParameterError("DP-IHT takes full-batch steps: the plan's sampling_rate must be 1")
    n, d = X.shape
    if not 1 <= s < d:
        raise ParameterError(f"s must lie in [1, {d - 1}] (the number of features less one), got {s}")
    parts = csr_parts(X)
    y = np.ascontiguousarray(y, dtype=np.float64)
    rows = np.arange(n, dtype=np.int64)
    w, b = np.zeros(d), np.zeros(1)
    g = np.empty(d)
    for t in range(plan.steps):
        g[:] = 0.0
        gb = plan.noisy_gradient(rng, g, clipped_gradient_sum(parts, y, rows, (w, b), plan.hyper, g), w)
        w -= plan.lr * g
        b[0] -= plan.lr * gb / plan.normaliser
        hard_threshold(w, s)
        if progress is not None:
            progress(t + 1, plan.steps)
    return w, float(b[0]) * plan.intercept_scaling
