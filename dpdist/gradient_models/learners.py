"""The gradient learners by method name (``LEARNERS``) and ``make_learner``, which builds one (or
the private search over the default grid) for a task."""

from __future__ import annotations

from typing import Any

from dpdist.exceptions import ParameterError
from dpdist.gradient_models.auto import AutoClassifier, AutoRegressor
from dpdist.gradient_models.iht import DPIHTClassifier, DPIHTRegressor
from dpdist.gradient_models.select_train import SelectTrainClassifier, SelectTrainRegressor
from dpdist.gradient_models.sgd import DPGDClassifier, DPGDRegressor, DPSGDClassifier, DPSGDRegressor
from dpdist.methods import GRADIENT_METHODS, SEARCH

__all__ = ["LEARNERS", "make_learner"]


# the learners by method name: (classifier, regressor)
LEARNERS: dict[str, tuple[type, type]] = {
    "auto": (AutoClassifier, AutoRegressor),
    "select-train": (SelectTrainClassifier, SelectTrainRegressor),
    "dp-sgd": (DPSGDClassifier, DPSGDRegressor),
    "dp-gd": (DPGDClassifier, DPGDRegressor),
    "dp-iht": (DPIHTClassifier, DPIHTRegressor),
}


def make_learner(task: str, method: str, **params: Any) -> Any:
    """The learner ``method`` (a ``GRADIENT_METHODS`` name, or ``SEARCH``: the private search over the
    default grid) for a task ("binary" or "regression") at its defaults and ``params``."""
    regression = task == "regression"
    if method == SEARCH:
        from dpdist.tuning import PrivateSearch, default_candidates

        return PrivateSearch(default_candidates(task), **params)
    if method not in LEARNERS:
        raise ParameterError(f"method must be one of {(*GRADIENT_METHODS, SEARCH)}, got {method!r}")
    if regression:
        params.pop("classes", None)
    return LEARNERS[method][1 if regression else 0](**params)
