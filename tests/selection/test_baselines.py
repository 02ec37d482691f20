"""Peeling, oneshot Laplace and joint top-k baselines against their exact output distributions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import special, stats

from dpdist.exceptions import ParameterError
from dpdist.selection.baselines import JointTopK, LaplaceTopK, PeelingTopK

SCORES = np.array([3.0, 0.5, 2.2, 2.0, -1.0, 1.1])
DRAWS = 20_000


def chisquare_p(obs: dict, probs: dict) -> float:
    keys = list(probs)
    o = np.array([obs.get(s, 0) for s in keys], float)
    assert o.sum() == sum(obs.values()), "an output outside the support"
    e = np.array([probs[s] for s in keys]) * o.sum()
    big = e >= 5
    o2, e2 = np.append(o[big], o[~big].sum()), np.append(e[big], e[~big].sum())
    keep = e2 > 0
    o2, e2 = o2[keep], e2[keep]
    return stats.chisquare(o2, e2 * o2.sum() / e2.sum()).pvalue


def peeling_sets(x: np.ndarray, k: int, eps_round: float) -> dict:
    """Exact distribution of the unordered output of k rounds of EM, each at eps_round (non-monotone)."""
    probs: dict = {}
    for seq in itertools.permutations(range(x.size), k):
        p, left = 1.0, list(range(x.size))
        for item in seq:
            w = special.softmax(eps_round * x[left] / 2.0)
            p *= w[left.index(item)]
            left.remove(item)
        key = tuple(sorted(seq))
        probs[key] = probs.get(key, 0.0) + p
    return probs


def joint_sequences(x: np.ndarray, k: int, c: float) -> dict:
    top = np.sort(x)[::-1][:k]
    seqs = list(itertools.permutations(range(x.size), k))
    logw = np.array([-c * max(top[i] - x[s[i]] for i in range(k)) for s in seqs])
    return dict(zip(seqs, special.softmax(logw)))


def sample_counts(draw) -> dict:
    counts: dict = {}
    for _ in range(DRAWS):
        key = tuple(int(i) for i in draw())
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_peeling_is_k_rounds_of_em():
    eps, k = 2.0, 2
    mech = PeelingTopK(k, eps, random_state=1)
    counts = sample_counts(lambda: mech.select(SCORES))
    assert chisquare_p(counts, peeling_sets(SCORES, k, eps / k)) > 1e-3
    # twice the budget per round is a different distribution
    assert chisquare_p(counts, peeling_sets(SCORES, k, 2 * eps / k)) < 1e-6


@pytest.mark.parametrize("ties", [False, True])
def test_joint_em_matches_enumeration(ties):
    x = np.array([3.0, 2.0, 2.0, 1.5, 0.0]) if ties else SCORES[:5]
    eps, k = 3.0, 3
    mech = JointTopK(k, eps, random_state=2)
    counts = sample_counts(lambda: mech.select_sequence(x))
    assert chisquare_p(counts, joint_sequences(x, k, eps / 4.0)) > 1e-3
    # the monotone calibration (eps/2) is a different distribution on these scores
    assert chisquare_p(counts, joint_sequences(x, k, eps / 2.0)) < 1e-6


def test_large_epsilon_recovers_top_k_and_validation():
    rng = np.random.default_rng(0)
    x = rng.normal(size=300)
    x[[5, 77, 140]] += 1e6
    for mech in (
        PeelingTopK(3, 10.0, random_state=0),
        LaplaceTopK(3, 10.0, 1e-6, random_state=0),
        JointTopK(3, 10.0, random_state=0),
    ):
        assert mech.select(x).tolist() == [5, 77, 140]
    with pytest.raises(ParameterError, match="k must be < the number of scores"):
        PeelingTopK(5, 1.0).select(np.ones(5))
    with pytest.raises(ParameterError, match="delta"):
        LaplaceTopK(2, 1.0, 0.0)
    with pytest.raises(ParameterError, match="epsilon"):
        JointTopK(2, -1.0)
