"""The Big-Step Little-Step sampler draws exactly from the exponential-mechanism distribution."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from dpdist.solvers.samplers import _FLUSH, BSLSSampler, _exp_weights

DRAWS = 60_000


def chisquare_p(draws: np.ndarray, logw: np.ndarray) -> float:
    p = special.softmax(logw)
    obs = np.bincount(draws, minlength=p.size).astype(float)
    exp = p * draws.size
    assert obs[exp == 0].sum() == 0
    big = exp >= 5
    o = np.append(obs[big], obs[~big].sum())
    e = np.append(exp[big], exp[~big].sum())
    keep = e > 0
    return stats.chisquare(o[keep], e[keep] * o[keep].sum() / e[keep].sum()).pvalue


def spread_weights(rng: np.random.Generator, D: int) -> np.ndarray:
    """Log-weights spanning hundreds of orders of magnitude, a few items within reach of the top."""
    v = rng.uniform(-900.0, 0.0, size=D)
    m = min(12, D // 2)
    v[rng.choice(D, m, replace=False)] = rng.uniform(-4.0, 0.0, size=m)
    return v + 350.0  # absolute level irrelevant, and far from 0


@pytest.mark.parametrize("D", [7, 50, 333])
def test_draws_follow_the_weights(D):
    rng = np.random.default_rng(D)
    v = spread_weights(rng, D)
    s = BSLSSampler(v, random_state=1)
    draws = np.array([s.draw() for _ in range(DRAWS)])
    assert chisquare_p(draws, v) > 1e-3
    # a deliberately wrong target (weights squared) is rejected
    assert chisquare_p(draws, 2 * v) < 1e-6


def test_draws_stay_exact_under_updates():
    rng = np.random.default_rng(5)
    D = 120
    v = spread_weights(rng, D)
    s = BSLSSampler(v, random_state=2)
    for round_ in range(3):
        for j in rng.choice(D, 40, replace=False):
            new = rng.uniform(-5.0, 0.0) + 350.0 if rng.random() < 0.3 else rng.uniform(-800, -100)
            v[j] = new
            s.update(j, new)
        # the dominant item is demoted: block sums must be recomputed, not cancelled away
        top = int(np.argmax(v))
        v[top] -= 600.0
        s.update(top, v[top])
        expected = [special.logsumexp(v[b : b + s.B]) for b in range(0, D, s.B)]
        np.testing.assert_allclose(s.block_log_sums, expected, rtol=1e-12)
        draws = np.array([s.draw() for _ in range(DRAWS // 2)])
        assert chisquare_p(draws, v) > 1e-3, round_


def test_bruteforce_reference_agrees():
    rng = np.random.default_rng(9)
    v = spread_weights(rng, 40)
    s = BSLSSampler(v, random_state=3)
    draws = np.array([s.draw_bruteforce() for _ in range(DRAWS)])
    assert chisquare_p(draws, v) > 1e-3


def test_vectorised_exp_is_within_an_ulp_of_libm():
    x = np.concatenate([np.linspace(_FLUSH, 600.0, 200_001), np.random.default_rng(0).uniform(-3, 3, 10_000)])
    out, bits = np.empty_like(x), np.empty(x.size, dtype=np.int64)
    _exp_weights(x, x.size, 0.0, out, bits)
    rel = np.abs(out / np.exp(x) - 1.0)
    assert rel.max() <= 2 * np.finfo(float).eps
    # the cosh form e + cref / e, and the flush to 0 below e^_FLUSH
    x2 = np.array([-2.0, 0.0, 1.5, _FLUSH - 1e-9, -1e4, -np.inf])
    out2 = np.empty_like(x2)
    _exp_weights(x2, x2.size, 0.25, out2, np.empty(x2.size, dtype=np.int64))
    np.testing.assert_allclose(out2[:3], np.exp(x2[:3]) + 0.25 * np.exp(-x2[:3]), rtol=4e-16)
    assert (out2[3:] == 0).all()


def test_rebuilds_keep_the_distribution_across_any_shift():
    """A weight rising far past the shared exponent, and the top weight falling far below it."""
    rng = np.random.default_rng(11)
    v = rng.uniform(-5.0, 0.0, 60)
    s = BSLSSampler(v, random_state=4)
    v[7] = 2000.0  # e^2000 above the rest: rebuild upwards; everything else is now ~0
    s.update(7, v[7])
    assert s.st[0] == 2000.0
    assert all(s.draw() == 7 for _ in range(200))
    v[7] = -3000.0  # and back far below: the total collapses, rebuild downwards from the log-weights
    s.update(7, v[7])
    draws = np.array([s.draw() for _ in range(DRAWS // 2)])
    assert s.st[0] == v.max()
    assert chisquare_p(draws, v) > 1e-3
