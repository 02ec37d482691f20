"""The base of the private selectors that release k feature indices (DP-SIS, two-stage)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.feature_selection import SelectorMixin
from sklearn.utils.validation import check_is_fitted

from dpdist.base import PrivateEstimator
from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant

__all__ = ["FeatureReleaseSelector"]


class FeatureReleaseSelector(SelectorMixin, PrivateEstimator):
    """A scikit-learn selector whose release is ``features_``: k ascending column indices of the
    ``n_features_in_`` columns it was fitted on. It takes sparse (CSR) input."""

    k: int

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _checked_data(self, X: Any, y: Any, accountant: Accountant | None) -> tuple[Any, np.ndarray]:
        """The parameters checked, then (X, y) as CSR or dense float64 with a numeric target."""
        self.check_params()
        return self._check_data(X, y, accountant, accept_sparse="csr", dtype=np.float64, y_numeric=True)

    def _check_k(self, n_features: int) -> None:
        """Refuse k >= the number of features (a public shape) before anything is charged."""
        if int(self.k) >= n_features:
            raise ParameterError(
                f"k={int(self.k)} must be smaller than the number of features (n_features = {n_features})"
            )

    def _get_support_mask(self) -> np.ndarray:
        check_is_fitted(self, "features_")
        mask = np.zeros(self.n_features_in_, dtype=bool)
        mask[self.features_] = True
        return mask
