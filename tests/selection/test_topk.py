"""The canonical Lipschitz top-k mechanism against brute-force enumeration of all k-subsets."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import special, stats

from dpdist.exceptions import ParameterError
from dpdist.selection.topk import CanonicalTopK

SCORES = np.array([3.0, 0.5, 2.2, 2.0, -1.0, 1.1, 0.9])  # d = 7
K = 3
DRAWS = 30_000


def loss(y: tuple[int, ...], x: np.ndarray, gamma: float) -> float:
    inside = x[list(y)]
    outside = np.delete(x, list(y))
    return (1 - gamma) * max(outside.max(), inside.min()) - gamma * inside.min()


def exact_distribution(x: np.ndarray, k: int, c: float, gamma: float) -> dict[tuple[int, ...], float]:
    sets = list(itertools.combinations(range(x.size), k))
    logw = np.array([-c * loss(s, x, gamma) for s in sets])
    return dict(zip(sets, special.softmax(logw)))


def sample(mech: CanonicalTopK, scores: np.ndarray, n: int) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(n):
        key = tuple(int(i) for i in mech.select(scores))
        counts[key] = counts.get(key, 0) + 1
    return counts


def chisquare_p(counts: dict, probs: dict) -> float:
    keys = list(probs)
    obs = np.array([counts.get(s, 0) for s in keys], dtype=float)
    exp = np.array([probs[s] for s in keys]) * obs.sum()
    assert sum(counts.values()) == obs.sum(), "the mechanism returned a set that is not a k-subset"
    big = exp >= 5
    obs2, exp2 = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
    keep = exp2 > 0
    return stats.chisquare(obs2[keep], exp2[keep] * obs2[keep].sum() / exp2[keep].sum()).pvalue


def class_log_sizes(d: int, k: int) -> dict[tuple[int, int], float]:
    """ln|C_{h,t}| for every class (h, t) of the mechanism, t 1-based (docs/algorithms.md §4.2)."""
    from scipy.special import gammaln

    def lnbinom(n: int, r: int) -> float:
        return float(gammaln(n + 1) - gammaln(r + 1) - gammaln(n - r + 1))

    sizes = {(k - 1, k): 0.0}
    for h in range(k):
        for t in range(k + 1, d + 1):
            sizes[(h, t)] = lnbinom(t - h - 2, k - h - 1)
    return sizes


def test_class_sizes_partition_all_subsets():
    for d, k in [(10, 3), (7, 1), (12, 5), (9, 8)]:
        sizes = class_log_sizes(d, k)
        assert len(sizes) == k * (d - k) + 1
        assert sum(math.exp(v) for v in sizes.values()) == pytest.approx(math.comb(d, k))
    # the seed's C(t-h-1, k-h-1) over-counts (spec 4.2 FLAG): d=10, k=3 sums to 162, not 120
    seed = sum(math.comb(t - h - 1, 3 - h - 1) for h in range(3) for t in range(4, 11)) + 1
    assert seed == 162


@pytest.mark.parametrize(
    ("epsilon", "gamma", "sens"), [(2.0, 0.5, 1.0), (6.0, 0.5, 0.5), (3.0, 0.2, 1.0), (4.0, 1.0, 1.0)]
)
def test_gumbel_matches_exact_exponential_mechanism(epsilon, gamma, sens):
    mech = CanonicalTopK(K, epsilon, sensitivity=sens, gamma=gamma, random_state=11)
    probs = exact_distribution(SCORES / sens, K, epsilon / 2, gamma)
    assert chisquare_p(sample(mech, SCORES, DRAWS), probs) > 1e-3


def test_mis_scaled_variant_fails():
    """The monotone calibration (c = epsilon) on these non-monotone scores is a different
    distribution from the correct one, and the same test rejects it."""
    wrong = CanonicalTopK(K, 3.0, monotone=True, random_state=12)
    probs = exact_distribution(SCORES, K, 3.0 / 2, 0.5)
    assert chisquare_p(sample(wrong, SCORES, DRAWS), probs) < 1e-6


def brute_force_exponential_noise(
    x: np.ndarray, k: int, c: float, gamma: float, n: int, rng: np.random.Generator
) -> dict:
    sets = list(itertools.combinations(range(x.size), k))
    util = np.array([-c * loss(s, x, gamma) for s in sets])
    winners = np.argmax(util + rng.exponential(size=(n, len(sets))), axis=1)
    counts: dict = {}
    for w in winners:
        counts[sets[w]] = counts.get(sets[w], 0) + 1
    return counts


def test_exponential_noise_matches_brute_force_report_noisy_max():
    mech = CanonicalTopK(K, 3.0, noise="exponential", random_state=13)
    ours = sample(mech, SCORES, DRAWS)
    ref = brute_force_exponential_noise(SCORES, K, 1.5, 0.5, DRAWS, np.random.default_rng(14))
    keys = sorted(set(ours) | set(ref))
    table = np.array([[ours.get(s, 0) for s in keys], [ref.get(s, 0) for s in keys]])
    table = table[:, table.sum(axis=0) >= 10]
    assert stats.chi2_contingency(table).pvalue > 1e-3


def test_ties_and_large_gaps():
    x = np.array([5.0, 5.0, 5.0, 0.0, 0.0, 0.0])
    mech = CanonicalTopK(3, 200.0, random_state=15)
    assert all(mech.select(x).tolist() == [0, 1, 2] for _ in range(20))
    # utilities spanning thousands of nats stay finite
    y = np.array([1e5, 0.0, -1e5, 3.0, 2.0])
    assert CanonicalTopK(2, 1.0, random_state=16).select(y).size == 2


def test_large_d_runs(capsys):
    rng = np.random.default_rng(17)
    q = rng.normal(size=200_000)
    q[:10] += 50
    out = CanonicalTopK(10, 10.0, random_state=18).select(q)
    assert out.size == 10 and len(set(out.tolist())) == 10
    assert len(set(out.tolist()) & set(range(10))) >= 8


def test_bad_parameters():
    with pytest.raises(ParameterError, match="k must be <"):
        CanonicalTopK(7, 1.0).select(SCORES)
    for kwargs in [
        {"k": 0, "epsilon": 1.0},
        {"k": 2, "epsilon": -1.0},
        {"k": 2, "epsilon": 1.0, "gamma": 1.5},
        {"k": 2, "epsilon": 1.0, "noise": "laplace"},
        {"k": 2, "epsilon": 1.0, "sensitivity": 0},
    ]:
        with pytest.raises(ParameterError):
            CanonicalTopK(**kwargs)
    with pytest.raises(ParameterError, match="finite"):
        CanonicalTopK(2, 1.0).select(np.array([1.0, np.nan, 0.0]))


def test_massive_ties_resolve_by_index():
    from dpdist.selection.topk import _items_at_ranks

    x = np.zeros(1_000_000)
    x[[7, 500, 999_999]] = [3.0, 2.0, 1.0]
    xs = np.sort(x)[::-1]
    ranks = np.array([0, 1, 2, 3, 4, 999_999])
    assert _items_at_ranks(x, xs, ranks).tolist() == [7, 500, 999_999, 0, 1, 999_998]


def _log_mass_reference(xs: np.ndarray, k: int, c: float, gamma: float) -> np.ndarray:
    d = xs.size
    out = []
    for h in range(k):
        t = np.arange(k + 1, d + 1)
        logw = (
            c * (gamma * xs[t - 1] - (1 - gamma) * xs[h])
            + special.gammaln(t - h - 1)
            - special.gammaln(k - h)
            - special.gammaln(t - k)
        )
        out.append(special.logsumexp(logw))
    return np.array(out)


@pytest.mark.parametrize("block", [1, 3, 16, 2048])
@pytest.mark.parametrize("steep", [0.1, 50.0, 5000.0])
def test_log_mass_kernel_matches_direct_sum(block, steep):
    """Both kernel paths (products within a block, log space for steep blocks) give the exact mass."""
    from dpdist.selection.topk import log_mass_per_h

    rng = np.random.default_rng(int(steep) + block)
    for d, k in [(40, 1), (300, 7), (1000, 30)]:
        xs = np.sort(np.abs(rng.standard_cauchy(d)) * steep)[::-1].copy()
        got = log_mass_per_h(xs, k, 0.7, 0.5, block=block)
        np.testing.assert_allclose(got, _log_mass_reference(xs, k, 0.7, 0.5), rtol=1e-10, atol=1e-9)
