"""Held-out evaluation of released models: metrics and iterates rebuilt from the vertex path."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dpdist.evaluation import model_metrics, path_losses, sparse_coef, support_recall
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
    clf = DPFrankWolfeClassifier(epsilon=2.0, delta=1e-6, lam=5.0, max_iter=200, method="fast-dp-fw",
                                 random_state=1).fit(X, y)
    its, losses = path_losses("binary", clf.path_, 5.0, X, y, points=20)
    assert its[-1] == 200 and len(its) == len(losses)
    final = mean_loss("logistic", X @ clf.coef_, (y > 0).astype(float))
    assert np.isclose(losses[-1], final, rtol=1e-9)  # the path determines w_T exactly


def test_metrics_and_sparse_coef() -> None:
    X, y = _data(seed=2)
    reg = DPFrankWolfeRegressor(lam=2.0, max_iter=100, method="fw").fit(X, y * 0.5)
    nz = np.flatnonzero(reg.coef_)
    w = sparse_coef(nz.tolist(), reg.coef_[nz].tolist(), X.shape[1])
    assert np.array_equal(w, reg.coef_)
    m = model_metrics("regression", w, X, y * 0.5)
    assert np.isclose(m["mse"], np.mean((X @ w - y * 0.5) ** 2))
    c = model_metrics("binary", w, X, y)
    assert set(c) == {"accuracy", "auc", "log_loss"} and 0.5 < c["auc"] <= 1.0
    assert support_recall([1, 2, 9], [1, 2, 3, 4]) == 0.5 and support_recall([1], None) is None
