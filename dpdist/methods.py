"""The names of dpdist's learners, light to import (the CLI's parser, the run config's checks).

The estimators they name live in :mod:`dpdist.gradient_models` (``LEARNERS``), :mod:`dpdist.tuning`
and :mod:`dpdist.linear_model`.
"""

__all__ = ["DEFAULT_LEARNER", "GRADIENT_METHODS", "SEARCH"]

# the gradient learners (dpdist.gradient_models); the first is the default learner of `dpdist train` and of
# the main job: the best measured at epsilon = 1 (benchmarks/utility.py)
GRADIENT_METHODS = ("select-train", "dp-sgd", "dp-gd", "dp-iht")
DEFAULT_LEARNER = GRADIENT_METHODS[0]
SEARCH = "private-search"  # the private choice among the default grid (dpdist.tuning)
