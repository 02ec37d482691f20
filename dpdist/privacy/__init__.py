"""Privacy core: mechanisms, composition, and the central accountant."""

from dpdist.privacy.accountant import Accountant, BudgetStatus, Release, default_ledger_path
from dpdist.privacy.composition import (
    Budget,
    advanced_composition,
    advanced_step_budget_split,
    advanced_step_epsilon,
    basic_composition,
    rnm_paper_true_epsilon,
)
from dpdist.privacy.mechanisms import (
    AnalyticGaussian,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    ReportNoisyMax,
    ReportNoisyMin,
    analytic_gaussian_delta,
    gumbel_max,
)

__all__ = [
    "Accountant",
    "AnalyticGaussian",
    "Budget",
    "BudgetStatus",
    "ExponentialMechanism",
    "Gaussian",
    "Laplace",
    "Release",
    "ReportNoisyMax",
    "ReportNoisyMin",
    "advanced_composition",
    "advanced_step_budget_split",
    "advanced_step_epsilon",
    "analytic_gaussian_delta",
    "basic_composition",
    "default_ledger_path",
    "gumbel_max",
    "rnm_paper_true_epsilon",
]
