"""Both samplers against the exact exponential mechanism over all C(p, s) supports (chi-square).

The lists and bucket values come from the real MIP path; the exact probabilities from
brute-force enumeration. Mis-scaled variants (wrong rate; the seed code's bucket-best member)
must be rejected.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from bss_helpers import small_problem
from scipy import stats
from scipy.special import logsumexp

from dpdist.selection.best_subset.brute_force import enumerate_values
from dpdist.selection.best_subset.executor import LocalExecutor
from dpdist.selection.best_subset.mistakes import center_and_gap, mistakes_buckets
from dpdist.selection.best_subset.samplers import mistakes_sample, top_r_sample
from dpdist.selection.best_subset.top_r import top_r_list

P_FEATURES, S_SIZE, DRAWS, TOL = 8, 2, 40_000, 1e-3


def chisquare_p(draws, supports, probs) -> float:
    index = {tuple(int(j) for j in S): k for k, S in enumerate(supports)}
    counts = np.bincount([index[S] for S in draws], minlength=len(supports))
    expected = probs * len(draws)
    keep = expected >= 5
    obs = np.r_[counts[keep], counts[~keep].sum()]
    exp = np.r_[expected[keep], expected[~keep].sum()]
    if exp[-1] < 5:
        obs, exp = obs[:-1], exp[:-1]
    return stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


@pytest.fixture(scope="module", params=["squared", "hinge"])
def instance(request):
    P = small_problem(request.param, 4, p=P_FEATURES, s=S_SIZE, n=60)
    supports, values = enumerate_values(P)
    return P, supports, values


def rate_for(values: np.ndarray, spread: float) -> float:
    """A rate c that spreads the mass: c (F_(R) - F_min) = spread."""
    R = 1 + S_SIZE * (P_FEATURES - S_SIZE)
    return spread / (np.sort(values)[R - 1] - values.min())


def test_top_r_sampler_is_the_exact_em(instance):
    P, supports, values = instance
    lst = top_r_list(LocalExecutor(P), TOL * P.delta)
    idx, listed_values = lst.listed()
    c = rate_for(values, 4.0)
    R = lst.R
    t = np.sort(values)[R - 1]
    exact = -c * np.minimum(values, t)
    exact = np.exp(exact - logsumexp(exact))

    def draw(scale):
        return top_r_sample(
            listed_values,
            P.p,
            P.s,
            scale,
            np.random.default_rng(7),
            lambda k: lst.support(int(idx[k])),
            lst.is_listed,
            size=DRAWS,
        )

    assert chisquare_p(draw(c), supports, exact) > 1e-3
    assert chisquare_p(draw(1.5 * c), supports, exact) < 1e-6  # mis-scaled


def test_mistakes_sampler_is_the_exact_em_with_uniform_members(instance):
    P, supports, values = instance
    ex = LocalExecutor(P)
    tau = TOL * P.delta
    center, f0, f1, _, best_one = center_and_gap(ex, tau)
    c = rate_for(values, 3.0)
    buckets = mistakes_buckets(ex, center, f0, f1, tau, c, horizon=50.0, time_limit=None, best_one=best_one)
    mist = np.array([len(set(map(int, S)) - set(center)) for S in supports])
    u = np.array([values[mist == j].min() for j in range(S_SIZE + 1)])
    np.testing.assert_allclose(buckets.values, u, atol=tau)
    logp = -c * u[mist]
    exact = np.exp(logp - logsumexp(logp))
    rng = np.random.default_rng(11)
    draws = mistakes_sample(center, buckets.values, P.p, c, rng, size=DRAWS)
    assert chisquare_p(draws, supports, exact) > 1e-3
    rng = np.random.default_rng(12)
    wrong_rate = mistakes_sample(center, buckets.values, P.p, 1.5 * c, rng, size=DRAWS)
    assert chisquare_p(wrong_rate, supports, exact) < 1e-6
    rng = np.random.default_rng(13)
    best = mistakes_sample(center, buckets.values, P.p, c, rng, member="best", bucket_best=buckets.best, size=DRAWS)
    assert chisquare_p(best, supports, exact) < 1e-6  # the seed code's bucket-best member is another distribution
    one = mistakes_sample(center, buckets.values, P.p, c, np.random.default_rng(14))
    assert isinstance(one, tuple) and len(one) == S_SIZE


def test_log_space_handles_huge_candidate_sets():
    """p = 47,236, s = 10: C(p, s) ~ 1e39; the outside category's log-weight is exact and finite."""
    from dpdist.selection.best_subset.samplers import log_comb, top_r_log_weights

    p, s = 47_236, 10
    values = np.array([1e5, 1e5 + 3.0, 1e5 + 50.0])
    logw = top_r_log_weights(values, p, s, 1.0)
    assert logw[-1] == pytest.approx(log_comb(p, s) - 50.0, rel=1e-12)
    assert math.isfinite(logw[-1]) and logw[0] == 0.0
