"""Held-out evaluation of released models and selections.

Everything here is computed from a released model (its weights or its signed vertex path)
and *held-out* rows. Like the seeds' tables and ``dpdist train``, the metrics are not noised:
they describe the test rows, which an analyst evaluating on private data must count as
part of what is published (see README, "What is released").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.metrics import roc_auc_score

from dpdist.exceptions import ParameterError
from dpdist.solvers.frank_wolfe import mean_loss

__all__ = ["sparse_coef", "model_metrics", "path_losses", "support_recall"]


def sparse_coef(indices: list[int], values: list[float], n_features: int) -> np.ndarray:
    """A dense weight vector from a released (indices, values) record."""
    w = np.zeros(int(n_features))
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n_features):
        raise ParameterError(f"weight indices fall outside 0..{n_features - 1}")
    w[idx] = values
    return w


def model_metrics(task: str, w: np.ndarray, X: sp.spmatrix, y: np.ndarray) -> dict[str, float]:
    """Held-out metrics: accuracy, AUC and log-loss (binary, y in {-1, +1}) or MSE (regression)."""
    margins = np.asarray(X @ w).ravel()
    y = np.asarray(y, dtype=np.float64)
    if task == "regression":
        return {"mse": float(np.mean((margins - y) ** 2))}
    pos = y > 0
    out = {"accuracy": float(np.mean((margins > 0) == pos)), "log_loss": mean_loss("logistic", margins, pos)}
    out["auc"] = float(roc_auc_score(pos, margins)) if 0 < pos.sum() < pos.size else float("nan")
    return out


def path_losses(task: str, path: list[int], lam: float, X: sp.spmatrix, y: np.ndarray,
                points: int = 50) -> tuple[list[int], list[float]]:
    """Held-out mean loss of the Frank-Wolfe iterates w_t rebuilt from the signed vertex path.

    w_t = (1 - eta_t) w_{t-1} + eta_t lam s_t with eta_t = 2/(t+2) (seed 004 Alg. 1/2), so the
    path of private selections determines every iterate; the held-out margins follow it in
    O(nnz of the selected column) per step.
    """
    Xc = sp.csc_matrix(X)
    y = np.asarray(y, dtype=np.float64)
    loss = "squared" if task == "regression" else "logistic"
    target = y if loss == "squared" else (y > 0).astype(np.float64)
    T = len(path)
    marks = set(np.unique(np.geomspace(1, max(T, 1), points).astype(np.int64)).tolist()) | {T}
    margins = np.zeros(Xc.shape[0])
    its, losses = [], []
    for t, v in enumerate(path, start=1):
        eta = 2.0 / (t + 2.0)
        j, sigma = abs(int(v)) - 1, (1.0 if v > 0 else -1.0)
        margins *= 1.0 - eta
        lo, hi = Xc.indptr[j], Xc.indptr[j + 1]
        margins[Xc.indices[lo:hi]] += eta * sigma * lam * Xc.data[lo:hi]
        if t in marks:
            its.append(t)
            losses.append(mean_loss(loss, margins, target))
    return its, losses


def support_recall(selected: list[int], true_support: list[int] | None) -> float | None:
    """Fraction of the true support (known for synthetic sets) among the selected features."""
    if not true_support:
        return None
    return float(len(set(selected) & set(true_support)) / len(true_support))
