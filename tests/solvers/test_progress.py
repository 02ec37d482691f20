"""Solver progress: ``progress(done, max_iter)`` for the operator's display (issue 17), and the
``dpdist train`` progress bar on a terminal (quiet with --json or without a terminal)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from terminal import on_a_terminal

from dpdist.solvers.fast_fw import fast_frank_wolfe
from dpdist.solvers.frank_wolfe import frank_wolfe


def _problem(n: int = 300, d: int = 40) -> tuple[sp.csr_matrix, np.ndarray]:
    rng = np.random.default_rng(0)
    X = sp.random(n, d, density=0.2, random_state=rng, format="csr")
    X.data = np.clip(X.data, 0.0, 1.0)
    y = (X @ rng.normal(size=d) > 0).astype(np.float64)
    return X, y


@pytest.mark.parametrize("selection", [None, "exponential"])
def test_fast_solver_reports_completed_iterations_and_the_same_solution(selection):
    X, y = _problem()
    kw = dict(selection=selection, epsilon=1.0 if selection else None, delta=1e-6 if selection else None)
    seen: list[tuple[int, int]] = []
    watched = fast_frank_wolfe(X, y, 5.0, 3000, random_state=3, progress=lambda d, t: seen.append((d, t)), **kw)
    plain = fast_frank_wolfe(X, y, 5.0, 3000, random_state=3, **kw)
    assert seen and seen[-1] == (3000, 3000)
    assert all(t == 3000 for _, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # never goes back
    np.testing.assert_array_equal(watched.coef, plain.coef)
    assert watched.path == plain.path


def test_standard_solver_reports_every_iteration():
    X, y = _problem()
    seen: list[int] = []
    frank_wolfe(X, y, 5.0, 25, progress=lambda d, t: seen.append(d))
    assert seen == list(range(1, 26))


def test_an_error_in_the_watched_kernel_reaches_the_caller():
    from dpdist.solvers.fast_fw.solver import _run_watched

    def kernel(x):
        raise ValueError(f"bad {x}")

    with pytest.raises(ValueError, match="bad 7"):
        _run_watched(kernel, (7,), np.zeros(1, dtype=np.int64), 10, lambda d, t: None)


_FW = ("--method", "fast-fw", "--loss", "logistic", "--lam", "5", "--iters", "20000", "--non-private")


def _train_on_a_terminal(store: str, *extra: str, method: tuple[str, ...] = _FW) -> str:
    """``dpdist train`` with stderr (and stdout) on a pseudo-terminal: what the terminal shows."""
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    argv = [sys.executable, "-m", "dpdist.cli", "train", store, *method, "--test-fraction", "0", *extra]
    return on_a_terminal(argv, env)


@pytest.fixture()
def store(tmp_path) -> str:
    from dpdist.data.store import write_store

    X, y = _problem(2000, 300)
    write_store(
        tmp_path / "s", X, np.where(y > 0, 1.0, -1.0), metadata={"name": "p"}, task="binary", labels=[-1.0, 1.0]
    )
    return str(tmp_path / "s")


def test_train_shows_an_iteration_bar_on_a_terminal_only(store):
    shown = _train_on_a_terminal(store)
    assert "fast-fw: iterations" in shown and "20000/20000" in shown
    quiet = _train_on_a_terminal(store, "--json")
    assert "fast-fw: iterations" not in quiet and "/20000" not in quiet and '"iterations": 20000' in quiet


def test_a_gradient_learner_shows_its_steps_on_a_terminal_only(store, tmp_path):
    """The gradient learners' step bar (DP-SGD here), on a terminal and not with --json."""
    from dpdist.cli import main

    ledger = tmp_path / "ledger.sqlite"
    assert main(["budget", "init", store, "--epsilon", "10", "--delta", "1e-5", "--ledger", str(ledger)]) == 0
    private = ("--method", "dp-sgd", "--epsilon", "1", "--ledger", str(ledger))
    shown = _train_on_a_terminal(store, method=private)
    # --epsilon 1 is the command's whole spend: the model 0.99, its record count 0.01
    assert "dp-sgd: steps" in shown and "charged epsilon=0.99" in shown and "epsilon=0.01 for its record count" in shown
    quiet = _train_on_a_terminal(store, "--json", "--fresh", method=private)
    assert "dp-sgd: steps" not in quiet and '"replayed": false' in quiet
