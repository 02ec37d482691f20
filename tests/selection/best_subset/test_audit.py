"""Empirical DP audit of the top-R release on neighbouring data sets (ADD/REMOVE).

D and D' = D + one record (a pair found by search to make the privacy loss large). Both go
through the whole release path (IHT, local search, SCIP certificate, sampler). From many
draws on each, Clopper-Pearson bounds (Bonferroni over outcomes and directions) give a
lower confidence bound on max_S |ln P_D(S)/P_D'(S)|, which must stay under the charged
epsilon; the exact output distributions are also checked. A variant sampling at four times
the rate must be caught.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_audit import epsilon_lower_bound
from scipy.special import logsumexp

from dpdist.selection.best_subset.brute_force import all_supports
from dpdist.selection.best_subset.executor import LocalExecutor
from dpdist.selection.best_subset.objective import make_problem
from dpdist.selection.best_subset.samplers import top_r_log_weights, top_r_sample
from dpdist.selection.best_subset.top_r import top_r_list

EPSILON, TOL, DRAWS, FAMILY_ALPHA = 1.0, 1e-3, 150_000, 1e-4
X_D = np.array(
    [
        [0.0, -0.5, 0.5, -0.5, -0.5, 0.0],
        [0.5, -0.5, 0.0, 0.5, -0.5, -0.5],
        [0.5, -0.5, 0.0, 0.5, 0.5, -0.5],
        [0.5, -0.5, 0.0, 0.5, 0.5, 0.5],
    ]
)
Y_D = np.array([1.0, -1.0, -1.0, 1.0])
RECORD = (np.array([0.0, 0.0, 0.5, 0.5, 0.5, -0.5]), 1.0)
PARAMS = dict(s=2, loss="squared", r=1.0, ridge=0.01, x_bound=0.5, y_bound=1.0)


def released(X, y):
    """The release's list and rate, as BSSTopRSelector computes them."""
    P = make_problem(X, y, **PARAMS)
    lst = top_r_list(
        LocalExecutor(P),
        TOL * P.delta,
    )
    return P, lst, EPSILON / (P.delta * (1 + 4 * TOL))


def exact_log_probs(P, lst, scale):
    supports = [tuple(int(j) for j in S) for S in all_supports(P.p, P.s)]
    idx, values = lst.listed()
    logw = top_r_log_weights(values, P.p, P.s, scale)
    logw -= logsumexp(logw)
    listed = {lst.support(int(k)): logw[i] for i, k in enumerate(idx)}
    rest = math.comb(P.p, P.s) - len(listed)
    return supports, np.array([listed.get(S, logw[-1] - math.log(rest)) for S in supports])


def loss_lower_bound(draws1, draws2, supports):
    return epsilon_lower_bound(draws1, draws2, FAMILY_ALPHA, supports)


@pytest.fixture(scope="module")
def neighbours():
    x, y = RECORD
    return released(X_D, Y_D), released(np.vstack([X_D, x]), np.r_[Y_D, y])


def draws(P, lst, scale, seed):
    idx, values = lst.listed()
    return top_r_sample(
        values,
        P.p,
        P.s,
        scale,
        np.random.default_rng(seed),
        lambda k: lst.support(int(idx[k])),
        lst.is_listed,
        size=DRAWS,
    )


def test_exact_privacy_loss_is_within_epsilon(neighbours):
    (P1, l1, c1), (P2, l2, c2) = neighbours
    sup, a = exact_log_probs(P1, l1, c1)
    _, b = exact_log_probs(P2, l2, c2)
    loss = np.max(np.abs(a - b))
    assert loss <= EPSILON + 1e-9
    assert loss > 0.4 * EPSILON  # a pair that actually tests the bound


@pytest.mark.slow
def test_empirical_audit_lower_bound_stays_under_epsilon(neighbours):
    (P1, l1, c1), (P2, l2, c2) = neighbours
    supports = [tuple(int(j) for j in S) for S in all_supports(P1.p, P1.s)]
    assert loss_lower_bound(draws(P1, l1, c1, 1), draws(P2, l2, c2, 2), supports) <= EPSILON
    # broken on purpose: four times the rate (a Delta/4 sensitivity) is caught
    assert loss_lower_bound(draws(P1, l1, 4 * c1, 3), draws(P2, l2, 4 * c2, 4), supports) > EPSILON
