"""Private model fitting: the solvers behind the estimators.

Objective perturbation (the two-stage method's stage 2, re-exported here), the standard and the
fast (DP) Frank-Wolfe over the L1 ball (:mod:`dpdist.solvers.frank_wolfe`,
:mod:`dpdist.solvers.fast_fw`) with its samplers and screening rules, DP-SGD and DP-IHT. The
Frank-Wolfe modules are imported on use: they compile numba kernels.
"""

from dpdist.solvers.objective_perturbation import ObjectivePerturbation

__all__ = ["ObjectivePerturbation"]
