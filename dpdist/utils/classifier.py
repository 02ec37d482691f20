"""What every binary linear classifier of dpdist does with a fitted model: its classes from the release,
its margins as the decision function, the logistic probabilities, and the predicted labels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.base import ClassifierMixin

from dpdist.exceptions import ParameterError

__all__ = ["BinaryLinearClassifierMixin"]


class BinaryLinearClassifierMixin(ClassifierMixin):
    """Two public classes [negative, positive]: the positive one where the margin is > 0.

    The estimator provides ``_margins(X)`` (checking that it is fitted) and ``classes``."""

    classes: Any
    classes_: np.ndarray
    _margins: Callable[[Any], np.ndarray]  # the estimator's own (declared here, defined by the estimator)

    def _from_result(self, result: dict[str, Any]) -> None:
        classes = result.get("classes") or self.classes
        if classes is None:
            raise ParameterError("the released model does not name its classes: pass classes=[negative, positive]")
        self.classes_ = np.asarray(classes)

    def decision_function(self, X: Any) -> np.ndarray:
        return self._margins(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        positive = self.decision_function(X) > 0  # first: an unfitted estimator raises NotFittedError here
        return self.classes_[positive.astype(np.int64)]
