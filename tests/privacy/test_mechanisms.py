"""Each mechanism's output distribution is the intended one (goodness of fit at fixed seeds)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_audit import chisquare_against
from scipy import integrate, special, stats

from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import PrivacyLoss
from dpdist.privacy.mechanisms import (
    AnalyticGaussian,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    ReportNoisyMax,
    ReportNoisyMin,
    analytic_gaussian_delta,
    gumbel_max,
)

N = 200_000
ALPHA = 1e-3  # a correct mechanism fails a test at a fixed seed with probability ALPHA at most


# ------------------------------------------------------------------------- Laplace


def test_laplace_scale_and_distribution():
    mech = Laplace(epsilon=0.5, sensitivity=2.0, random_state=1)
    assert mech.scale == pytest.approx(4.0)
    noise = mech.randomise(np.zeros(N))
    assert stats.kstest(noise, stats.laplace(scale=4.0).cdf).pvalue > ALPHA
    # the same test tells a wrong scale apart, so it is not vacuous
    assert stats.kstest(noise, stats.laplace(scale=3.6).cdf).pvalue < ALPHA


def test_laplace_scalar_and_shift():
    mech = Laplace(epsilon=1.0, random_state=3)
    assert isinstance(mech.randomise(5.0), float)
    assert np.mean(mech.randomise(np.full(N, 7.0))) == pytest.approx(7.0, abs=0.02)


# ------------------------------------------------------------------------ Gaussian


def test_gaussian_classic_calibration_and_distribution():
    mech = Gaussian(epsilon=0.5, delta=1e-5, sensitivity=2.0, random_state=2)
    sigma = 2.0 * math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5
    assert mech.sigma == pytest.approx(sigma)
    noise = mech.randomise(np.zeros(N))
    assert stats.kstest(noise, stats.norm(scale=sigma).cdf).pvalue > ALPHA
    assert stats.kstest(noise, stats.norm(scale=0.95 * sigma).cdf).pvalue < ALPHA


def test_gaussian_classic_refuses_large_epsilon():
    with pytest.raises(ParameterError, match="AnalyticGaussian"):
        Gaussian(epsilon=1.0, delta=1e-5)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0, 20.0])
def test_analytic_gaussian_is_tight(epsilon):
    mech = AnalyticGaussian(epsilon=epsilon, delta=1e-6, sensitivity=3.0, random_state=4)
    assert analytic_gaussian_delta(epsilon, mech.sigma, 3.0) <= 1e-6
    assert analytic_gaussian_delta(epsilon, 0.999 * mech.sigma, 3.0) > 1e-6
    if epsilon < 1:
        # never worse than the classic calibration where that one is valid
        assert mech.sigma <= Gaussian(epsilon, 1e-6, sensitivity=3.0).sigma


def test_analytic_gaussian_known_value():
    # Balle & Wang (2018): epsilon = 1, delta = 1e-5, Delta = 1 -> sigma ~ 3.73
    assert AnalyticGaussian(1.0, 1e-5).sigma == pytest.approx(3.7306, abs=1e-3)


def test_analytic_gaussian_distribution():
    mech = AnalyticGaussian(epsilon=2.0, delta=1e-6, random_state=5)
    noise = mech.randomise(np.zeros(N))
    assert stats.kstest(noise, stats.norm(scale=mech.sigma).cdf).pvalue > ALPHA


# ------------------------------------------------------------- exponential mechanism


def em_probabilities(scores: np.ndarray, multiplier: float) -> np.ndarray:
    return special.softmax(multiplier * scores)


def test_exponential_mechanism_distribution():
    scores = np.array([0.0, 0.3, 1.0, 2.0, 2.5, -1.0])
    mech = ExponentialMechanism(epsilon=2.0, sensitivity=0.5, random_state=6, size=N)
    assert mech.multiplier == pytest.approx(2.0)
    counts = np.bincount(mech.select(scores), minlength=scores.size)
    assert chisquare_against(counts, em_probabilities(scores, 2.0)) > ALPHA
    # the monotone calibration is a different distribution, and the test sees it
    assert chisquare_against(counts, em_probabilities(scores, 4.0)) < ALPHA


def test_exponential_mechanism_monotone_multiplier():
    assert ExponentialMechanism(epsilon=2.0, sensitivity=0.5, monotone=True).multiplier == pytest.approx(4.0)


def test_exponential_mechanism_weights_spanning_hundreds_of_orders_of_magnitude():
    # log-weights up to 1e5 and spreads of ~1000 nats (weight ratios ~1e434): exp() overflows,
    # Gumbel-max in log space is exact.
    base = np.array([0.0, -0.5, -1.0, -2.0, -3.0, -700.0, -1500.0, -1e4])
    scores = 1e5 + base
    mech = ExponentialMechanism(epsilon=2.0, sensitivity=1.0, random_state=7, size=N)
    with np.errstate(over="ignore"):
        assert not np.all(np.isfinite(np.exp(mech.multiplier * scores)))
    counts = np.bincount(mech.select(scores), minlength=scores.size)
    probs = em_probabilities(base, mech.multiplier)  # shift-invariant
    assert counts[5:].sum() == 0  # probability < 1e-300
    assert chisquare_against(counts, probs) > ALPHA


def test_single_draw_matches_batched_draws():
    scores = np.array([0.0, 1.0, 2.0])
    mech = ExponentialMechanism(epsilon=1.0, random_state=8)
    single = np.bincount([mech.select(scores) for _ in range(20_000)], minlength=3)
    assert chisquare_against(single, em_probabilities(scores, 0.5)) > ALPHA


def test_gumbel_max_is_exact_categorical():
    rng = np.random.default_rng(9)
    logw = np.log(np.array([0.1, 0.2, 0.3, 0.4])) + 1234.5
    counts = np.bincount(gumbel_max(logw, rng, size=N), minlength=4)
    assert chisquare_against(counts, np.array([0.1, 0.2, 0.3, 0.4])) > ALPHA


# ------------------------------------------------------------- report-noisy-max / min


def rnm_probabilities(scores: np.ndarray, b: float) -> np.ndarray:
    """Exact P(argmax_i scores_i + Lap(b) = i), by numerical integration."""
    probs = []
    for i, s in enumerate(scores):
        others = np.delete(scores, i)

        def integrand(x, s=s, others=others):
            return stats.laplace.pdf(x, loc=s, scale=b) * np.prod(stats.laplace.cdf(x, loc=others, scale=b))

        lo, hi = scores.min() - 60 * b, scores.max() + 60 * b
        probs.append(integrate.quad(integrand, lo, hi, points=list(scores), limit=500, epsabs=1e-12)[0])
    probs = np.array(probs)
    assert probs.sum() == pytest.approx(1.0, abs=1e-6)
    return probs


@pytest.mark.parametrize(
    ("monotone", "calibration", "scale", "true_eps"),
    [(False, "safe", 2.0, 1.0), (True, "safe", 1.0, 1.0), (False, "paper", 1.0, 2.0)],
)
def test_rnm_calibration(monotone, calibration, scale, true_eps):
    mech = ReportNoisyMax(epsilon=1.0, sensitivity=1.0, monotone=monotone, calibration=calibration)
    assert mech.scale == pytest.approx(scale)
    assert mech.true_epsilon == pytest.approx(true_eps)


def test_report_noisy_max_distribution():
    scores = np.array([0.0, 0.5, 1.0, 2.0, 1.5])
    mech = ReportNoisyMax(epsilon=1.0, sensitivity=0.5, random_state=10, size=N)
    counts = np.bincount(mech.select(scores), minlength=scores.size)
    assert chisquare_against(counts, rnm_probabilities(scores, 1.0)) > ALPHA
    assert chisquare_against(counts, rnm_probabilities(scores, 0.5)) < ALPHA


def test_report_noisy_min_is_max_of_negated():
    scores = np.array([0.0, 0.5, 1.0, 2.0, 1.5])
    mech = ReportNoisyMin(epsilon=1.0, sensitivity=0.5, random_state=11, size=N)
    counts = np.bincount(mech.select(scores), minlength=scores.size)
    assert chisquare_against(counts, rnm_probabilities(-scores, 1.0)) > ALPHA
    assert isinstance(ReportNoisyMin(epsilon=1.0, sensitivity=0.5, random_state=11).select(scores), int)


@pytest.mark.parametrize(
    ("cls", "kwargs", "loss"),
    [
        (ExponentialMechanism, {"size": 4}, PrivacyLoss.bounded_range(0.5, count=4)),
        (ExponentialMechanism, {}, PrivacyLoss.bounded_range(0.5)),
        (ReportNoisyMax, {"size": 3}, PrivacyLoss.pure_steps(0.5, count=3)),
        (ReportNoisyMax, {"calibration": "paper", "size": 3}, PrivacyLoss.pure_steps(1.0, count=3)),
        (ReportNoisyMin, {"monotone": True, "size": 2}, PrivacyLoss.pure_steps(0.5, count=2)),
        (ReportNoisyMax, {}, PrivacyLoss.pure(0.5)),
    ],
)
def test_privacy_loss_charges_every_selection_that_select_draws(cls, kwargs, loss):
    """k independent selections are the composition of k: what ``privacy_loss`` charges before the
    release is exactly what one ``select`` call draws, and ``select`` cannot be asked for more."""
    mech = cls(0.5, random_state=12, **kwargs)
    scores = np.array([0.0, 1.0, 2.0, 0.5])
    with pytest.raises(TypeError):
        mech.select(scores, size=10)  # more draws than the charge covers: not a call that exists
    assert mech.privacy_loss == loss
    out = np.atleast_1d(mech.select(scores))
    assert out.size == kwargs.get("size", 1) == mech.count


def test_a_non_finite_score_is_refused_without_its_position_or_value():
    """Scores are a function of the data: the refusal names the parameter only."""
    for bad in (np.inf, -np.inf, np.nan):
        scores = np.array([0.25, 1.5, 3.75, bad, 7.0])
        for mech in (ExponentialMechanism(1.0), ReportNoisyMax(1.0)):
            with pytest.raises(ParameterError, match="scores must be finite") as err:
                mech.select(scores)
            message = str(err.value).lower()
            assert not any(ch.isdigit() for ch in message), message  # not the entry 3, no value
            assert "inf" not in message.replace("finite", "") and "nan" not in message, message


# --------------------------------------------------------------------- randomness


def test_os_entropy_by_default_and_seed_opt_in():
    scores = np.zeros(1000)
    a = ExponentialMechanism(1.0, size=50).select(scores)
    b = ExponentialMechanism(1.0, size=50).select(scores)
    assert not np.array_equal(a, b)
    c = ExponentialMechanism(1.0, random_state=42, size=50).select(scores)
    d = ExponentialMechanism(1.0, random_state=42, size=50).select(scores)
    assert np.array_equal(c, d)


# ---------------------------------------------------------------------- validation


@pytest.mark.parametrize("eps", [0, -1.0, float("nan"), float("inf"), "1", None, True])
def test_bad_epsilon(eps):
    with pytest.raises(ParameterError, match="epsilon"):
        Laplace(epsilon=eps)
    with pytest.raises(ParameterError, match="epsilon"):
        ReportNoisyMax(epsilon=eps)


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_bad_delta(delta):
    with pytest.raises(ParameterError, match="delta"):
        Gaussian(epsilon=0.5, delta=delta)
    with pytest.raises(ParameterError, match="delta"):
        AnalyticGaussian(epsilon=0.5, delta=delta)


@pytest.mark.parametrize("sens", [0, -1.0, float("nan"), float("inf")])
def test_bad_sensitivity(sens):
    with pytest.raises(ParameterError, match="sensitivity"):
        ExponentialMechanism(epsilon=1.0, sensitivity=sens)


def test_bad_scores_and_options():
    mech = ReportNoisyMax(epsilon=1.0)
    with pytest.raises(ParameterError, match="finite"):
        mech.select(np.array([0.0, np.nan]))
    with pytest.raises(ParameterError, match="non-empty"):
        mech.select(np.array([]))
    with pytest.raises(ParameterError, match="size"):
        ReportNoisyMax(epsilon=1.0, size=0)
    with pytest.raises(ParameterError, match="calibration"):
        ReportNoisyMax(epsilon=1.0, calibration="loose")
    with pytest.raises(ParameterError, match="random_state"):
        Laplace(1.0, random_state=-3)
    with pytest.raises(ParameterError, match="finite"):
        Laplace(1.0).randomise(np.array([np.inf]))
