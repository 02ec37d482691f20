"""The Gaussian top-k: its exact output distribution, and an empirical DP audit on neighbouring scores."""

from __future__ import annotations

import numpy as np
import pytest
from dp_audit import chisquare_against, epsilon_lower_bound
from scipy import integrate, stats

from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import PrivacyLoss
from dpdist.selection.gaussian import GaussianTopK

ALPHA = 1e-3


def top_k_probabilities(scores: np.ndarray, sigma: float, k: int) -> dict[tuple[int, ...], float]:
    """P(the k largest noisy scores are S), by integrating over the k-th largest's value (k = 1 or
    d - 1 here: the largest, or everything but the smallest)."""
    d = scores.size
    out = {}
    for i in range(d):
        others = [j for j in range(d) if j != i]
        below = stats.norm.cdf if k == 1 else stats.norm.sf  # the rest below i (i largest) or above (i smallest)

        def density(x: float, i: int = i, others: list[int] = others, below=below) -> float:
            return float(stats.norm.pdf(x, scores[i], sigma) * np.prod([below(x, scores[j], sigma) for j in others]))

        out[(i,) if k == 1 else tuple(others)] = integrate.quad(density, -np.inf, np.inf)[0]
    return out


@pytest.mark.parametrize("k", [1, 2])
def test_the_selection_has_its_exact_distribution_and_a_halved_sigma_fails(k):
    scores = np.array([0.0, 0.8, 2.0])
    mech = GaussianTopK.for_budget(k, 2.0, 1e-6)
    probs = top_k_probabilities(scores, mech.sigma, k)
    outcomes = list(probs)
    rng = np.random.default_rng(3)
    for factor, ok in ((1.0, True), (0.5, False)):
        m = GaussianTopK(k, mech.rho / factor**2, 1e-6)  # sigma * factor
        draws = [tuple(m.select(scores, rng)) for _ in range(40_000)]
        counts = np.array([draws.count(o) for o in outcomes])
        p = chisquare_against(counts, np.array([probs[o] for o in outcomes]))
        assert (p > ALPHA) if ok else (p < ALPHA), (factor, p)


@pytest.mark.slow
def test_neighbouring_scores_stay_within_the_charge_and_a_twentieth_sigma_does_not():
    d, d2 = np.zeros(3), np.array([1.0, 0.0, 0.0])  # l2 distance 1: the sensitivity
    mech = GaussianTopK.for_budget(1, 1.0, 1e-6)
    charged = mech.privacy_loss.epsilon
    for factor, ok in ((1.0, True), (0.05, False)):
        m = GaussianTopK(1, mech.rho / factor**2, 1e-6)
        rng = np.random.default_rng(5)
        a = [int(m.select(d, rng)[0]) for _ in range(60_000)]
        b = [int(m.select(d2, rng)[0]) for _ in range(60_000)]
        bound = epsilon_lower_bound(a, b, 1e-4, range(3))
        assert (bound <= charged) if ok else (bound > charged), (factor, bound)


def test_calibration_and_bad_input():
    mech = GaussianTopK.for_budget(5, 1.0, 1e-6)
    assert PrivacyLoss.zcdp(mech.rho, 1e-6).epsilon == pytest.approx(1.0, rel=1e-6)
    assert mech.sigma == pytest.approx(1.0 / np.sqrt(2 * mech.rho))
    with pytest.raises(ParameterError, match="k=5"):
        mech.select(np.zeros(5), np.random.default_rng(0))
    with pytest.raises(ParameterError):
        GaussianTopK.for_budget(2, 1.0, 0.0)
    chosen = mech.select(np.arange(10.0), np.random.default_rng(0))
    assert chosen.size == 5 and np.all(np.diff(chosen) > 0)  # ascending indices
