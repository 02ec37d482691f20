"""Small seed-002 instances (p <= 12) shared by the brute-force tests."""

from __future__ import annotations

import numpy as np

from dpdist.data.synthetic import make_synthetic
from dpdist.selection.best_subset.objective import make_problem


def bss_data(seed: int, n: int, p: int, s: int, hinge: bool = False) -> tuple[np.ndarray, np.ndarray]:
    X, y = make_synthetic("bss", seed, n=n, d=p, s=s, hinge=hinge).materialize()
    return X.toarray(), y


def small_problem(loss: str, seed: int, p: int = 12, s: int = 3, n: int = 300, **kw):
    X, y = bss_data(seed, n, p, s, hinge=loss == "hinge")
    params = {"r": 1.1, "ridge": 5.0, "x_bound": 0.5, "y_bound": 0.5, **kw}
    return make_problem(X, y, s, loss=loss, bounds="clip", **params)
