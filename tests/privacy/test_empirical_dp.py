"""Empirical differential privacy of the selection mechanisms.

Two neighbouring score vectors differ by at most the sensitivity in every coordinate, in
the worst direction for a non-monotone mechanism (the candidate up, every rival down).
For every outcome o we estimate P(o | D) and P(o | D') from many draws and bound their
ratio from below with Clopper-Pearson intervals (Bonferroni over all outcomes and both
directions). A correct mechanism's lower bound stays within e^epsilon; the same test run
on a deliberately broken mechanism (noise halved) finds an outcome whose ratio is
provably above e^epsilon.
"""

from __future__ import annotations

import numpy as np
import pytest
from dp_audit import epsilon_lower_bound

from dpdist.privacy.mechanisms import ExponentialMechanism, ReportNoisyMax, ReportNoisyMin

EPSILON = 1.0
SENSITIVITY = 0.5
M = 6  # outcomes
DRAWS = 400_000
FAMILY_ALPHA = 1e-4


def privacy_loss_lower_bound(draws_d: np.ndarray, draws_d2: np.ndarray, m: int) -> float:
    """A (1 - FAMILY_ALPHA)-confidence lower bound on max_o |ln P(o|D) / P(o|D')|."""
    return epsilon_lower_bound(draws_d.tolist(), draws_d2.tolist(), FAMILY_ALPHA, range(m))


def neighbours(sign: float) -> tuple[np.ndarray, np.ndarray]:
    """D: all scores equal; D': outcome 0 moved by sign*Delta, every rival by -sign*Delta."""
    d = np.zeros(M)
    d2 = np.full(M, -sign * SENSITIVITY)
    d2[0] = sign * SENSITIVITY
    return d, d2


class HalvedNoiseRNM(ReportNoisyMax):
    """Broken on purpose: half the Laplace scale the calibration asks for."""

    @property
    def scale(self) -> float:
        return super().scale / 2


class HalvedNoiseRNMin(ReportNoisyMin):
    @property
    def scale(self) -> float:
        return super().scale / 2


class HalvedNoiseEM(ExponentialMechanism):
    """Broken on purpose: the log-weights of an EM with half the noise (twice the multiplier)."""

    @property
    def multiplier(self) -> float:
        return 2 * super().multiplier


def measure(cls: type, sign: float, seed: int) -> float:
    d, d2 = neighbours(sign)
    draws = cls(EPSILON, SENSITIVITY, random_state=seed, size=DRAWS).select(d)
    draws2 = cls(EPSILON, SENSITIVITY, random_state=seed + 1, size=DRAWS).select(d2)
    return privacy_loss_lower_bound(draws, draws2, M)


@pytest.mark.parametrize(
    ("correct", "broken", "sign"),
    [
        (ReportNoisyMax, HalvedNoiseRNM, +1.0),
        (ReportNoisyMin, HalvedNoiseRNMin, -1.0),
        (ExponentialMechanism, HalvedNoiseEM, +1.0),
    ],
)
def test_empirical_dp(correct, broken, sign):
    assert measure(correct, sign, seed=100) <= EPSILON
    assert measure(broken, sign, seed=200) > EPSILON


def test_paper_calibration_is_caught_and_reported():
    """Seed 004 / Talwar's Laplace scale Delta/eps on non-monotone scores violates eps-DP,
    and the mechanism says so through true_epsilon."""
    d, d2 = neighbours(+1.0)

    def run(seed: int) -> tuple[np.ndarray, np.ndarray]:
        a = ReportNoisyMax(EPSILON, SENSITIVITY, calibration="paper", random_state=seed, size=DRAWS).select(d)
        b = ReportNoisyMax(EPSILON, SENSITIVITY, calibration="paper", random_state=seed + 1, size=DRAWS).select(d2)
        return a, b

    loss = privacy_loss_lower_bound(*run(300), M)
    assert loss > EPSILON
    assert loss <= ReportNoisyMax(EPSILON, SENSITIVITY, calibration="paper").true_epsilon


# ------------------------------------------------------- the flow's path: split, then DP-SIS


def _position_split(n: int, fraction: float, seed: int) -> np.ndarray:
    """dpdist <= 5360b17's split: one public Bernoulli draw per row *number* (kept here to show the hole)."""
    return np.random.default_rng([seed, 0x5D11]).random(n) < fraction


def _split_then_select(tmp, X, y, split: str, runs: int, rng_seed: int) -> np.ndarray:
    """The flow's code path on one source: write the store, split it, DP-SIS (k=1, epsilon=1) on the train half."""
    import scipy.sparse as sp

    from dpdist.data.split import split_store
    from dpdist.data.store import open_store, write_store
    from dpdist.selection.sis import DPSIS, store_scores

    tmp.mkdir()
    write_store(tmp / "src", sp.csr_matrix(X), y)
    if split == "keyed":
        split_store(tmp / "src", tmp / "train", tmp / "test", 0.5, KEY)
        scores = store_scores(open_store(tmp / "train"))
    else:
        test = _position_split(X.shape[0], 0.5, 0)
        scores = np.abs(X[~test].T @ y[~test])
    sis = DPSIS(k=1, epsilon=EPSILON, random_state=rng_seed)
    return np.array([sis.fit_scores(scores).features_[0] for _ in range(runs)])


KEY = bytes(range(32))  # the guarantee holds for every key, a known one included


@pytest.mark.slow
def test_split_then_selection_stays_within_the_charged_epsilon_and_the_old_split_did_not(tmp_path):
    # D: 200 records of two kinds, laid out against the old split's public draws so that the
    # train half holds kind A (feature 0) and, one row further down, kind B (feature 1).
    n = 200
    old = _position_split(n + 1, 0.5, 0)
    X = np.zeros((n, 2))
    for j in range(n):
        if not old[j] and old[j + 1]:
            X[j, 0] = 1.0  # in the old train half of D
        elif old[j] and not old[j + 1]:
            X[j, 1] = 1.0  # in the old train half of D' (shifted one row down)
    y = np.ones(n)
    # D': one record added at the top (a kind-A record)
    X2, y2 = np.vstack([[1.0, 0.0], X]), np.concatenate([[1.0], y])
    runs = 3000
    for split, bounded in (("keyed", True), ("position", False)):
        a = _split_then_select(tmp_path / f"{split}-d", X, y, split, runs, 1)
        b = _split_then_select(tmp_path / f"{split}-d2", X2, y2, split, runs, 2)
        bound = privacy_loss_lower_bound(a, b, 2)
        if bounded:
            assert bound <= EPSILON, f"keyed split: measured epsilon >= {bound:.2f} > charged {EPSILON}"
        else:
            assert bound > EPSILON, f"the position split should leak; measured only {bound:.2f}"


# ------------------------------------------- fast DP-FW steps at the tight calibration


def _fw_paths(
    X: np.ndarray, y: np.ndarray, lam: float, T: int, eps0: float, L: float, runs: int, seed: int
) -> np.ndarray:
    """The released vertex paths of ``runs`` fast DP-FW fits (the solver's kernel), coded as integers."""
    import scipy.sparse as sp

    from dpdist.solvers.fast_fw.solver import _extra_args, _fast_fw, _kernel_args
    from dpdist.solvers.samplers import block_shift

    Xr = sp.csr_matrix(X)
    Xc = Xr.tocsc()
    rows = (Xr.indptr.astype(np.int64), Xr.indices.astype(np.int32), Xr.data)
    cols = (Xc.indptr.astype(np.int64), Xc.indices.astype(np.int32), Xc.data)
    ybar = np.asarray(Xr.T @ y)
    rng = np.random.default_rng(seed)
    D = X.shape[1]
    out = np.empty(runs, dtype=np.int64)
    for i in range(runs):
        _, path, _, _, _ = _fast_fw(
            *_kernel_args(
                (
                    *rows,
                    *cols,
                    y,
                    ybar,
                    lam,
                    T,
                    False,
                    1,
                    eps0,
                    L,
                    0,
                    0,
                    block_shift(D),
                    rng,
                    np.zeros(1, dtype=np.int64),
                    *_extra_args(None, Xc, T),
                )
            )
        )
        code = 0
        for v in path:
            code = code * 2 * D + (abs(v) - 1) * 2 + (v > 0)
        out[i] = code
    return out


@pytest.mark.slow
@pytest.mark.parametrize("T", [2, 3, 4, 5])
def test_fast_dp_fw_steps_at_the_tight_calibration_stay_within_the_charged_epsilon(T):
    """Squared loss with a tiny lambda: the added record (x = (1, -1), y = 1) moves the two
    sum-gradient coordinates by +-1 of L = lambda + 1, nearly the worst case for the signed-vertex
    exponential mechanism. The whole path is the outcome; a 6x eps0 is caught."""
    from dpdist.solvers.frank_wolfe import privacy_plan

    X, y = np.array([[1.0, 0.0], [0.0, 1.0]]), np.zeros(2)
    X2, y2 = np.vstack([X, [1.0, -1.0]]), np.append(y, 1.0)
    lam = 0.01
    plan = privacy_plan(1.0, 1e-6, T, "squared", lam, 1.0, "exponential")
    charged = plan.loss.epsilon
    for mult, ok in ((1.0, True), (6.0, False)):
        a = _fw_paths(X, y, lam, T, plan.eps0 * mult, plan.lipschitz, 30_000, 1)
        b = _fw_paths(X2, y2, lam, T, plan.eps0 * mult, plan.lipschitz, 30_000, 2)
        bound = privacy_loss_lower_bound(a, b, 4**T)
        assert (bound <= charged) if ok else (bound > charged), (T, mult, bound, charged)
