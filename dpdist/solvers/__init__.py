"""Private model fitting: objective perturbation (two-stage stage 2); Frank-Wolfe arrives with issue 4."""

from dpdist.solvers.objective_perturbation import ObjectivePerturbation

__all__ = ["ObjectivePerturbation"]
