"""The empirical DP audit the privacy tests share: Clopper-Pearson lower bounds on epsilon.

From draws of a mechanism on neighbouring datasets D and D', every outcome o gives a lower
confidence bound on |ln P(o | D) / P(o | D')|: the lower Clopper-Pearson end of one probability
over the upper end of the other. With Bonferroni over the outcomes and both directions, the
largest of them is a (1 - family_alpha)-confidence lower bound on the mechanism's epsilon, which
must stay under the charged one (and a mis-calibrated variant must exceed it).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np
from scipy import stats


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The two-sided (1 - alpha) Clopper-Pearson interval of a binomial proportion k / n."""
    lo = 0.0 if k == 0 else stats.beta.ppf(alpha / 2, k, n - k + 1)
    hi = 1.0 if k == n else stats.beta.ppf(1 - alpha / 2, k + 1, n - k)
    return float(lo), float(hi)


def chisquare_against(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """p-value of the counts against the probabilities; cells expected < min_expected are pooled."""
    expected = probs * counts.sum()
    big = expected >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    return float(stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue)


def epsilon_lower_bound(
    draws_d: Sequence[Hashable],
    draws_d2: Sequence[Hashable],
    family_alpha: float,
    outcomes: Sequence[Hashable] | None = None,
) -> float:
    """A (1 - family_alpha)-confidence lower bound on max_o |ln P(o|D) / P(o|D')|.

    ``outcomes``: the outcome space (default: every outcome seen); draws are compared by equality.
    """
    space = list(outcomes) if outcomes is not None else sorted(set(draws_d) | set(draws_d2), key=repr)
    index = {o: i for i, o in enumerate(space)}
    c1 = np.bincount([index[o] for o in draws_d], minlength=len(space))
    c2 = np.bincount([index[o] for o in draws_d2], minlength=len(space))
    alpha = family_alpha / (2 * len(space))
    worst = 0.0
    for o in range(len(space)):
        lo1, hi1 = clopper_pearson(int(c1[o]), len(draws_d), alpha)
        lo2, hi2 = clopper_pearson(int(c2[o]), len(draws_d2), alpha)
        if lo1 > 0 and hi2 > 0:
            worst = max(worst, math.log(lo1 / hi2))
        if lo2 > 0 and hi1 > 0:
            worst = max(worst, math.log(lo2 / hi1))
    return worst
