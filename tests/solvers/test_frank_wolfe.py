"""Frank-Wolfe: Alg. 2 is Alg. 1 for squared loss, stays close for logistic, and private runs are calibrated."""

from __future__ import annotations

import itertools
import lzma
import os
import subprocess
import sys

import numba
import numpy as np
import pytest
import scipy.sparse as sp
from fast_fw_kernel import run_kernel, sparse_arrays
from sklearn.datasets import load_svmlight_file

from dpdist.exceptions import ParameterError
from dpdist.privacy.composition import advanced_step_epsilon, rnm_paper_true_epsilon
from dpdist.privacy.loss import PrivacyLoss
from dpdist.solvers.fast_fw import fast_frank_wolfe
from dpdist.solvers.fast_fw.move import _ahead
from dpdist.solvers.fast_fw.solver import _extra_args
from dpdist.solvers.frank_wolfe import exponential_vertex, frank_wolfe, lipschitz, privacy_plan
from dpdist.solvers.samplers import block_shift


@pytest.fixture(scope="module")
def rcv1(shared_data):
    X, y = load_svmlight_file(lzma.open(shared_data / "libsvm/rcv1_small.train.svm.xz"), n_features=47236)
    return X.tocsr(), (y > 0).astype(float)


def test_squared_loss_fast_is_standard(rcv1):
    """Non-private: the same coordinate sequence for 1,000 steps and the same weights to 1e-8."""
    X, y01 = rcv1
    y = 2 * y01 - 1
    a = frank_wolfe(X, y, 50.0, 1000, loss="squared")
    b = fast_frank_wolfe(X, y, 50.0, 1000, loss="squared")
    assert a.path == b.path
    assert np.linalg.norm(a.coef - b.coef) <= 1e-8 * np.linalg.norm(a.coef)
    assert np.abs(a.coef).sum() <= 50.0 + 1e-9


@pytest.mark.parametrize("refresh", [0, 50])
def test_logistic_fast_tracks_standard(rcv1, refresh):
    X, y = rcv1
    a = frank_wolfe(X, y, 50.0, 600, loss="logistic", record_every=600)
    b = fast_frank_wolfe(X, y, 50.0, 600, loss="logistic", refresh=refresh, record_every=600)
    assert b.objective[-1] <= 1.01 * a.objective[-1]
    assert np.abs(b.coef).sum() <= 50.0 + 1e-9


def test_refresh_every_step_is_exact_for_logistic(rcv1):
    X, y = rcv1
    a = frank_wolfe(X, y, 20.0, 200, loss="logistic")
    b = fast_frank_wolfe(X, y, 20.0, 200, loss="logistic", refresh=1)
    assert a.path == b.path
    np.testing.assert_allclose(a.coef, b.coef, rtol=1e-9, atol=1e-12)


def test_lazy_queue_gives_the_exact_argmax():
    """The heap path (logistic, refresh every step) picks argmax |alpha| like a full scan, on random data."""
    rng = np.random.default_rng(0)
    X = sp.random(300, 500, density=0.02, random_state=1, format="csr")
    y = (rng.random(300) < 0.4).astype(float)
    a = frank_wolfe(X, y, 5.0, 300, loss="logistic")
    b = fast_frank_wolfe(X, y, 5.0, 300, loss="logistic", refresh=1)
    assert a.path == b.path


def test_privacy_plan_and_paper_mode():
    rng = np.random.default_rng(1)
    X = sp.random(200, 50, density=0.1, random_state=2, format="csr")
    y = (rng.random(200) < 0.5).astype(float)
    seed_rule = advanced_step_epsilon(1.0, 1e-6, 100)
    # Laplace report-noisy-max: T pure eps0 steps, T eps0^2/2-zCDP, calibrated tightly
    res = frank_wolfe(X, y, 10.0, 100, selection="laplace", epsilon=1.0, delta=1e-6, random_state=3)
    assert res.privacy.eps0 > 1.5 * seed_rule
    assert res.privacy.loss.rho == pytest.approx(100 * res.privacy.eps0**2 / 2)
    assert res.privacy.true_epsilon <= 1.0 and res.privacy.loss.epsilon_at(1e-6) <= 1.0
    # the seeds' scale at their eps0 is 2 eps0 per step: its true epsilon is charged, above the target
    paper = frank_wolfe(X, y, 10.0, 100, selection="laplace", epsilon=1.0, delta=1e-6, calibration="paper")
    assert paper.privacy.eps0 == pytest.approx(seed_rule)
    assert paper.privacy.loss == PrivacyLoss.pure_steps(2 * seed_rule, 100, delta=1e-6)
    # (advanced composition would call it ~1.04; tight composition charges less)
    assert paper.privacy.true_epsilon < rnm_paper_true_epsilon(1.0, 1e-6, 100).epsilon
    # the exponential mechanism's steps are bounded-range: T eps0^2/8
    em = privacy_plan(1.0, 1e-6, 4000, "logistic", 50.0, 1.0, "exponential")
    assert em.loss.rho == pytest.approx(4000 * em.eps0**2 / 8) and em.eps0 > 4 * advanced_step_epsilon(1.0, 1e-6, 4000)
    old = privacy_plan(1.0, 1e-6, 4000, "logistic", 50.0, 1.0, "exponential", "paper")
    assert old.eps0 == pytest.approx(advanced_step_epsilon(1.0, 1e-6, 4000)) and old.true_epsilon < 0.3
    assert lipschitz("squared", 50.0, 1.0) == 51.0 and lipschitz("logistic", 50.0) == 1.0
    with pytest.raises(ParameterError, match="labels"):
        frank_wolfe(X, 3 * y, 10.0, 10)
    with pytest.raises(ParameterError, match="epsilon and delta"):
        fast_frank_wolfe(X, y, 10.0, 10, selection="exponential")


def test_exponential_vertex_distribution():
    """P(j, sigma) ∝ exp(-sigma eps0 alpha_j / (2L)) over the signed vertices."""
    rng = np.random.default_rng(4)
    alpha = np.array([3.0, -1.0, 0.5, 0.0])
    eps0, L = 1.2, 1.0
    counts = {}
    for _ in range(40000):
        j, s = exponential_vertex(alpha, eps0, L, rng)
        counts[(j, s)] = counts.get((j, s), 0) + 1
    logits = {(j, s): -s * eps0 * alpha[j] / (2 * L) for j in range(4) for s in (1.0, -1.0)}
    z = np.logaddexp.reduce(list(logits.values()))
    for key, lg in logits.items():
        assert counts.get(key, 0) / 40000 == pytest.approx(np.exp(lg - z), abs=0.01)


@pytest.mark.parametrize("selection", ["exponential", "exponential-bruteforce"])
def test_private_fast_runs_agree_in_distribution_with_standard_em(selection):
    """The first vertex of a private fast run follows the standard solver's EM (same alpha at w = 0)."""
    rng = np.random.default_rng(5)
    X = sp.random(400, 6, density=0.5, random_state=6, format="csr")
    y = (rng.random(400) < 0.7).astype(float)
    fast = [
        fast_frank_wolfe(X, y, 1.0, 1, selection=selection, epsilon=0.5, delta=1e-3, random_state=i).path[0]
        for i in range(3000)
    ]
    std = [
        frank_wolfe(X, y, 1.0, 1, selection="exponential", epsilon=0.5, delta=1e-3, random_state=10_000 + i).path[0]
        for i in range(3000)
    ]
    keys = sorted(set(fast) | set(std))
    f = np.array([fast.count(k) for k in keys]) / 3000
    s = np.array([std.count(k) for k in keys]) / 3000
    assert np.abs(f - s).max() < 0.05


def _kernel(X, y, lam, T, loss, mode, eps0, refresh):
    """The fast kernel run directly (any per-step epsilon): (path, final sampler state)."""
    _, path, state, _ = _kernel_state(X, y, lam, T, loss, mode, eps0, refresh)
    return path.tolist(), state


@pytest.mark.parametrize("eps0", [0.05, 3.0])
def test_sampler_weights_match_the_gradient_after_every_kind_of_step(rcv1, eps0):
    """After 300 steps (no refresh) every sampler weight is 2 cosh(eps0 alpha_k / 2) e^-ref of the
    kernel's current alpha, and every block sum is the sum of its block."""
    X, y = rcv1
    _, (alpha, W, c, st) = _kernel(X, y, 20.0, 300, "logistic", 1, eps0, 0)
    a = eps0 * alpha / 2
    expected = np.exp(np.logaddexp(a, -a) - st[0])
    np.testing.assert_allclose(W, expected, rtol=1e-13, atol=1e-300)
    B = 1 << block_shift(X.shape[1])
    np.testing.assert_allclose(c, np.add.reduceat(W, np.arange(0, W.size, B)), rtol=1e-12)
    assert W.max() > 1e-3  # ref stays near the top weight


@pytest.mark.parametrize("mode", [1, 2])  # BSLS, brute force
@pytest.mark.parametrize("loss,refresh", [("logistic", 0), ("logistic", 40), ("squared", 0)])
def test_private_fast_sampler_tracks_every_gradient_update(rcv1, mode, loss, refresh):
    """At a huge per-step epsilon the exponential mechanism is the argmax, so the private kernel
    must follow the non-private one step for step. This checks the sampler weight of every
    touched coordinate after every step, and the rebuilds (a_j here lies far beyond e^600)."""
    X, y = rcv1
    if loss == "squared":
        y = 2 * y - 1
    exact = fast_frank_wolfe(X, y, 20.0, 150, loss=loss, refresh=refresh).path
    assert _kernel(X, y, 20.0, 150, loss, mode, 1e7, refresh)[0] == exact


def test_private_solvers_enforce_the_bounds():
    X = sp.csr_matrix(np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    y = np.array([1.0, 0.0, 1.0])
    for solve, sel in ((frank_wolfe, "laplace"), (fast_frank_wolfe, "exponential")):
        with pytest.raises(ParameterError, match=r"\|X_ij\| <= 1"):
            solve(X, y, 1.0, 5, selection=sel, epsilon=1.0, delta=1e-6)
        with pytest.raises(ParameterError, match=r"\|y_i\| <= 0.5"):
            solve(X / 2, y, 1.0, 5, loss="squared", selection=sel, epsilon=1.0, delta=1e-6, y_bound=0.5)
    frank_wolfe(X, y, 1.0, 5)  # non-private: no bound is assumed
    for solve, sel in ((frank_wolfe, "laplace"), (fast_frank_wolfe, "exponential")):
        with pytest.raises(ParameterError, match="exact training loss"):
            solve(X / 2, y, 1.0, 5, selection=sel, epsilon=1.0, delta=1e-6, record_every=1)


_TIMER_PROBE = r"""
import json, time
import numpy as np
import scipy.sparse as sp
import dpdist.solvers.fast_fw.solver as ffw

loaded_at_timer = []
class _Clock:  # records, at each reading of the solver's clock, whether the kernel was already loaded
    @staticmethod
    def perf_counter():
        loaded_at_timer.append(len(ffw._fast_fw.overloads))
        return time.perf_counter()

ffw.time = _Clock
X = sp.random(40, 30, density=0.2, random_state=0, format="csr")
y = (np.arange(40) % 2).astype(float)
ffw.fast_frank_wolfe(X, y, 1.0, 5, selection="exponential", epsilon=1.0, delta=1e-6, refresh=2, random_state=0)
print(json.dumps(loaded_at_timer))
"""


@pytest.mark.slow
def test_kernel_is_loaded_before_the_timer():
    # a fresh process: the first fit must not time the kernel's load (~0.4 s) as iterations
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _TIMER_PROBE], capture_output=True, text=True, check=True)
    readings = json.loads(out.stdout.strip().splitlines()[-1])
    assert readings[-2] >= 1  # the solve's start time (t0) is read after the kernel was loaded


@pytest.mark.parametrize("selection", [None, "exponential"])
def test_a_given_csc_copy_gives_the_same_fit_as_converting(rcv1, selection):
    """X_csc (a store's CSC copy) replaces X.tocsc() without changing a step: same path, same weights."""
    X, y = rcv1
    kw = dict(selection=selection, epsilon=1.0 if selection else None, delta=1e-6 if selection else None, refresh=30)
    a = fast_frank_wolfe(X, y, 20.0, 300, random_state=5, **kw)
    b = fast_frank_wolfe(X, y, 20.0, 300, random_state=5, X_csc=X.tocsc(), **kw)
    assert a.path == b.path
    np.testing.assert_array_equal(a.coef, b.coef)


def test_a_csc_copy_of_another_matrix_or_out_of_bound_is_refused():
    X = sp.random(40, 30, density=0.2, random_state=0, format="csr")
    y = (np.arange(40) % 2).astype(float)
    priv = dict(selection="exponential", epsilon=1.0, delta=1e-6)
    shifted = sp.vstack([X[1:], X[:1]]).tocsc()  # the same entries in other rows
    other = X.tocsc()
    other.data[3] *= 0.5  # the same pattern, one value differs
    for bad in (X, X.tocsc()[:, :29], shifted, X.tocsc().astype(np.float32), other):
        with pytest.raises(ParameterError, match="X_csc"):
            fast_frank_wolfe(X, y, 1.0, 5, X_csc=bad, **priv)
    big = X.tocsc()
    big.data[0] = 2.0  # X itself is within the bound: the copy the kernel reads is X's, entry for entry
    with pytest.raises(ParameterError, match="X_csc is not X"):
        fast_frank_wolfe(X, y, 1.0, 5, X_csc=big, **priv)
    fast_frank_wolfe(big.tocsr(), y, 1.0, 5, X_csc=big)  # non-private: no bound is assumed
    for bad in (np.inf, np.nan):
        Xbad = X.copy()
        Xbad.data[2] = bad
        with pytest.raises(ParameterError, match="non-finite"):
            fast_frank_wolfe(Xbad, y, 1.0, 5)


def _kernel_state(X, y, lam, T, loss, mode, eps0, refresh):
    """The fast kernel run directly: coef, path, the internal state (alpha, W, c, st) and the band of
    the column passes' layout (0: never built)."""
    coef, path, _, state, band = run_kernel(X, y, lam, T, loss, mode, eps0, refresh)
    return coef, path, state, band


@pytest.mark.parametrize(
    "loss,mode,refresh,binary",
    [
        ("logistic", 0, 0, False),
        ("logistic", 0, 25, False),
        ("logistic", 1, 0, False),
        ("logistic", 1, 25, False),
        ("logistic", 1, 25, True),
        ("logistic", 2, 0, False),
        ("logistic", 3, 0, False),
        ("squared", 0, 0, False),
        ("squared", 1, 0, False),
    ],
)
def test_a_move_by_columns_is_the_move_by_rows_to_the_bit(rcv1, monkeypatch, loss, mode, refresh, binary):
    """The column-order update (_move; a column in most rows) adds the same products in the same
    order as seed 004's row order and lists the moved coordinates in the same order: the same path,
    weights, gradient and sampler state to the bit. So the choice between them, which depends on
    the data, changes only a step's time (and a mis-ordered update would fail here). The column
    passes on numba's threads (used from _PARALLEL_NNZ entries on; here forced) give the same bits.
    Binary X: the row-order copies hold no values."""
    import dpdist.solvers.fast_fw.solver as ffw
    import dpdist.solvers.fast_fw.threads as fft
    from dpdist.solvers.fast_fw.weights import _rebuilds

    X, y = rcv1
    X = X[:, np.flatnonzero(X.getnnz(axis=0))]  # the used columns: a step on a frequent one moves over D / 16
    if binary:
        X = X.copy()
        X.data[:] = 1.0
    if loss == "squared":
        y = 2 * y - 1
    runs = []
    for share, band, threshold in (
        (np.inf, ffw._ROW_BAND, fft._PARALLEL_NNZ),
        (0.0, ffw._ROW_BAND, fft._PARALLEL_NNZ),
        (0.0, 64, fft._PARALLEL_NNZ),
        (0.0, 64, 0),
        (1e9, 64, fft._PARALLEL_NNZ),
    ):
        # every step by rows; by columns; by columns with the frequent ones in bands of 64 rows; and on the
        # threads; every step by rows with the column passes on, so the layout of 64-row bands is never built
        # and the full gradients read CSC alone
        monkeypatch.setattr(ffw, "_HEAVY_SHARE", share)
        monkeypatch.setattr(ffw, "_ROW_BAND", band)
        monkeypatch.setattr(fft, "_PARALLEL_NNZ", threshold)
        heavy, _, threads = _extra_args(None, X, 300)[-3:]
        assert threads == (numba.get_num_threads() if threshold == 0 else 1)
        assert heavy == share / threads  # the column passes share the work among the threads, the row scatter not
        runs.append(_kernel_state(X, y, 20.0, 300, loss, mode, 3.0, refresh))
    # the layout is built only for g longer than a band, at the first step by columns (none in the last run)
    assert [run[3] for run in runs] == [0, 0, 64, 64, 0]
    c0, p0, s0, _ = runs[0]
    for c1, p1, s1, _ in runs[1:]:
        assert p0.tolist() == p1.tolist()
        assert np.array_equal(c0, c1)
        for a, b in zip(s0, s1) if mode in (1, 2) else [(s0[0], s1[0])]:  # alpha; the sampler state (W, c, st)
            assert np.array_equal(_bits(a), _bits(b))
    Xc = X.tocsc()
    counts = np.diff(Xc.indptr)
    assert counts[np.abs(p0) - 1].max() > X.shape[0] / 10  # the run did choose columns in many rows
    if loss == "logistic" and mode in (1, 2):  # and some step moved enough coordinates for a full rebuild
        moved = [np.unique(X[Xc.indices[Xc.indptr[j] : Xc.indptr[j + 1]]].indices).size for j in np.abs(p0) - 1]
        assert any(_rebuilds(m, X.shape[1]) for m in moved)


def test_the_checks_passes_on_threads_match_one_thread(rcv1, monkeypatch):
    """X^T y and the CSR/CSC entry digests of the fit's checks: the threaded builds in several runs
    of columns (or rows) give what the serial build gives in one, X^T y to the bit as scipy's
    X.T @ y, and the digests are equal for X's two forms and differ for a copy with its rows
    shifted or two values of one row swapped; ``_threaded`` picks the threads from _PARALLEL_NNZ."""
    import dpdist.solvers.fast_fw.checks as ffw
    import dpdist.solvers.fast_fw.threads as fft

    X, y = rcv1
    Xc = X.tocsc()
    shifted = sp.vstack([X[1:], X[:1]]).tocsr()
    swapped = X.copy()
    row = next(
        i
        for i in range(X.shape[0])
        if X.indptr[i + 1] - X.indptr[i] >= 2 and X.data[X.indptr[i]] != X.data[X.indptr[i] + 1]
    )
    swapped.data[X.indptr[row] : X.indptr[row] + 2] = swapped.data[X.indptr[row] : X.indptr[row] + 2][::-1].copy()
    cols = (Xc.indptr.astype(np.int64), Xc.indices, Xc.data)
    want = _bits(X.T @ y)
    assert np.array_equal(_bits(ffw._dots_serial(*cols, y, 1)), want)
    digests = [
        ffw._digest_serial(M.indptr.astype(np.int64), M.indices, M.data, by_rows, 1)
        for M, by_rows in ((X, True), (Xc, False), (shifted, True), (swapped, True))
    ]
    assert digests[0] == digests[1] and digests[0] not in digests[2:]
    for parts in (1, 3, 16):
        assert np.array_equal(_bits(ffw._dots_parallel(*cols, y, parts)), want)
        assert ffw._digest_parallel(X.indptr.astype(np.int64), X.indices, X.data, True, parts) == digests[0]
        assert ffw._digest_parallel(*cols, False, parts) == digests[0]
    for threshold in (fft._PARALLEL_NNZ, 0):  # the dispatch: one thread below the threshold, all from it
        monkeypatch.setattr(fft, "_PARALLEL_NNZ", threshold)
        assert np.array_equal(_bits(ffw._threaded(ffw._dots_serial, ffw._dots_parallel, X.nnz, *cols, y)), want)
        assert ffw._digest(X, True) == ffw._digest(Xc, False) == digests[0]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_never_runs_the_column_passes_on_threads():
    """GNU OpenMP (numba's threading layer on Linux) terminates a forked child that enters a
    parallel region after its parent used one: a forked child keeps the passes serial."""
    import dpdist.solvers.fast_fw.threads as ffw

    big = ffw._PARALLEL_NNZ
    assert ffw._threads(big - 1) == 1
    assert ffw._threads(big) == numba.get_num_threads()
    pid = os.fork()
    if pid == 0:  # the child: report by exit code only, and leave without pytest's teardown
        os._exit(0 if ffw._threads(big) == 1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ffw._threads(big) == numba.get_num_threads()  # the parent is unchanged


def test_a_matrix_with_repeated_or_unsorted_entries_is_fitted_as_its_canonical_form(rcv1):
    """Both update orders assume sorted rows without repeats: X is made canonical on a copy (the
    caller's matrix is left as it was)."""
    X, y = rcv1
    X = X[:300]
    coo = X.tocoo()
    rows, cols, vals = np.tile(coo.row, 2), np.tile(coo.col, 2), np.tile(coo.data / 2, 2)  # each entry twice, halved
    order = np.lexsort((np.random.default_rng(0).random(rows.size), rows))  # by row, unsorted within a row
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=X.shape[0]))])
    dup = sp.csr_matrix((vals[order], cols[order], indptr), shape=X.shape)
    assert not dup.has_canonical_format
    before = dup.data.copy()
    kw = dict(selection="exponential", epsilon=2.0, delta=1e-6, refresh=20, random_state=3)
    a = fast_frank_wolfe(X, y[:300], 20.0, 200, **kw)
    b = fast_frank_wolfe(dup, y[:300], 20.0, 200, **kw)
    assert a.path == b.path
    assert np.array_equal(a.coef, b.coef)  # the halves sum back exactly
    assert np.array_equal(dup.data, before) and dup.nnz == 2 * X.nnz


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_move_by_rows_and_by_columns_agree_on_every_output(loss):
    """_move itself, on every column (one empty, explicit zeros stored, rows whose derivative is
    saturated so their step moves nothing): the same vbar, q, alpha/beta to the bit (signed zeros
    included), the same moved coordinates in the same order, and its scratch buffers left clean."""
    from dpdist.solvers.fast_fw.layout import _column_layout
    from dpdist.solvers.fast_fw.move import _move
    from dpdist.solvers.fast_fw.state import Config, Data, Iterate, Scratch
    from dpdist.solvers.fast_fw.weights import _rebuilds

    rng = np.random.default_rng(4)
    n, D = 60, 40
    X = sp.random(n, D, density=0.3, random_state=2, format="csr")
    X.data = np.round(rng.uniform(-1, 1, X.nnz), 1)  # about 1 in 20 is an explicit 0.0
    X = (X @ sp.diags((np.arange(D) != 7).astype(float))).tocsr()
    X.eliminate_zeros()
    X.data[::17] = 0.0  # explicit zeros stored as entries
    X.sort_indices()
    Xc = X.tocsc()
    Xc.sort_indices()
    assert Xc.indptr[8] == Xc.indptr[7]  # column 7 is empty
    y = (rng.random(n) < 0.5).astype(float)
    logistic = loss == "logistic"
    vbar0 = rng.normal(0, 3, n)
    vbar0[::5] = 800.0  # sigmoid saturated at 1: a move of these rows leaves q as it is
    q0 = np.array([1 / (1 + np.exp(-v)) - t for v, t in zip(vbar0, y)]) if logistic else np.zeros(n)
    args = (*sparse_arrays(X, Xc), y, logistic, False, 1.0)
    lay = _column_layout(*args[:3], args[3], args[5], 30, 1)  # bands of 30 rows: the rare columns through the tiles
    assert lay[1].size > 0 and lay[9].size > 0  # frequent columns by rows and rare ones through the tiles
    unlisted = 0
    for j, ordered in itertools.product(range(D), (True, False)):
        out = []
        for heavy in (np.inf, 0.0):
            vbar, q, alpha, beta = vbar0.copy(), q0.copy(), np.arange(D) / 7, np.arange(D) / 3.0
            mark, touched = np.zeros(D, dtype=np.uint8), np.full(D + 1, -1, dtype=np.int64)
            gbuf, fcol, nfirst = np.zeros(n), np.full(D, -1, dtype=np.int64), np.zeros(n + 1, dtype=np.int64)
            data = Data(*args[:7], np.zeros(D), np.zeros((0, 0)))
            cfg = Config(
                1.0, 1, logistic, 0, 1.0, 1.0, 0.5, 0, 0, 0, heavy, 30, 1, False
            )  # args[7:9]: logistic, no Gram
            it, buf = Iterate(np.zeros(D), vbar, alpha, q, beta), Scratch(mark, touched, gbuf, fcol, nfirst)
            m = _move(j, 0.37, data, cfg, args[9], it, buf, ordered, lay)
            assert not mark.any() and not gbuf.any()
            out.append((m, touched[:m].copy(), vbar, q, alpha, beta))
        (m0, t0, *s0), (m1, t1, *s1) = out
        assert m0 == m1, j
        # unordered, a column pass that moved enough to rebuild lists nothing: the sampler rebuilds every weight
        if ordered or not _rebuilds(m0, D):
            assert t0.tolist() == t1.tolist(), j
        else:
            unlisted += 1
            assert (t1 == -1).all(), j
        for a, b in zip(s0, s1):
            assert np.array_equal(_bits(a), _bits(b)), j
    assert unlisted > 0 or not logistic


@pytest.mark.parametrize("band,binary", [(64, False), (200, False), (500, False), (200, True), (200, "frequent")])
def test_column_sums_from_the_row_order_copies_are_the_single_pass_to_the_bit(band, binary):
    """_by_columns with g longer than a band of rows (as on KDDA's 6.7M rows: the frequent columns
    summed from their row-order copy, the rare ones from their tiles, :func:`_column_layout`)
    against one pass over each column's CSC entries (g in one band): the same sums to the bit and
    the same moved coordinates in the same order. The threaded builds of the passes (used from
    _PARALLEL_NNZ entries on) give the serial ones' bits and counts (with one numba thread they
    run serially, and the serial checks still hold). Binary X: the copies (frequent columns, tiles)
    hold no values (each is 1); "frequent": only the frequent columns are binary, only their copy
    holds none."""
    from dpdist.solvers.fast_fw.columns import _by_columns, _hot_parallel, _hot_serial, _tiled_parallel, _tiled_serial
    from dpdist.solvers.fast_fw.layout import _column_layout

    rng = np.random.default_rng(band)
    n, D = 3000, 160
    dens = np.concatenate([rng.uniform(0.3, 0.95, 20), rng.uniform(0.0, 0.05, D - 30), np.zeros(10)])
    dens = dens[rng.permutation(D)]  # a few columns in most rows, most in a few, some in none, mixed
    X = sp.csc_matrix((rng.random((n, D)) < dens) * (1.0 if binary is True else rng.uniform(-1, 1, (n, D))))
    if binary == "frequent":
        X.data[np.repeat(np.diff(X.indptr) >= 8 * -(-n // band), np.diff(X.indptr))] = 1.0
    ptr, idx = X.indptr.astype(np.int64), X.indices.astype(np.int32)
    Xr = X.tocsr()
    rows = (Xr.indptr.astype(np.int64), Xr.indices.astype(np.int32), Xr.data)
    g = rng.normal(size=n) * (rng.random(n) < 0.7)  # rows whose derivative did not move: g = 0
    start = rng.normal(size=D)
    out = []
    for b, threads in ((band, 1), (band, 2), (n, 1), (n, 2)):
        target = start.copy()
        fcol, nfirst, touched = np.full(D, -1, np.int64), np.zeros(n + 1, np.int64), np.full(D + 1, -1)
        lay = _column_layout(*rows, ptr, X.data, b, threads)
        m = _by_columns(ptr, idx, X.data, g, target, fcol, nfirst, touched, 1, lay, threads)
        out.append((m, touched[:m].tolist(), _bits(target), fcol))
    for o in out[1:]:
        assert (
            o[0] == out[0][0]
            and o[1] == out[0][1]
            and np.array_equal(o[2], out[0][2])
            and np.array_equal(o[3], out[0][3])
        )
    assert not np.array_equal(out[0][2], _bits(start))  # the sums moved
    _, hot, hbounds, hptr, h_col, h_val, rc, bounds, tptr, e_row, e_col, e_val, acc, fc = lay = _column_layout(
        *rows, ptr, X.data, band, 2
    )
    counts = np.diff(ptr)
    min_count = 8 * -(-n // band)
    assert hot.tolist() == np.flatnonzero(counts >= min_count).tolist()
    assert rc.tolist() == np.flatnonzero((counts > 0) & (counts < min_count)).tolist()
    assert h_col.size == counts[hot].sum() and e_row.size == counts[rc].sum()  # every entry once
    assert h_val.size == (0 if binary else h_col.size) and e_val.size == (0 if binary is True else e_row.size)
    assert hbounds.size == 3 and bounds.size > 3  # two ranges of frequent columns, several of rare ones
    lean = _column_layout(*rows, ptr, X.data, band, 64)  # 64 threads: as many ranges as their row pointers
    assert lean[2].size - 1 == counts[hot].sum() // (4 * (n + 1)) < 64  # fit in half the copy's memory
    assert lean[3].size * 8 <= lean[4].size * 4 / 2 and lean[7].size - 1 >= 8 * 64  # the tiles: 8 ranges a thread
    builds = []
    for hot_sums, tiled in ((_hot_serial, _tiled_serial), (_hot_parallel, _tiled_parallel)):
        target, fcol = start.copy(), np.full(D, -1, dtype=np.int64)
        moved = hot_sums(ptr, idx, g, target, fcol, *lay[1:6], acc) + tiled(g, target, fcol, *lay[6:])
        builds.append((_bits(target), fcol, moved))
    for t, f, moved in builds:
        assert np.array_equal(t, out[0][2]) and np.array_equal(f, out[0][3]) and moved == out[0][0]
    assert out[0][0] == (out[0][3] >= 0).sum()
    # the frequent columns went by rows, the rare ones by tiles, the empty ones neither (fcol stays -1)
    assert hot.size >= 10 and rc.size >= 30 and hot.size + rc.size == D - (counts == 0).sum() <= D - 10


def test_the_fast_kernel_is_cached_reads_nothing_out_of_bounds_and_prefetches(tmp_path):
    """One build of the kernel (~30 s), in processes with a numba cache of their own and numba's
    bounds checks on (``NUMBA_BOUNDSCHECK=1``), checked three ways:

    * cached on disk: a second process loads the kernel (and every numba function it calls)
      instead of compiling it again. A call of ``numba.get_num_threads`` anywhere below it makes
      numba refuse to cache (a ctypes pointer), which this fails on.
    * no index past an array: with the checks an out-of-bounds index raises IndexError instead of
      reading what lies there. The first process runs fits whose moves all go by rows (the row pass
      with its look-ahead cursor: ``_HEAVY_SHARE`` = inf) and all by columns (0): logistic loss with
      the sampler and with the queue, at a lam that saturates the sigmoid (rows whose derivative
      does not move are skipped, and so is their stretch of the cursor), squared loss with and
      without the Gram matrix, on a matrix with empty rows and columns.
    * prefetch instructions, counted in the first process (numba shows no assembly of a kernel
      loaded from its cache): the row pass of a move and the re-weighting of the moved coordinates
      ask for their scattered loads ahead (``dpdist.utils.prefetch``; their only effect is speed,
      measured in benchmarks/fw_prefetch.py: this fails if the hints are dropped from either)."""
    prefetch = r"\bprefetch\w*|\bprfm\b"  # x86: prefetcht0 / prefetchw; ARM: prfm

    code = (
        "import re, numpy as np, scipy.sparse as sp\n"
        "import dpdist.solvers.fast_fw.solver as ffw\n"
        "import dpdist.solvers.fast_fw.move as ffm\n"
        "import dpdist.solvers.fast_fw.weights as ffe\n"
        "X = sp.random(300, 40, density=0.2, format='csr', random_state=0)\n"
        "ffw.fast_frank_wolfe(X, (np.arange(300) % 2).astype(float), 1.0, 20, selection='exponential',\n"
        "                     epsilon=1.0, delta=1e-6, refresh=5)\n"
        "hits, misses = sum(ffw._fast_fw.stats.cache_hits.values()), sum(ffw._fast_fw.stats.cache_misses.values())\n"
        "def count(f):\n"
        "    asm = '\\n'.join(f.inspect_asm().values()) if misses else ''\n"
        f"    return len(re.findall({prefetch!r}, asm, re.IGNORECASE))\n"
        "skipped = 0\n"
        "X = sp.random(400, 300, density=0.01, format='csr', random_state=1)\n"
        "assert (np.diff(X.indptr) == 0).any() and (np.diff(X.tocsc().indptr) == 0).any()\n"
        "y = (np.arange(400) % 2).astype(float)\n"
        "for share in (np.inf, 0.0) if misses else ():\n"
        "    ffw._HEAVY_SHARE = share\n"
        "    for lam in (1.0, 1e4):\n"
        "        ffw.fast_frank_wolfe(X, y, lam, 60, selection='exponential', epsilon=1.0, delta=1e-6,\n"
        "                             refresh=7, random_state=0)\n"
        "        r = ffw.fast_frank_wolfe(X, y, lam, 60, random_state=0)\n"
        "        skipped += int((np.abs(X @ r.coef) > 40).sum())\n"
        "    ffw.fast_frank_wolfe(X, y / 2, 1.0, 60, loss='squared', selection='exponential', epsilon=1.0,\n"
        "                         delta=1e-6, random_state=0)\n"
        "    ffw.fast_frank_wolfe(X, y / 2, 1.0, 60, loss='squared', gram=True, random_state=0)\n"
        "print(hits, misses, count(ffm._move), count(ffe._reweight), skipped)\n"
    )
    # a cache of their own (the first process compiles), the bounds checks in both (one build)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_BOUNDSCHECK": "1"}
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-3000:] + runs[1].stderr[-3000:]
    first, second = ([int(v) for v in r.stdout.split()] for r in runs)
    assert first[:2] == [0, 1] and second[:2] == [1, 0], (first, second, runs[1].stderr[-2000:])
    # _move: alpha and mark (logistic), beta (squared), vbar, qbar and r_idx of a later row; _reweight: alpha, W
    assert first[2] >= 6 and first[3] >= 2, f"prefetch instructions in _move, _reweight: {first[2:4]}"
    assert first[4] > 0  # some margins past 40: their sigmoid is 0 or 1, their rows skipped


def test_the_look_ahead_cursor_visits_the_rows_of_a_column_in_the_moves_order():
    """:func:`dpdist.solvers.fast_fw.move._ahead` walks the entries of column j's rows in the order the row pass
    reads them (row after row of column j, each row's entries in order), then stays past the end."""
    rng = np.random.default_rng(3)
    X = sp.random(60, 30, density=0.2, format="csr", random_state=4)
    X.data[:] = 1.0
    Xc = X.tocsc()
    for j in rng.permutation(30)[:12]:
        p0, p1 = Xc.indptr[j], Xc.indptr[j + 1]
        expected = [pp for p in range(p0, p1) for pp in range(X.indptr[Xc.indices[p]], X.indptr[Xc.indices[p] + 1])]
        seen, ap, app, astop = [], p0, 0, 0
        if p0 < p1:
            app, astop = X.indptr[Xc.indices[p0]], X.indptr[Xc.indices[p0] + 1]
        while ap < p1:
            seen.append(app)
            ap, app, astop = _ahead(X.indptr, Xc.indices, p1, ap, app, astop, 1)
        assert seen == expected
        assert _ahead(X.indptr, Xc.indices, p1, ap, app, astop, 1)[0] == p1  # past the end it stays there
        # several entries at once (the start _AHEAD on, a skipped row): as many single steps
        for start in range(0, len(expected), 3):
            for steps in (0, 1, 2, 5, 64, len(expected)):
                row = next(
                    p for p in range(p0, p1) if X.indptr[Xc.indices[p]] <= expected[start] < X.indptr[Xc.indices[p] + 1]
                )
                cur = (row, expected[start], X.indptr[Xc.indices[row] + 1])
                one = cur
                for _ in range(steps):
                    one = _ahead(X.indptr, Xc.indices, p1, *one, 1)
                many = _ahead(X.indptr, Xc.indices, p1, *cur, steps)
                assert many[0] == one[0] and (many[0] == p1 or many[1:] == one[1:]), (start, steps)


@pytest.mark.parametrize("D", [1, 1000, 40_001])
def test_sampler_weights_in_runs_of_blocks_are_the_serial_ones_to_the_bit(D):
    """The sampler's rebuild from alpha (every refresh, and a step on a column in most rows) in runs
    of whole blocks, serial or on numba's threads: the same weights, block sums, error bounds and
    reference to the bit as one run."""
    from dpdist.solvers.fast_fw.weights import _log2cosh, _weights_parallel, _weights_serial

    rng = np.random.default_rng(D)
    alpha = rng.normal(0, 50, D) * (rng.random(D) < 0.8)
    shift = block_shift(D)
    out = []
    for build, parts in ((_weights_serial, 1), (_weights_serial, 7), (_weights_parallel, 16), (_weights_parallel, 3)):
        W, bits = np.full(D, np.nan), np.zeros(D, dtype=np.int64)
        c = np.full((D + (1 << shift) - 1) >> shift, np.nan)
        err, st, xbuf = np.full_like(c, np.nan), np.zeros(2), np.zeros(D)
        build(alpha, 0.37, W, c, err, st, shift, xbuf, bits, parts)
        assert st[0] == _log2cosh(0.37 * np.abs(alpha).max())  # the reference: the largest weight's
        out.append([_bits(a) for a in (W, c, err, st)])
    assert np.isfinite(out[0][0].view(np.float64)).all() and (out[0][1].view(np.float64) > 0).all()
    for o in out[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(o, out[0]))


@pytest.mark.parametrize("selection,loss", [("exponential", "logistic"), (None, "logistic"), (None, "squared")])
def test_float32_values_take_the_steps_of_the_float64_matrix_of_the_same_values(rcv1, monkeypatch, selection, loss):
    """float32 X and X_csc are held as they are (half the memory of their values: Webspam's train
    half needs it); every product and sum is taken in float64 after an exact conversion, so the fit
    is the float64 fit of the same values to the bit: by rows, by columns and from the row-order copies."""
    import dpdist.solvers.fast_fw.solver as ffw

    X, y = rcv1
    X32 = X[:, np.flatnonzero(X.getnnz(axis=0))].astype(np.float32)
    X64 = X32.astype(np.float64)
    if loss == "squared":
        y = 2 * y - 1
    kw = dict(
        loss=loss,
        selection=selection,
        epsilon=3.0 if selection else None,
        delta=1e-6 if selection else None,
        refresh=25 if loss == "logistic" else 0,
    )
    for share, band in ((np.inf, ffw._ROW_BAND), (0.0, ffw._ROW_BAND), (0.0, 64)):
        monkeypatch.setattr(ffw, "_HEAVY_SHARE", share)
        monkeypatch.setattr(ffw, "_ROW_BAND", band)
        a = fast_frank_wolfe(X64, y, 20.0, 200, random_state=5, **kw)
        b = fast_frank_wolfe(X32, y, 20.0, 200, random_state=5, X_csc=X32.tocsc(), **kw)
        assert a.path == b.path and len(set(a.path)) > 5
        assert np.array_equal(a.coef, b.coef)
        mode = 1 if selection else 0  # the kernel's state after the run: alpha (and the sampler's W, c, st)
        (c64, p64, s64, _), (c32, p32, s32, _) = (
            _kernel_state(M, y, 20.0, 200, loss, mode, 3.0, kw["refresh"]) for M in (X64, X32)
        )
        assert p64.tolist() == p32.tolist() and np.array_equal(c64, c32)
        for u, v in zip(s64, s32) if mode else [(s64[0], s32[0])]:
            assert np.array_equal(_bits(u), _bits(v))


def test_a_float32_fit_makes_no_float64_copy_of_the_values(rcv1):
    """The estimator and the solver keep float32 X and X_csc: the fit's allocations stay below one
    float64 copy of the values (before, both were converted: 2 x 12 bytes an entry)."""
    import tracemalloc

    from dpdist.linear_model import DPFrankWolfeClassifier

    X, y = rcv1
    X32 = sp.vstack([X] * 40).tocsr().astype(np.float32)  # 3.1M entries: a float64 copy of the values is 25 MB
    Xc = X32.tocsc()
    y8 = np.tile(y, 40)
    est = DPFrankWolfeClassifier(
        epsilon=1.0, delta=1e-6, lam=10.0, max_iter=20, method="fast-dp-fw", classes=[0.0, 1.0], random_state=1
    )
    est.fit(X32[:100], y8[:100], X_csc=X32[:100].tocsc())  # the float32 kernels compiled outside the measurement
    tracemalloc.start()
    est.fit(X32, y8, X_csc=Xc)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * X32.nnz, (peak, X32.nnz)  # the solver's O(n + D) state: ~ 7 MB
    with pytest.raises(ParameterError, match="X_csc must be a float32 CSC"):
        fast_frank_wolfe(X32, y8, 10.0, 5, X_csc=Xc.astype(np.float64))


def test_standard_dp_fw_on_float32_values_is_the_float64_run_of_the_same_values(rcv1):
    """Alg. 1 keeps float32 X too (its products in float64, without scipy's float64 copy of the values
    an iteration): the same path and weights as the float64 matrix of the same values."""
    X, y = rcv1
    X32 = X[:400].astype(np.float32)
    a = frank_wolfe(
        X32.astype(np.float64), y[:400], 10.0, 60, selection="laplace", epsilon=2.0, delta=1e-6, random_state=4
    )
    b = frank_wolfe(X32, y[:400], 10.0, 60, selection="laplace", epsilon=2.0, delta=1e-6, random_state=4)
    assert a.path == b.path and np.array_equal(a.coef, b.coef)


def test_standard_fw_margins_on_float32_values_are_those_of_the_float64_values(rcv1, monkeypatch):
    """Alg. 1 on float32 values keeps its margins X w (updated column by column) as the float64
    run of the same values does, to the bit: the updates are taken in float64."""
    import dpdist.solvers.frank_wolfe as fw

    X, y = rcv1
    X32 = X[:400].astype(np.float32)
    seen: list[np.ndarray] = []
    real = fw.derivative
    monkeypatch.setattr(fw, "derivative", lambda loss, m, yy: (seen.append(m.copy()), real(loss, m, yy))[1])
    a = frank_wolfe(
        X32.astype(np.float64), y[:400], 10.0, 60, selection="laplace", epsilon=2.0, delta=1e-6, random_state=4
    )
    m64, seen[:] = list(seen), []
    b = frank_wolfe(X32, y[:400], 10.0, 60, selection="laplace", epsilon=2.0, delta=1e-6, random_state=4)
    assert a.path == b.path and len(seen) == len(m64) == 60
    assert all(np.array_equal(_bits(u), _bits(v)) for u, v in zip(m64, seen))


@pytest.mark.parametrize("columns", [1, 3, 7, 64])
def test_column_norms_by_ranges_are_the_whole_array_sums_to_the_bit(monkeypatch, columns):
    """column_norms sums a range of columns at a time (no X-sized temporary) and gives the bits of
    one np.add.reduceat over the whole array: numpy's pairwise sums group a segment by its length,
    so a range's last column must not take a term more (the appended 0) unless it is X's last."""
    import dpdist.solvers.frank_wolfe as fw

    monkeypatch.setattr(fw, "_NORM_COLUMNS", columns)
    for s in range(60):
        rng = np.random.default_rng(s)
        X = sp.random(
            300, int(rng.integers(1, 80)), density=float(rng.uniform(0.02, 0.6)), random_state=s, format="csc"
        )
        X.data = rng.normal(size=X.nnz)
        whole = np.sqrt(np.add.reduceat(np.append(X.data**2, 0.0), X.indptr[:-1]) * (np.diff(X.indptr) > 0))
        assert np.array_equal(_bits(whole), _bits(fw.column_norms(X)))


def test_the_row_order_copies_of_float32_values_are_float32(rcv1):
    """_column_layout copies X's values in X's own dtype (float64 copies would take 8 bytes an entry
    where float32 X saves 4)."""
    import dpdist.solvers.fast_fw.layout as ffw

    X, _ = rcv1
    X32 = X.astype(np.float32)
    Xc = X32.tocsc()
    lay = ffw._column_layout(
        X32.indptr.astype(np.int64), X32.indices, X32.data, Xc.indptr.astype(np.int64), Xc.data, 64, 1
    )
    assert lay[5].dtype == lay[11].dtype == np.float32 and lay[5].size + lay[11].size == X32.nnz
