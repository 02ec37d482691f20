"""Privacy core: mechanisms, composition, and the central accountant."""

from __future__ import annotations

from typing import Any

# the names below, imported when first used (PEP 562): ``import dpdist`` (dpdist.privacy.guard) and the
# command line's start-up import neither the accountant nor the mechanisms
_WHERE = {
    "Accountant": "accountant",
    "BudgetStatus": "accountant",
    "Release": "accountant",
    "default_ledger_path": "accountant",
    "Budget": "composition",
    "advanced_composition": "composition",
    "advanced_step_budget_split": "composition",
    "advanced_step_epsilon": "composition",
    "basic_composition": "composition",
    "rnm_paper_true_epsilon": "composition",
    "AnalyticGaussian": "mechanisms",
    "ExponentialMechanism": "mechanisms",
    "Gaussian": "mechanisms",
    "Laplace": "mechanisms",
    "ReportNoisyMax": "mechanisms",
    "ReportNoisyMin": "mechanisms",
    "analytic_gaussian_delta": "mechanisms",
    "gumbel_max": "mechanisms",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
