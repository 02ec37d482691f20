"""A private decision threshold for a released linear classifier: the best balanced accuracy.

On imbalanced labels the margin 0 of a private logistic model often sits past every positive:
the model predicts the majority class everywhere and its accuracy is the majority's share. The
threshold that maximises the balanced accuracy (the mean of the true-positive and true-negative
rates) is a statistic of the data, so it is released by a mechanism:

1. The released model w (public) scores each training record, m_i = x_i.w + b; the margins fall
   into ``bins`` public bins (edges logit(j / bins), j = 1..bins-1: equal steps of sigmoid(m)),
   one histogram per class.
2. Each of the 2 x bins cells gets Laplace(1/epsilon) noise. Adding or removing one record changes
   one cell by 1 (the model is fixed, public; the record's margin depends on it alone): a histogram
   of l1-sensitivity 1, so the release is epsilon-DP (ADD/REMOVE), charged as ``PrivacyLoss.laplace``.
3. Post-processing: for every edge t, the noisy counts give TPR(t) = (positives above t) / (all
   positives) and TNR(t) = (negatives below t) / (all negatives); the released threshold is the edge
   of the largest TPR + TNR (ties: the edge nearest 0).
"""

from __future__ import annotations

import numpy as np
from scipy.special import logit

from dpdist.privacy.loss import PrivacyLoss
from dpdist.utils.validation import check_count, check_epsilon

__all__ = ["BalancedThreshold"]


class BalancedThreshold:
    """The margin threshold of the best noisy balanced accuracy (module docstring)."""

    name = "balanced_threshold"

    def __init__(self, epsilon: float, bins: int = 64) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.bins = check_count(bins, "bins", 2)

    @property
    def privacy_loss(self) -> PrivacyLoss:
        """One Laplace histogram of l1-sensitivity 1."""
        return PrivacyLoss.laplace(self.epsilon)

    def edges(self) -> np.ndarray:
        """The public interior bin edges logit(j / bins), j = 1..bins-1."""
        return np.asarray(logit(np.arange(1, self.bins) / self.bins), dtype=np.float64)

    def histograms(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The exact class-wise histograms (2 x bins: negatives, positives); y > 0 is positive."""
        cell = np.searchsorted(self.edges(), np.asarray(margins, dtype=np.float64), side="left")
        pos = np.asarray(y) > 0
        return np.stack(
            [np.bincount(cell[~pos], minlength=self.bins), np.bincount(cell[pos], minlength=self.bins)]
        ).astype(np.float64)

    def noisy_histograms(self, margins: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The release: every cell + Laplace(1/epsilon)."""
        hist = self.histograms(margins, y)
        return hist + rng.laplace(scale=1.0 / self.epsilon, size=hist.shape)

    def choose(self, hist: np.ndarray) -> float:
        """The edge of the largest noisy TPR + TNR (post-processing of the released histograms)."""
        neg, pos = np.maximum(hist[0], 0.0), np.maximum(hist[1], 0.0)
        n_neg, n_pos = max(neg.sum(), 1.0), max(pos.sum(), 1.0)
        # at edge j (between cells j and j+1, 0-based): negatives in cells 0..j are below, positives in j+1.. above
        tnr = np.cumsum(neg)[:-1] / n_neg
        tpr = (n_pos - np.cumsum(pos)[:-1]) / n_pos
        score = tnr + tpr
        edges = self.edges()
        best = np.flatnonzero(score >= score.max() - 1e-12)
        return float(edges[best[np.argmin(np.abs(edges[best]))]])

    def release(self, margins: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> float:
        """The released threshold (call it inside the charged release)."""
        return self.choose(self.noisy_histograms(margins, y, rng))
