"""A warning for private fits run under scikit-learn's exact model selection.

``GridSearchCV`` (and ``cross_val_score``, ``RandomizedSearchCV``, ...) fits a private estimator on
folds of private data and compares the fits' *exact* scores: each fit may be private, but the choice
among them is a function of the data with no noise. dpdist's private choice is
``dpdist.tuning.PrivateSearch`` (one charge, a noisy validation score). The check looks for
scikit-learn's ``model_selection`` in the caller's stack; it costs microseconds per fit.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType

from dpdist.exceptions import NonPrivateSelectionWarning

__all__ = ["warn_if_exact_model_selection"]


def warn_if_exact_model_selection(estimator: object) -> None:
    """Warn (``NonPrivateSelectionWarning``) when called under ``sklearn.model_selection``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("sklearn.model_selection"):
            warnings.warn(
                f"{type(estimator).__name__} is fitted inside scikit-learn's exact model selection: the "
                "choice among private fits made from exact scores is not private. Use "
                "dpdist.tuning.PrivateSearch (a private choice, charged once)",
                NonPrivateSelectionWarning,
                stacklevel=3,
            )
            return
        frame = frame.f_back
