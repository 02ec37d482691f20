"""Held-out evaluation: exact metrics (public test sets), and the private release of metrics and curves."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from dpdist import evaluation
from dpdist.cli._common import _metric_text
from dpdist.evaluation import PrivateEvaluation, exact_metrics, path_losses, sparse_coef, support_recall
from dpdist.linear_model import DPFrankWolfeClassifier, DPFrankWolfeRegressor
from dpdist.solvers.frank_wolfe import mean_loss


def _data(n: int = 400, d: int = 60, seed: int = 0) -> tuple[sp.csr_matrix, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.2, format="csr", random_state=seed)
    X.data = np.clip(X.data, 0, 1)
    w = np.zeros(d)
    w[:5] = 3.0
    y = np.where(X @ w + 0.1 * rng.standard_normal(n) > np.median(X @ w), 1.0, -1.0)
    return X, y


def test_path_rebuilds_the_released_iterate() -> None:
    X, y = _data()
    clf = DPFrankWolfeClassifier(
        epsilon=2.0, delta=1e-6, lam=5.0, max_iter=200, method="fast-dp-fw", random_state=1
    ).fit(X, y)
    its, losses = path_losses("binary", clf.path_, 5.0, X, y, points=20)
    assert its[-1] == 200 and len(its) == len(losses)
    final = mean_loss("logistic", X @ clf.coef_.ravel(), (y > 0).astype(float))
    assert np.isclose(losses[-1], final, rtol=1e-9)  # the path determines w_T exactly


def test_exact_metrics_and_sparse_coef() -> None:
    X, y = _data(seed=2)
    reg = DPFrankWolfeRegressor(lam=2.0, max_iter=100, method="fw").fit(X, y * 0.5)
    nz = np.flatnonzero(reg.coef_)
    w = sparse_coef(nz.tolist(), reg.coef_[nz].tolist(), X.shape[1])
    assert np.array_equal(w, reg.coef_)
    m = exact_metrics("regression", w, X, y * 0.5)
    assert np.isclose(m["mse"], np.mean((X @ w - y * 0.5) ** 2))
    c = exact_metrics("binary", w, X, y)
    assert set(c) == {"accuracy", "balanced_accuracy", "auc", "log_loss", "predicts_one_class"}
    assert 0.5 < c["auc"] <= 1.0 and 0.5 < c["balanced_accuracy"] <= 1.0 and not c["predicts_one_class"]
    assert support_recall([1, 2, 9], [1, 2, 3, 4]) == 0.5 and support_recall([1], None) is None


def test_private_metrics_track_the_exact_ones_on_many_rows() -> None:
    X, y = _data(n=20000, seed=3)
    clf = DPFrankWolfeClassifier(lam=5.0, max_iter=150, method="fw").fit(X, y)
    exact = exact_metrics("binary", clf.coef_, X, y)
    out = PrivateEvaluation("binary", 1.0, random_state=4).evaluate(clf.coef_, clf.path_, 5.0, X, y)
    assert out["private"] and abs(out["rows"] - 20000) < 300
    assert out["accuracy"] == pytest.approx(exact["accuracy"], abs=0.01)
    assert out["auc"] == pytest.approx(exact["auc"], abs=0.02)  # binned: ties within a bin count half
    its, losses = path_losses("binary", clf.path_, 5.0, X, y, points=8)
    assert out["curve_iterations"] == its
    assert np.allclose(out["curve_loss"], losses, atol=0.05)
    reg = DPFrankWolfeRegressor(lam=2.0, max_iter=100, method="fw").fit(X, y * 0.5)
    r = PrivateEvaluation("regression", 1.0, random_state=5).evaluate(reg.coef_, reg.path_, 2.0, X, y * 0.5)
    e = exact_metrics("regression", reg.coef_, X, y * 0.5)
    assert r["mse"] == pytest.approx(e["mse"], rel=0.05) and r["r2"] == pytest.approx(e["r2"], abs=0.05)


class _HalvedNoise(PrivateEvaluation):
    """Broken on purpose: half the Laplace scale."""

    def noisy_histogram(self, margins, y):
        hist = self.histogram(margins, y)
        return hist + self._rng.laplace(scale=1.5 / self.epsilon, size=hist.shape)


@pytest.mark.parametrize(("cls", "ok"), [(PrivateEvaluation, True), (_HalvedNoise, False)])
def test_histogram_noise_is_exactly_laplace_of_the_sensitivity_over_epsilon_half(cls, ok) -> None:
    rng = np.random.default_rng(6)
    margins, y = rng.normal(size=300), np.where(rng.random(300) < 0.5, 1.0, -1.0)
    ev = cls("binary", 0.8, bins=10, random_state=7)
    exact = ev.histogram(margins, y)
    noise = np.concatenate([(ev.noisy_histogram(margins, y) - exact).ravel() for _ in range(300)])
    p = stats.kstest(noise, stats.laplace(scale=3.0 / 0.8).cdf).pvalue  # epsilon/3 for the histograms
    assert (p > 1e-4) if ok else (p < 1e-6)


def test_audit_of_the_released_histogram_on_neighbouring_test_sets() -> None:
    """One test record more moves one cell by 1; events {cell > c} stay within e^(epsilon/3)."""
    rng = np.random.default_rng(8)
    margins, y = rng.normal(size=200), np.where(rng.random(200) < 0.5, 1.0, -1.0)
    m2, y2 = np.append(margins, 0.3), np.append(y, 1.0)  # D' = D plus one record
    eps = 1.0
    ev1, ev2 = (
        PrivateEvaluation("binary", eps, bins=10, random_state=9),
        PrivateEvaluation("binary", eps, bins=10, random_state=10),
    )
    cell = (1, int(np.searchsorted(ev1.edges(), 0.3, side="left")))
    n = 60_000
    a = np.array([ev1.noisy_histogram(margins, y)[cell] for _ in range(n)])
    b = np.array([ev2.noisy_histogram(m2, y2)[cell] for _ in range(n)])
    base = ev1.histogram(margins, y)[cell]
    worst = 0.0
    for c in base + np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0]):
        ka, kb = int((a > c).sum()), int((b > c).sum())
        lo_b = stats.beta.ppf(1e-5, kb, n - kb + 1)
        hi_a = stats.beta.ppf(1 - 1e-5, ka + 1, n - ka)
        worst = max(worst, math.log(lo_b / hi_a))
    assert 0.1 < worst <= eps / 3  # the audit sees a real loss, and never more than charged


def test_private_evaluation_is_always_recordable():
    rng = np.random.default_rng(0)
    X = sp.random(60, 10, density=0.3, random_state=1, format="csr")
    y = rng.uniform(-1, 1, 60)
    for seed in range(30):
        out = PrivateEvaluation("regression", 0.1, random_state=seed).evaluate(np.zeros(10), [1, -2], 1.0, X, y)
        json.dumps(out, allow_nan=False)  # what Accountant.release does before recording


def test_auc_and_r2_intervals_hold_the_released_value_and_the_stream_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The simulated AUC and R^2 intervals hold the released value and narrow as epsilon grows; on few
    test rows the AUC from the unclamped noisy histograms stays near the exact binned one on average,
    where clamping each cell at 0 pulled it toward 0.5; drawing the intervals leaves the release's own
    noise stream as it was."""
    X, y = _data(n=300, seed=7)
    clf = DPFrankWolfeClassifier(lam=5.0, max_iter=60, method="fw").fit(X, y)
    exact = PrivateEvaluation("binary", 1e9, random_state=0).evaluate(clf.coef_, clf.path_, 5.0, X, y)["auc"]
    widths, aucs = {}, []
    for eps in (1.0, 30.0):
        widths[eps] = []
        for seed in range(40):
            out = PrivateEvaluation("binary", eps, random_state=seed).evaluate(clf.coef_, clf.path_, 5.0, X, y)
            lo, hi = out["auc_interval"]
            assert 0.0 <= lo <= out["auc"] <= hi <= 1.0 and lo < hi  # clipped draws once gave [1, 1]
            widths[eps].append(hi - lo)
            if eps == 1.0:
                aucs.append(out["auc"])
    assert np.mean(widths[30.0]) < np.mean(widths[1.0])
    assert abs(np.mean(aucs) - exact) < 0.08, (np.mean(aucs), exact)  # clamped cells gave ~0.2 below
    reg = DPFrankWolfeRegressor(lam=2.0, max_iter=60, method="fw").fit(X, y * 0.5)
    r = PrivateEvaluation("regression", 2.0, random_state=1).evaluate(reg.coef_, reg.path_, 2.0, X, y * 0.5)
    lo, hi = r["r2_interval"]
    assert lo <= r["r2"] <= hi <= 1.0
    # the intervals' generator leaves the release's stream alone: with the simulation on an unrelated
    # generator instead, every released value (the curve's noise is drawn after the metrics) is the same
    out_a = PrivateEvaluation("binary", 1.0, random_state=11).evaluate(clf.coef_, clf.path_, 5.0, X, y)
    monkeypatch.setattr(evaluation, "_side", lambda rng: np.random.default_rng(12345))
    out_b = PrivateEvaluation("binary", 1.0, random_state=11).evaluate(clf.coef_, clf.path_, 5.0, X, y)
    released = ("rows", "accuracy", "auc", "curve_loss")
    assert [out_a.get(k) for k in released] == [out_b.get(k) for k in released]
    assert out_a["auc_interval"] != out_b["auc_interval"]  # the patch took effect


def test_a_wide_auc_or_r2_interval_is_flagged_as_swamped_too() -> None:
    """Each private metric is flagged when its interval is wider than half its useful range: AUC's too
    (accuracy's interval is analytic and can be narrow while the histograms' noise makes AUC useless)."""
    X, y = _data(n=300, seed=7)
    clf = DPFrankWolfeClassifier(lam=5.0, max_iter=60, method="fw").fit(X, y)
    for eps in (1.0, 2.0):
        for seed in range(5):
            out = PrivateEvaluation("binary", eps, random_state=seed).evaluate(clf.coef_, clf.path_, 5.0, X, y)
            acc_lo, acc_hi = out["accuracy_interval"]
            auc_lo, auc_hi = out["auc_interval"]
            assert out["noise_swamps"] == (acc_hi - acc_lo > 0.25 or auc_hi - auc_lo > 0.25)
            if eps == 1.0:  # accuracy's interval is narrow here; AUC's is not
                assert acc_hi - acc_lo < 0.25 < auc_hi - auc_lo and out["noise_swamps"]
    reg = DPFrankWolfeRegressor(lam=2.0, max_iter=60, method="fw").fit(X, y * 0.5)
    out = PrivateEvaluation("regression", 0.3, random_state=1).evaluate(reg.coef_, reg.path_, 2.0, X, y * 0.5)
    lo, hi = out["r2_interval"]
    assert hi - lo > 0.5 and out["noise_swamps"]


def test_an_interval_around_an_unclipped_auc_above_one_holds_the_released_one() -> None:
    """An unclipped AUC above 1 by more than the simulations' spread: both ends are cut to [0, 1], so the
    interval is [1, 1]-at-worst and never inverted (the lower end once stayed above 1)."""
    from dpdist.evaluation import _around

    rng = np.random.default_rng(0)
    assert _around(1.3, 1.3 + 0.02 * rng.normal(size=2000), (0.0, 1.0)) == [1.0, 1.0]
    assert _around(-0.4, -0.4 + 0.02 * rng.normal(size=2000), (0.0, 1.0)) == [0.0, 0.0]
    lo, hi = _around(1.02, 1.02 + 0.1 * rng.normal(size=2000), (0.0, 1.0))
    assert lo < 1.0 == hi


def test_an_auc_the_noise_pushes_out_of_0_1_is_released_as_swamped_never_as_a_collapsed_interval() -> None:
    """Noisy histograms whose AUC lies outside [0, 1] by more than the noise's simulated spread (a negative
    noisy cell): it was clipped to 1.000 within [1, 1]; it is released as swamped (no value, no interval),
    and the command line says so. An AUC inside [0, 1] keeps its value and an interval of positive width."""

    y = np.array([-1.0, -1.0, 1.0, 1.0])
    ev = PrivateEvaluation("binary", 1e4, bins=2, random_state=0, curve=False)
    ev.noisy_histogram = lambda margins, y: np.array([[5.0, -3.0], [0.0, 5.0]])  # AUC 17.5 / 10 = 1.75
    out = ev._released(y * 2.0, y, [], 0.0, sp.csr_matrix((y.size, 1)), None)
    assert out["auc_swamped"] and out["auc"] is None and out["auc_interval"] is None and out["noise_swamps"]
    text = _metric_text(out)
    assert "AUC swamped by the noise" in text and "AUC 1.000" not in text
    ev.noisy_histogram = lambda margins, y: np.array([[5.0, 1.0], [1.0, 5.0]])
    out = ev._released(y * 2.0, y, [], 0.0, sp.csr_matrix((y.size, 1)), None)
    assert not out["auc_swamped"] and 0.0 < out["auc"] < 1.0


def test_balanced_accuracy_and_the_one_class_flag_come_from_the_released_histograms() -> None:
    rng = np.random.default_rng(0)
    y = np.where(rng.random(20_000) < 0.05, 1.0, -1.0)
    ev = PrivateEvaluation("binary", 1e6, random_state=0, curve=False)
    majority = ev._released(np.full(y.size, -3.0), y, [], 0.0, sp.csr_matrix((y.size, 1)), None)  # all negative
    assert majority["predicts_one_class"] and majority["balanced_accuracy"] == pytest.approx(0.5, abs=1e-3)
    assert majority["accuracy"] == pytest.approx(0.95, abs=0.01)
    margins = np.where(y > 0, 1.0, -1.0) * np.where(rng.random(y.size) < 0.8, 1.0, -1.0)  # 80% right per class
    out = ev._released(margins, y, [], 0.0, sp.csr_matrix((y.size, 1)), None)
    assert not out["predicts_one_class"] and out["balanced_accuracy"] == pytest.approx(0.8, abs=0.02)
    odd = PrivateEvaluation("binary", 1.0, bins=41, random_state=0, curve=False)
    assert odd._released(margins, y, [], 0.0, sp.csr_matrix((y.size, 1)), None)["balanced_accuracy"] is None


@pytest.mark.parametrize("task", ["binary", "regression"])
def test_an_empty_held_out_side_is_evaluated_not_failed(task) -> None:
    """The keyed split leaves no held-out record with probability (1 - test_fraction)^n: a gradient model's
    metrics on no rows are their noise alone, released as on any other held-out side (scikit-learn's
    row normalisation refused no rows: the release failed, a failure the data made)."""
    model = {"indices": [0], "values": [1.0], "intercept": 0.0, "n_features": 3, "row_norm": "l2"}
    out = PrivateEvaluation(task, 0.5, random_state=0).evaluate_model(model, sp.csr_matrix((0, 3)), np.zeros(0))
    assert out["private"] and "rows" in out and ("accuracy" in out if task == "binary" else "mse" in out)


def test_exact_balanced_accuracy_and_one_class_flag_on_a_public_test_set() -> None:
    y = np.array([1.0] * 5 + [-1.0] * 95)
    X = sp.csr_matrix(np.ones((100, 1)))
    majority = exact_metrics("binary", np.array([-1.0]), X, y)  # every row predicted negative
    assert majority["accuracy"] == 0.95 and majority["balanced_accuracy"] == 0.5 and majority["predicts_one_class"]
    X = sp.csr_matrix(np.where(np.arange(100) < 10, 1.0, -1.0)[:, None])  # rows 0-9 predicted positive
    m = exact_metrics("binary", np.array([1.0]), X, y)
    assert m["balanced_accuracy"] == pytest.approx(0.5 * (1.0 + 90 / 95)) and not m["predicts_one_class"]


def test_a_regression_model_whose_held_out_loss_grew_past_its_start_says_so() -> None:
    """A fit that moved away from the data (e.g. a diverged step size) is flagged from the released sums
    (post-processing): its noisy squared loss above the noisy sum of y^2, the loss of all-zero weights."""
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.normal(size=(5000, 4)) / 2.0)
    w = np.array([0.5, -0.3, 0.2, 0.0])
    y = np.clip(X @ w + 0.1 * rng.normal(size=5000), -1.0, 1.0)
    ev = PrivateEvaluation("regression", 1.0, random_state=1, curve=False)
    good = ev.evaluate(w, [], 0.0, X, y)
    diverged = ev.evaluate(-40.0 * w, [], 0.0, X, y)
    nothing = ev.evaluate(np.zeros(4), [], 0.0, X, y)
    assert not good["loss_grew"] and not nothing["loss_grew"] and diverged["loss_grew"]
    assert "WARNING: the model's held-out squared loss is above that of all-zero weights" in _metric_text(diverged)
    assert "WARNING" not in _metric_text(good)


def test_the_metric_text_shows_balanced_accuracy_and_flags_a_one_class_model() -> None:
    one = {"accuracy": 0.95, "balanced_accuracy": 0.5, "auc": 0.61, "accuracy_interval": [0.9, 0.99]}
    assert "balanced accuracy 0.500, AUC 0.610" in _metric_text(one) and "WARNING" not in _metric_text(one)
    one["predicts_one_class"] = True
    assert "WARNING: the model predicts one class on the held-out rows" in _metric_text(one)
