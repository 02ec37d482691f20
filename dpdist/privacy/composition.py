"""Composition of differentially private steps (docs/algorithms.md §1.4).

Both directions are provided:

* forward: what a sequence of steps costs in total --
  ``basic_composition`` and ``advanced_composition`` (the exact form
  eps0 sqrt(2k ln(1/delta')) + k eps0 (e^eps0 - 1), k delta0 + delta');
* inverse: the per-step budget that meets a target, with the papers' formulas --
  ``advanced_step_epsilon`` ([RKL23] and Talwar et al.: eps0 = eps / sqrt(8 k ln(1/delta)))
  and ``advanced_step_budget_split`` ([KLR25] Alg. 1 / [KLR23] Alg. 1:
  delta_it = delta / (l + 1), eps_it = eps / (2 sqrt(2 l ln(1/delta_it)))).

The papers' shortcuts are simplifications of the exact bound that hold only for moderate
epsilon (Dwork & Roth state them for eps < 1). Each inverse therefore computes the exact
forward bound of the budget it returns and refuses (``ParameterError``) when that bound
exceeds the target: a shortcut is never used unchecked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from dpdist.exceptions import ParameterError
from dpdist.utils.validation import check_count, check_delta, check_epsilon

__all__ = [
    "Budget",
    "advanced_composition",
    "advanced_step_budget_split",
    "advanced_step_epsilon",
    "basic_composition",
    "rnm_paper_true_epsilon",
]

# Relative slack allowed when comparing an exact bound with its target: the two are
# computed along different float paths, and the exact bound of a valid shortcut can
# round a few ulps above the target.
_ROUNDING = 1e-12


@dataclass(frozen=True)
class Budget:
    """An (epsilon, delta) pair."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        # allow epsilon == 0 only for an empty composition
        if self.epsilon != 0.0:
            check_epsilon(self.epsilon)
        check_delta(self.delta)


def basic_composition(budgets: Iterable[Budget | tuple[float, float]]) -> Budget:
    """(sum of epsilons, sum of deltas): sequential composition of any DP steps."""
    eps, dlt = [], []
    for b in budgets:
        b = b if isinstance(b, Budget) else Budget(*b)
        eps.append(b.epsilon)
        dlt.append(b.delta)
    total_delta = math.fsum(dlt)
    if total_delta >= 1.0:
        raise ParameterError(f"basic composition of these steps has delta {total_delta} >= 1")
    return Budget(math.fsum(eps), total_delta)


def advanced_composition(epsilon_step: float, k: int, delta_slack: float, delta_step: float = 0.0) -> Budget:
    """The exact advanced-composition bound of ``k`` adaptive (epsilon_step, delta_step)-DP steps.

    Returns (eps0 sqrt(2 k ln(1/delta')) + k eps0 (e^eps0 - 1), k delta0 + delta').
    """
    eps0 = check_epsilon(epsilon_step, "epsilon_step")
    k = check_count(k, "k")
    slack = check_delta(delta_slack, "delta_slack", allow_zero=False)
    d0 = check_delta(delta_step, "delta_step")
    growth = math.expm1(eps0) if eps0 < 700.0 else math.inf  # e^eps0 - 1 overflows past ~709
    epsilon = eps0 * math.sqrt(2.0 * k * math.log(1.0 / slack)) + k * eps0 * growth
    if not math.isfinite(epsilon):
        raise ParameterError(
            f"the exact advanced-composition bound of {k} steps of epsilon_step={eps0:.6g} "
            "overflows a double: it guarantees nothing. Lower epsilon."
        )
    delta = k * d0 + slack
    if delta >= 1.0:
        raise ParameterError(f"advanced composition of {k} steps has delta {delta} >= 1")
    return Budget(epsilon, delta)


def _check_within(total: Budget, epsilon: float, what: str) -> None:
    if total.epsilon > epsilon * (1.0 + _ROUNDING):
        raise ParameterError(
            f"{what}: the exact advanced-composition bound is epsilon={total.epsilon:.6g}, above the "
            f"target epsilon={epsilon:.6g}; the papers' shortcut is not valid here "
            "(roughly epsilon > 4 ln(1/delta)). Lower epsilon or raise delta."
        )


def advanced_step_epsilon(epsilon: float, delta: float, k: int) -> float:
    """Per-step epsilon for ``k`` pure-DP steps to total (epsilon, delta): eps / sqrt(8 k ln(1/delta)).

    This is the rule of Talwar et al. and [RKL23] (App. B.2). The exact bound of ``k``
    such steps is computed and checked to be <= epsilon before the value is returned.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    k = check_count(k, "k")
    eps0 = epsilon / math.sqrt(8.0 * k * math.log(1.0 / delta))
    _check_within(advanced_composition(eps0, k, delta), epsilon, "advanced_step_epsilon")
    return eps0


def advanced_step_budget_split(epsilon: float, delta: float, k: int) -> Budget:
    """Per-step (eps_it, delta_it) for ``k`` (eps_it, delta_it)-DP steps to total (epsilon, delta).

    [KLR25] Alg. 1 (and the intended [KLR23] Alg. 1 line 3, docs/algorithms.md §9.1):
    delta_it = delta / (k + 1), eps_it = epsilon / (2 sqrt(2 k ln(1/delta_it))).
    The k steps use k * delta_it and the composition slack delta' = delta_it, so the
    deltas add to exactly delta. The exact epsilon bound is checked to be <= epsilon.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta, allow_zero=False)
    k = check_count(k, "k")
    delta_it = delta / (k + 1)
    eps_it = epsilon / (2.0 * math.sqrt(2.0 * k * math.log(1.0 / delta_it)))
    total = advanced_composition(eps_it, k, delta_it, delta_step=delta_it)
    _check_within(total, epsilon, "advanced_step_budget_split")
    return Budget(eps_it, delta_it)


def rnm_paper_true_epsilon(epsilon: float, delta: float, k: int) -> Budget:
    """The true total of the papers' DP-FW calibration ("paper" mode, docs/algorithms.md §2.2 and 9.4).

    Laplace report-noisy-max with scale Delta/eps0 on non-monotone scores is 2 eps0-DP per
    step, where eps0 = advanced_step_epsilon(epsilon, delta, k). Returns the exact
    advanced-composition total of ``k`` such steps (about epsilon + epsilon^2 / (2 ln(1/delta))).
    """
    eps0 = advanced_step_epsilon(epsilon, delta, k)
    return advanced_composition(2.0 * eps0, k, delta)
