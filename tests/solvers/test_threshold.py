"""The private balanced threshold: the exact law of its histogram release (a doubled epsilon fails), an
empirical DP audit on neighbouring datasets, and the choice it makes."""

from __future__ import annotations

import numpy as np
import pytest
from dp_audit import chisquare_against, epsilon_lower_bound
from scipy import stats

from dpdist.exceptions import ParameterError
from dpdist.solvers.threshold import BalancedThreshold

ALPHA = 1e-3


def test_every_cell_is_laplace_around_its_count_and_a_doubled_epsilon_fails():
    margins = np.array([-3.0, -0.2, 0.1, 0.1, 2.5, -1.0])
    y = np.array([-1, -1, 1, -1, 1, 1])
    mech = BalancedThreshold(0.7, bins=4)
    exact = mech.histograms(margins, y)
    assert exact.sum() == 6 and exact[1].sum() == 3
    edges = np.linspace(-6.0, 6.0, 25)
    probs = np.diff([0.0, *stats.laplace.cdf(edges, scale=1 / 0.7), 1.0])
    for eps, ok in ((0.7, True), (1.4, False)):
        rng = np.random.default_rng(1)
        draws = np.array([BalancedThreshold(eps, bins=4).noisy_histograms(margins, y, rng) for _ in range(8000)])
        for cell in [(0, 0), (1, 3), (1, 1)]:
            z = draws[:, cell[0], cell[1]] - exact[cell]
            p = chisquare_against(np.bincount(np.searchsorted(edges, z), minlength=edges.size + 1), probs)
            assert (p > ALPHA / 3) if ok else (p < ALPHA), (eps, cell, p)


@pytest.mark.slow
def test_neighbouring_datasets_stay_within_the_charge_and_a_tenfold_epsilon_does_not():
    """D2 adds one positive record with a low margin to D: one cell moves by 1. The release (the noisy
    histograms) is audited on that cell, binned (the threshold is post-processing of it)."""
    margins = np.array([-2.0, -2.0, 2.0, 2.0])
    y = np.array([-1, -1, 1, 1])
    m2, y2 = np.append(margins, -2.0), np.append(y, 1)
    charged = BalancedThreshold(1.0, bins=4).privacy_loss.epsilon
    for eps, ok in ((1.0, True), (10.0, False)):
        mech = BalancedThreshold(eps, bins=4)
        rng = np.random.default_rng(2)
        edges = np.linspace(-3.0, 4.0, 15)
        a = [int(np.searchsorted(edges, mech.noisy_histograms(margins, y, rng)[1, 0])) for _ in range(40_000)]
        b = [int(np.searchsorted(edges, mech.noisy_histograms(m2, y2, rng)[1, 0])) for _ in range(40_000)]
        bound = epsilon_lower_bound(a, b, 1e-4, range(edges.size + 1))
        assert (bound <= charged) if ok else (bound > charged), (eps, bound)


def test_the_choice_maximises_the_balanced_accuracy_of_the_counts():
    mech = BalancedThreshold(1.0, bins=8)
    rng = np.random.default_rng(3)
    neg = rng.normal(-2.5, 0.5, 2000)
    pos = rng.normal(-1.0, 0.5, 100)  # every positive below 0: margin 0 predicts one class
    margins, y = np.concatenate([neg, pos]), np.r_[-np.ones(2000), np.ones(100)]
    t = mech.choose(mech.histograms(margins, y))
    best = max((np.mean(pos > e) + np.mean(neg <= e), -abs(e), e) for e in mech.edges())[
        2
    ]  # exact balanced accuracy at every edge
    assert t == best and t < 0
    assert 0.5 * (np.mean(pos > t) + np.mean(neg <= t)) > 0.85
    with pytest.raises(ParameterError):
        BalancedThreshold(1.0, bins=1)
