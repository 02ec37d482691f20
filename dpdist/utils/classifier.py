"""What every binary linear classifier of dpdist does with a fitted model: its classes from the release,
its margins as the decision function, the logistic probabilities, and the predicted labels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.base import ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets, type_of_target

from dpdist.exceptions import ParameterError

__all__ = ["BinaryLinearClassifierMixin", "require_public_classes"]


def require_public_classes(classes: Any, accountant: object) -> None:
    """A release (through ``accountant``) of a classifier needs its two classes given: read from y,
    the released model's classes would be a function of the data."""
    if accountant is not None and classes is None:
        raise ParameterError(
            "classes are public schema: pass classes=[negative, positive] (the labels declared "
            "for the data); read from y, the released model's classes would be a function of it"
        )


class BinaryLinearClassifierMixin(ClassifierMixin):
    """Two public classes [negative, positive]: the positive one where the margin is > 0.

    The estimator provides ``_margins(X)`` (checking that it is fitted) and ``classes``."""

    classes: Any
    classes_: np.ndarray
    _margins: Callable[[Any], np.ndarray]  # the estimator's own (declared here, defined by the estimator)

    def _binary_classes(self, y: np.ndarray) -> np.ndarray:
        """The two classes (the public ``classes``, else the labels seen in y), set as ``classes_``; y's
        labels must lie within them. The messages name no count or value of the data."""
        check_classification_targets(y)
        if self.classes is None:
            y_type = type_of_target(y, input_name="y", raise_unknown=True)
            if y_type != "binary":
                raise ParameterError(
                    f"Only binary classification is supported. The type of the target is {y_type}: "
                    f"{type(self).__name__} needs exactly 2 classes (pass classes=[negative, positive])"
                )
        classes = np.unique(y) if self.classes is None else np.asarray(self.classes)
        if classes.size != 2:
            raise ParameterError(f"{type(self).__name__} needs exactly 2 classes, got {classes.size} class(es)")
        if not np.isin(y, classes).all():
            raise ParameterError("y has labels outside the given classes")
        self.classes_ = classes
        return classes

    def _coded_labels(
        self, y: np.ndarray, accountant: object, negative: float, public_classes: bool = True
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """(y coded ``negative`` / 1.0 by the two classes, the released model's ``{"classes": [...]}``).

        With an accountant (``public_classes``) the classes must be given: read from y, the released
        model's classes would be a function of the data."""
        if public_classes:
            require_public_classes(self.classes, accountant)
        classes = self._binary_classes(y)
        coded = np.where(y == classes[1], 1.0, negative)
        return coded, {"classes": [c.item() if hasattr(c, "item") else c for c in classes]}

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
