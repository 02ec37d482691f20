"""DP-SGD / DP-GD and DP-IHT: the kernel, the exact output distribution of a step, an empirical DP
audit on neighbouring datasets, the threaded noise and the hard thresholding."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from dp_audit import chisquare_against, epsilon_lower_bound
from scipy import stats

from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import PrivacyLoss, calibrate
from dpdist.solvers.dp_iht import dp_iht, hard_threshold
from dpdist.solvers.dp_sgd import SGDPlan, clipped_gradient_sum, csr_parts, dp_sgd, gaussian_noise, poisson_rows

ALPHA = 1e-3


def reference_sum(X: np.ndarray, y: np.ndarray, rows, w, b, loss: str, clip: float, c: float):
    """The clipped gradient sum by its definition (dense numpy)."""
    g, gb = np.zeros(X.shape[1]), 0.0
    for r in rows:
        m = X[r] @ w + c * b
        dm = -y[r] / (1.0 + np.exp(y[r] * m)) if loss == "logistic" else m - y[r]
        full = np.append(dm * X[r], dm * c)
        full *= min(1.0, clip / max(np.linalg.norm(full), 1e-300))
        g += full[:-1]
        gb += full[-1]
    return g, gb


@pytest.mark.parametrize("loss, code", [("logistic", 0), ("squared", 1)])
def test_the_kernel_is_the_clipped_sum_of_per_record_gradients(loss, code):
    rng = np.random.default_rng(0)
    X = sp.random(40, 15, density=0.3, random_state=1, format="csr") * 3.0
    y = rng.choice([-1.0, 1.0], 40) if loss == "logistic" else rng.normal(size=40)
    w, b = rng.normal(size=15), np.array([0.3])
    rows = np.array([0, 3, 3, 7, 39], dtype=np.int64)  # a row twice is added twice
    out = np.zeros(15)
    gb = clipped_gradient_sum(csr_parts(X), y, rows, (w, b), (code, 0.7, 0.5), out)
    ref, ref_b = reference_sum(X.toarray(), y, rows, w, 0.3, loss, 0.7, 0.5)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    assert gb == pytest.approx(ref_b, rel=1e-12)


def test_poisson_rows_include_each_row_with_probability_q():
    rng = np.random.default_rng(1)
    counts = np.zeros(50)
    for _ in range(4000):
        rows = poisson_rows(rng, 50, 0.1)
        assert np.all(np.diff(rows) > 0) and (rows.size == 0 or (rows[0] >= 0 and rows[-1] < 50))
        counts[rows] += 1
    assert stats.chisquare(counts).pvalue > ALPHA and abs(counts.mean() / 4000 - 0.1) < 0.005
    assert np.array_equal(poisson_rows(rng, 7, 1.0), np.arange(7))


# one step on three one-feature records: w_1 = -lr (S + N(0, (z C)^2)) / B, S the clipped sum of the
# Poisson-sampled records' gradients at w = 0 (no intercept) -- a mixture of 2^3 Gaussians
X1 = sp.csr_matrix(np.array([[0.6], [1.0], [-0.8]]))
Y1 = np.array([1.0, -1.0, 1.0])
CLIP, Q, Z = 0.35, 0.4, 1.3


def one_step_plan(z: float) -> SGDPlan:
    return SGDPlan("logistic", CLIP, z, Q, 1, 1.0, 1.0, intercept_scaling=0.0)


def one_step_mixture(z: float) -> tuple[np.ndarray, np.ndarray]:
    """(means, weights) of the exact law of w_1."""
    g, _ = reference_sum(X1.toarray(), Y1, range(3), np.zeros(1), 0.0, "logistic", CLIP, 0.0)
    per = [reference_sum(X1.toarray(), Y1, [r], np.zeros(1), 0.0, "logistic", CLIP, 0.0)[0][0] for r in range(3)]
    means, weights = [], []
    for mask in itertools.product((0, 1), repeat=3):
        means.append(-sum(p for p, m in zip(per, mask) if m))
        weights.append(np.prod([Q if m else 1 - Q for m in mask]))
    return np.array(means), np.array(weights)


def test_one_step_has_its_exact_output_distribution_and_a_halved_noise_fails():
    means, weights = one_step_mixture(Z)
    edges = np.linspace(-2.5, 2.5, 41)
    cdf = lambda v: np.sum(weights * stats.norm.cdf(v, means, Z * CLIP))  # noqa: E731
    probs = np.diff([0.0, *[cdf(e) for e in edges], 1.0])
    for z, ok in ((Z, True), (Z / 2, False)):
        rng = np.random.default_rng(7)
        draws = np.array([dp_sgd(X1, Y1, one_step_plan(z), rng)[0][0] for _ in range(20_000)])
        counts = np.bincount(np.searchsorted(edges, draws), minlength=edges.size + 1)
        p = chisquare_against(counts, probs)
        assert (p > ALPHA) if ok else (p < ALPHA), (z, p)


@pytest.mark.slow
def test_a_step_stays_within_its_charged_epsilon_on_neighbours_and_a_quarter_noise_does_not():
    """D: one record whose gradient is 0 (x = 0); D' = D plus one whose clipped gradient has norm C:
    the worst case of ADD/REMOVE for a step. One DP-SGD step at q = 0.5 calibrated to epsilon = 1
    (delta = 1e-6); the released w, in units of the noise, binned. A quarter of the noise is caught."""
    X, y = sp.csr_matrix(np.array([[0.0]])), np.array([1.0])
    X2, y2 = sp.csr_matrix(np.array([[0.0], [1.0]])), np.array([1.0, 1.0])
    q, delta, clip = 0.5, 1e-6, 0.5  # the added record: dm = -1/2 at w = 0, its gradient exactly C
    z = 1.0 / calibrate(lambda x: PrivacyLoss.subsampled_gaussian(1.0 / x, q, 1, delta), 1.0, delta, 10.0)
    charged = PrivacyLoss.subsampled_gaussian(z, q, 1, delta).epsilon
    assert charged <= 1.0 + 1e-9
    edges = np.linspace(-3.0, 3.0, 25)
    for scale, ok in ((1.0, True), (0.25, False)):
        plan = SGDPlan("logistic", clip, z * scale, q, 1, 1.0, 1.0, intercept_scaling=0.0)
        rng = np.random.default_rng(11)
        unit = z * scale * clip
        a = [int(np.searchsorted(edges, dp_sgd(X, y, plan, rng)[0][0] / unit)) for _ in range(40_000)]
        b = [int(np.searchsorted(edges, dp_sgd(X2, y2, plan, rng)[0][0] / unit)) for _ in range(40_000)]
        bound = epsilon_lower_bound(a, b, 1e-4, range(edges.size + 1))
        assert (bound <= charged) if ok else (bound > charged), (scale, bound, charged)


def test_full_batch_steps_and_averaging():
    rng = np.random.default_rng(3)
    X = sp.random(200, 10, density=0.5, random_state=2, format="csr")
    y = np.where(X @ np.arange(10.0) > 1.0, 1.0, -1.0)
    plan = SGDPlan("logistic", 1.0, 1e-6, 1.0, 300, 5.0, 200.0, average_from=0.5)
    w, b = dp_sgd(X, y, plan, rng)  # nearly noise-free full-batch GD learns the sign pattern
    assert np.mean(np.where(X @ w + b > 0, 1, -1) == y) > 0.9
    with pytest.raises(ParameterError, match="sampling_rate"):
        SGDPlan("logistic", 1.0, 1.0, 1.5, 1, 1.0, 1.0)
    with pytest.raises(ParameterError, match="loss"):
        SGDPlan("hinge", 1.0, 1.0, 1.0, 1, 1.0, 1.0)


def test_threaded_noise_is_standard_normal_and_the_same_for_the_same_generator(monkeypatch):
    import dpdist.solvers.dp_sgd as mod

    monkeypatch.setattr(mod, "_NOISE_CHUNK", 1000)  # many chunks, many threads
    a = np.zeros(10_500)
    gaussian_noise(np.random.default_rng(5), a, 2.0)
    b = np.zeros(10_500)
    gaussian_noise(np.random.default_rng(5), b, 2.0)
    assert np.array_equal(a, b)
    assert stats.kstest(a / 2.0, "norm").pvalue > ALPHA
    assert abs(np.corrcoef(a[:1000], a[1000:2000])[0, 1]) < 0.15  # chunks are independent streams


def test_hard_threshold_and_dp_iht_release_s_sparse_models():
    w = np.array([0.1, -3.0, 2.0, 0.0, -0.5])
    hard_threshold(w, 2)
    assert np.array_equal(w, [0.0, -3.0, 2.0, 0.0, 0.0])
    rng = np.random.default_rng(0)
    X = sp.random(300, 40, density=0.2, random_state=3, format="csr")
    y = np.where(X[:, 3].toarray().ravel() > 0.2, 1.0, -1.0)
    plan = SGDPlan("logistic", 1.0, 0.5, 1.0, 30, 50.0, 300.0, intercept_scaling=0.1)
    w, b = dp_iht(X, y, plan, 5, rng)
    assert np.count_nonzero(w) <= 5 and 3 in np.flatnonzero(w)
    with pytest.raises(ParameterError, match="full-batch"):
        dp_iht(X, y, SGDPlan("logistic", 1.0, 0.5, 0.5, 3, 1.0, 1.0), 5, rng)


def test_a_record_whose_margin_overflows_adds_nothing_instead_of_escaping_the_clip():
    """One finite record with huge values made the margin infinite, then NaN, which skipped the clip and
    turned every later step NaN: its neighbour told apart at once. Now its term is 0."""
    X = sp.csr_matrix(np.array([[1e308, -1e308], [0.5, 0.2]]))
    out = np.zeros(2)
    gb = clipped_gradient_sum(
        csr_parts(X),
        np.array([1.0, -1.0]),
        np.array([0, 1], dtype=np.int64),
        (np.array([3.0, -3.0]), np.zeros(1)),
        (1, 0.5, 1.0),
        out,
    )
    ref, ref_b = reference_sum(X.toarray()[1:], np.array([-1.0]), [0], np.array([3.0, -3.0]), 0.0, "squared", 0.5, 1.0)
    assert np.all(np.isfinite(out)) and np.allclose(out, ref) and gb == pytest.approx(ref_b)
    plan = SGDPlan("logistic", 1.0, 0.5, 1.0, 5, 30.0, 2.0)
    w, b = dp_sgd(X, np.array([1.0, -1.0]), plan, np.random.default_rng(0))
    assert np.all(np.isfinite(w)) and np.isfinite(b)


def test_momentum_is_the_heavy_ball_on_the_noisy_steps_and_zero_momentum_is_plain_sgd():
    """Momentum is post-processing of the same noisy sums: with every noise draw the same, the
    heavy ball's iterates follow from the plain steps' gradients (v <- mu v + g, w <- w - lr v)."""
    X = sp.random(60, 6, density=0.5, random_state=3, format="csr")
    y = np.where(np.arange(60) % 3 == 0, 1.0, -1.0)
    plain = SGDPlan("logistic", 1.0, 0.8, 1.0, 1, 0.5, 60.0)
    w0, b0 = dp_sgd(X, y, plain, np.random.default_rng(4))
    w_zero, b_zero = dp_sgd(
        X, y, SGDPlan("logistic", 1.0, 0.8, 1.0, 1, 0.5, 60.0, momentum=0.0), np.random.default_rng(4)
    )
    np.testing.assert_array_equal(w0, w_zero)
    # one step from 0: v = g, so momentum changes nothing; two steps: w2 = w1 - lr (mu g1 + g2)
    heavy = SGDPlan("logistic", 1.0, 0.8, 1.0, 2, 0.5, 60.0, momentum=0.9)
    w_h, b_h = dp_sgd(X, y, heavy, np.random.default_rng(4))
    rng = np.random.default_rng(4)
    w1, b1 = dp_sgd(X, y, plain, rng)  # the same first draws
    g1, gb1 = -w1 / 0.5, -b1 / 0.5
    parts = csr_parts(X)
    g2 = np.zeros(6)
    gb2 = clipped_gradient_sum(parts, y, np.arange(60, dtype=np.int64), (w1, np.array([b1])), (0, 1.0, 1.0), g2)
    g2 += rng.standard_normal(6) * 0.8
    gb2 += rng.standard_normal() * 0.8
    np.testing.assert_allclose(w_h, w1 - 0.5 * (0.9 * g1 + g2 / 60.0), rtol=1e-10, atol=1e-12)
    assert b_h == pytest.approx(b1 - 0.5 * (0.9 * gb1 + gb2 / 60.0), rel=1e-10)
    with pytest.raises(ParameterError, match="momentum"):
        SGDPlan("logistic", 1.0, 1.0, 1.0, 1, 1.0, 1.0, momentum=1.0)


@pytest.mark.parametrize("d", [7, 2_200_000])  # one numpy call; chunks drawn in threads (> _NOISE_CHUNK)
def test_noise_drawn_ahead_is_the_noise_of_the_step(d):
    """``draw_noise`` then ``with_noise`` (the Dask reduction draws while the workers sum) gives the step
    ``noisy_gradient`` gives from the same generator state: the same numbers."""
    plan = SGDPlan("logistic", 1.5, 2.0, 1.0, 3, 0.1, 40.0, l2=0.01)
    sums = np.random.default_rng(1).standard_normal(d)
    w = np.random.default_rng(2).standard_normal(d)
    g1, g2 = sums.copy(), sums.copy()
    b1 = plan.noisy_gradient(np.random.default_rng(7), g1, 0.25, w)
    b2 = plan.with_noise(g2, 0.25, w, plan.draw_noise(np.random.default_rng(7), d))
    assert np.array_equal(g1, g2) and b1 == b2
    assert not np.array_equal(g1, sums / 40.0 + 0.01 * w)  # noise was added
