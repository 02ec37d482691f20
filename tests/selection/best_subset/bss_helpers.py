"""Small [DPBSS25] instances (p <= 12) shared by the brute-force tests, and a SCIP tree in numerical trouble."""

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


class Troubled:
    """A solved SCIP model that reports ``status`` (numerical trouble) instead of its own."""

    def __init__(self, model, status: str) -> None:
        self._model, self._status = model, status

    def getStatus(self) -> str:
        return self._status

    def __getattr__(self, name):
        return getattr(self._model, name)


def trouble_on_first_attempt(monkeypatch, status: str = "unknown", trees: int = 1) -> list[int]:
    """Make every master's first ``trees`` trees end in ``status``; returns the attempts made."""
    from dpdist.selection.best_subset import oa as oa_module

    real, attempts = oa_module._attempt, []

    def flaky(*args):
        m, z, handler = real(*args)
        attempts.append(args[-1])
        return (Troubled(m, status) if args[-1] < trees else m), z, handler

    monkeypatch.setattr(oa_module, "_attempt", flaky)
    return attempts
