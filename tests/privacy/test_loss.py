"""Tight composition (dpdist.privacy.loss) against dp-accounting and known exact values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import ORDERS, PrivacyLoss, calibrate, compose_epsilon
from dpdist.privacy.mechanisms import analytic_gaussian_delta


def exact_gaussian_epsilon(noise_multiplier: float, k: int, delta: float) -> float:
    """The exact epsilon of k composed Gaussians (one Gaussian of multiplier z / sqrt(k)), by bisection
    on Balle & Wang's exact delta(eps)."""
    z = noise_multiplier / math.sqrt(k)
    lo, hi = 0.0, 1000.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if analytic_gaussian_delta(mid, z, 1.0) > delta else (lo, mid)
    return hi


def pld_epsilon(mechanism: str, parameter: float, k: int, delta: float, pessimistic: bool = True) -> float:
    """dp-accounting's privacy-loss-distribution epsilon of k Gaussian/Laplace mechanisms (add/remove);
    ``pessimistic=False`` rounds the other way, a lower bound on the true epsilon."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    make = pld.from_gaussian_mechanism if mechanism == "gaussian" else pld.from_laplace_mechanism
    kw = {"standard_deviation": parameter} if mechanism == "gaussian" else {"parameter": parameter}
    dist = make(**kw, pessimistic_estimate=pessimistic, value_discretization_interval=1e-4)
    return dist.self_compose(k).get_epsilon_for_delta(delta)


@pytest.mark.parametrize(("z", "k", "delta"), [(1.0, 1, 1e-5), (2.0, 10, 1e-6), (8.0, 100, 1e-6), (30.0, 4000, 1e-7)])
def test_gaussian_sequences_agree_with_rdp_accountant_and_stay_above_the_exact_value(z, k, delta):
    ours = compose_epsilon([PrivacyLoss.gaussian(z, delta)] * k, delta)
    rdp = RdpAccountant()
    rdp.compose(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), k))
    theirs = rdp.get_epsilon(delta)
    assert ours <= theirs * (1 + 1e-9)  # our grid holds dp-accounting's default orders
    assert ours >= theirs * 0.97  # and differs only by the grid's discretisation
    exact = exact_gaussian_epsilon(z, k, delta)  # composed Gaussians are a Gaussian: the exact answer
    assert ours >= exact * (1 - 1e-9), (ours, exact)
    assert ours >= pld_epsilon("gaussian", z, k, delta, pessimistic=False)  # nor below the PLD lower bound


@pytest.mark.parametrize(("eps", "k", "delta"), [(0.5, 1, 1e-6), (0.1, 100, 1e-6), (1.0, 20, 1e-5), (0.01, 5000, 1e-6)])
def test_laplace_sequences_agree_with_rdp_accountant_and_stay_above_pld(eps, k, delta):
    losses = [PrivacyLoss.laplace(eps)] * k
    ours = compose_epsilon(losses, delta)
    rdp = RdpAccountant()
    rdp.compose(dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(1.0 / eps), k))
    theirs = min(rdp.get_epsilon(delta), k * eps)
    assert ours <= theirs * (1 + 1e-9) and ours >= theirs * 0.97
    assert ours >= pld_epsilon("laplace", 1.0 / eps, k, delta, pessimistic=False)  # a lower bound
    assert ours <= k * eps  # never worse than basic composition


def test_bounded_range_sequence_is_charged_t_eps0_squared_over_8():
    eps0, T = 0.007, 4000
    loss = PrivacyLoss.bounded_range(eps0, T, delta=1e-6)
    assert loss.rho == pytest.approx(T * eps0**2 / 8) and loss.form == "zcdp"
    # the conversion: CKS/Balle et al., below the simple rho + 2 sqrt(rho ln(1/delta))
    rho = T * eps0**2 / 8
    assert loss.epsilon < rho + 2 * math.sqrt(rho * math.log(1e6))
    assert loss.epsilon == pytest.approx(compose_epsilon([PrivacyLoss.zcdp(rho, 1e-6)], 1e-6))
    # a single exponential mechanism is its pure epsilon
    assert PrivacyLoss.bounded_range(0.3).epsilon == 0.3 and PrivacyLoss.bounded_range(0.3).delta == 0.0


def test_dp_fw_calibration_gives_about_four_times_seed_004s_eps0():
    T, delta = 4000, 1e-6
    eps0 = calibrate(lambda e: PrivacyLoss.bounded_range(e, T, delta=delta), 1.0, delta, 1.0)
    seed = 1.0 / math.sqrt(8 * T * math.log(1 / delta))
    assert 4.0 < eps0 / seed < 5.0
    assert compose_epsilon([PrivacyLoss.bounded_range(eps0, T, delta=delta)], delta) <= 1.0
    assert compose_epsilon([PrivacyLoss.bounded_range(eps0 * 1.001, T, delta=delta)], delta) > 1.0


def test_mixed_sequences_add_the_approximate_parts_and_convert_the_rest_with_the_remaining_delta():
    delta = 1e-6
    approx = PrivacyLoss.approx(0.3, 4e-7)
    z = PrivacyLoss.zcdp(0.05, delta)
    lap = PrivacyLoss.laplace(0.2)
    rdp = RdpAccountant(orders=ORDERS)
    rdp.compose(dp_event.ComposedDpEvent([dp_event.ZCDpEvent(0.05), dp_event.LaplaceDpEvent(5.0)]))
    expected_tight = 0.3 + rdp.get_epsilon(delta - 4e-7)
    basic = 0.3 + z.epsilon + 0.2  # basic needs 4e-7 + 1e-6 > delta: impossible at delta, so tight wins
    assert compose_epsilon([approx, z, lap], delta) == pytest.approx(expected_tight)
    assert compose_epsilon([approx, z, lap], 2e-6) <= basic
    # more approximate delta than the total: impossible
    assert compose_epsilon([PrivacyLoss.approx(0.1, 2e-6)], delta) == math.inf
    # pure releases alone at delta = 0: basic composition
    assert compose_epsilon([PrivacyLoss.pure(0.2)] * 5, 0.0) == pytest.approx(1.0)


def test_repeat_and_select_matches_dp_accounting():
    inner = PrivacyLoss.gaussian(3.0, 1e-6)
    loss = PrivacyLoss.repeat_and_select(inner, mean=10, shape=1, delta=1e-6)
    rdp = RdpAccountant(orders=ORDERS)
    rdp.compose(dp_event.RepeatAndSelectDpEvent(dp_event.ComposedDpEvent([dp_event.ZCDpEvent(1 / 18)]), 10, 1))
    assert loss.epsilon == pytest.approx(rdp.get_epsilon(1e-6))
    assert loss.epsilon > inner.epsilon


def test_round_trip_and_bad_parts():
    loss = PrivacyLoss.compose(
        PrivacyLoss.laplace(0.1, 3),
        PrivacyLoss.approx(0.2, 1e-7),
        PrivacyLoss.repeat_and_select(PrivacyLoss.zcdp(0.01, 1e-6), 5, 0, 1e-6),
    )
    assert PrivacyLoss.from_json(loss.to_json()) == loss
    assert loss.form == "mixed"
    with pytest.raises(ParameterError):
        PrivacyLoss((("zcdp", -1.0),), 1.0)
    with pytest.raises(ParameterError):
        PrivacyLoss((("gumbel", 1.0),), 1.0)
    with pytest.raises(ParameterError):
        PrivacyLoss.laplace(0.0)
    assert np.isfinite(PrivacyLoss.zcdp(1e-8, 1e-6).epsilon)  # tiny rho needs orders far above 1024


# --------------------------------------------- subsampled Gaussian, tables, parallel, best of runs


def test_subsampled_gaussian_is_dp_accountings_curve_and_full_batch_is_zcdp():
    loss = PrivacyLoss.subsampled_gaussian(1.5, 0.02, 500, 1e-6)
    ref = RdpAccountant(orders=tuple(o for o in ORDERS if o <= 1024))
    ref.compose(dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.02, dp_event.GaussianDpEvent(1.5)), 500))
    assert loss.epsilon == pytest.approx(ref.get_epsilon(1e-6), rel=1e-9)
    assert PrivacyLoss.from_json(loss.to_json()) == loss and "subsampled gaussian" in loss.describe()
    full = PrivacyLoss.subsampled_gaussian(20.0, 1.0, 50, 1e-6)
    assert full.rho == pytest.approx(50 / (2 * 20.0**2))
    with pytest.raises(ParameterError):
        PrivacyLoss((("sgm", 1.0, 1.5, 3),), 1.0, 1e-6)


def test_a_table_is_read_at_the_next_larger_order_and_round_trips_with_infinities():
    from dpdist.privacy.loss import rdp_curve

    part = ("rdp", "t", (2.0, 8.0, 32.0), (0.1, 0.4, math.inf))
    assert list(rdp_curve([part], [1.5, 2.0, 3.0, 8.0, 20.0, 64.0])) == [0.1, 0.1, 0.4, 0.4, math.inf, math.inf]
    loss = PrivacyLoss.tabulated("t", np.minimum(np.asarray(ORDERS) * 0.001, 50.0), 1e-6)
    assert PrivacyLoss.from_json(loss.to_json()) == loss
    with pytest.raises(ParameterError, match="tabulated"):
        PrivacyLoss((("rdp", "t", (3.0, 2.0), (0.1, 0.2)),), 1.0, 1e-6)


def test_parallel_is_the_pointwise_maximum():
    from dpdist.privacy.loss import rdp_curve

    a, b = PrivacyLoss.gaussian(3.0, 1e-6), PrivacyLoss.laplace(0.5)
    both = PrivacyLoss.parallel(a, b, delta=1e-6)
    expected = np.maximum(rdp_curve(a.parts, ORDERS), rdp_curve(b.parts, ORDERS))
    np.testing.assert_allclose(rdp_curve(both.parts, ORDERS), expected)
    assert both.epsilon <= min(PrivacyLoss.compose(a, b).epsilon, a.epsilon + b.epsilon)


def _papernot_steinke(orders, rdp, mean, shape):
    """Papernot & Steinke 2022, Thm. 2 (truncated negative binomial; shape 0 the logarithmic
    distribution), written from the paper, gamma solved from the mean here."""
    from scipy.optimize import brentq

    def tnb_mean(g):  # Def. 1: gamma is the halting probability, P(K = k) ~ (1 - gamma)^k ...
        if shape == 0:
            return (1 - g) / (g * math.log(1 / g))
        return shape * (1 - g) / (g * (1 - g**shape))

    gamma = brentq(lambda g: tnb_mean(g) - mean, 1e-12, 1 - 1e-12)
    orders, rdp = np.asarray(orders), np.asarray(rdp)
    # eps' = eps(lambda) + (1 + eta) (1 - 1/lambda_hat) eps_hat + (1 + eta) log(1/gamma) / lambda_hat
    #        + log E[K] / (lambda - 1), minimised over lambda_hat; then monotone in lambda
    c = (1 + shape) * np.min((1 - 1 / orders) * rdp + np.log(1 / gamma) / orders)
    out = rdp + c + math.log(mean) / (orders - 1)
    return np.array([out[orders >= a].min() for a in orders])


@pytest.mark.parametrize("mean, shape", [(3.0, 0.0), (5.0, 1.0), (4.0, 2.5)])
def test_best_of_runs_is_papernot_steinkes_theorem_over_the_largest_candidate_curve(mean, shape):
    from dpdist.privacy.loss import rdp_curve

    cands = [PrivacyLoss.subsampled_gaussian(4.0, 0.03, 800, 1e-6), PrivacyLoss.gaussian(12.0, 1e-6, count=10)]
    loss = PrivacyLoss.best_of_runs(cands, mean, shape, 1e-6)
    inner = np.max([rdp_curve(c.parts, ORDERS) for c in cands], axis=0)
    finite = np.isfinite(inner)
    expected = _papernot_steinke(np.asarray(ORDERS)[finite], inner[finite], mean, shape)
    np.testing.assert_allclose(rdp_curve(loss.parts, ORDERS)[finite], expected, rtol=1e-6)
    assert loss.epsilon > max(c.epsilon for c in cands)  # choosing costs something
