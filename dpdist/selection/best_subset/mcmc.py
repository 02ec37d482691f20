"""The Roy-Tewari MCMC baseline of [DPBSS25] (Roy and Tewari 2023; docs/algorithms.md §6.8): experiments only.

Target: the exponential mechanism over s-subsets with utility -RSS_B(S),

    pi(S) ∝ exp(-epsilon RSS_B(S) / (b_y + B b_x)^2),   RSS_B(S) = min_{||beta||_1 <= B} ||y - X_S beta||^2,

sampled by Metropolis-Hastings with uniform one-swap proposals (symmetric), a uniformly
random start and a fixed number of iterations per chain; each chain's last state is one draw.

Calibration under ADD/REMOVE: one record adds (y - x^T beta)^2 <= (b_y + B b_x)^2 to every
RSS_B (|x^T beta| <= ||x||_inf ||beta||_1), so the utilities are monotone with sensitivity
(b_y + B b_x)^2 and the exponent above (no factor 2) is the correct epsilon-EM. docs/algorithms.md's
flag (a missing factor 2) applies to REPLACE, where the same exponent is 2 epsilon-DP.

The chain only approximates pi (mixing); Roy and Tewari's guarantee is (epsilon, delta)
with a delta that depends on mixing assumptions nobody checks here. This class is a
baseline for the paper's experiments and has no accountant path.

RSS_B on a support: FISTA on beta^T A beta - 2 b^T beta over the l1 ball (A = X_S^T X_S,
b = X_S^T y from the precomputed Gram), projection by sorting (Duchi et al. 2008); values
are cached per support.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

from dpdist.exceptions import ParameterError
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_epsilon, check_positive

__all__ = ["RoyTewariMCMC"]


@numba.njit(cache=True)
def _project_l1(v: np.ndarray, B: float) -> np.ndarray:
    if np.sum(np.abs(v)) <= B:
        return v.copy()
    u = np.sort(np.abs(v))[::-1]
    css = np.cumsum(u)
    theta = 0.0
    for k in range(u.shape[0]):
        t = (css[k] - B) / (k + 1)
        if u[k] - t > 0:
            theta = t
    return np.sign(v) * np.maximum(np.abs(v) - theta, 0.0)


@numba.njit(cache=True)
def _rss_l1(A: np.ndarray, b: np.ndarray, yty: float, B: float, iters: int) -> float:
    """min over ||beta||_1 <= B of y^T y - 2 b^T beta + beta^T A beta (FISTA)."""
    L = 2.0 * np.linalg.eigvalsh(A)[-1] + 1e-12
    k = b.shape[0]
    beta = np.zeros(k)
    z = beta.copy()
    t = 1.0
    for _ in range(iters):
        grad = 2.0 * (A @ z - b)
        new = _project_l1(z - grad / L, B)
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        z = new + ((t - 1.0) / t_new) * (new - beta)
        if np.max(np.abs(new - beta)) <= 1e-12:
            beta = new
            break
        beta, t = new, t_new
    return float(yty - 2.0 * (b @ beta) + beta @ (A @ beta))


class RoyTewariMCMC:
    """Metropolis-Hastings over s-subsets targeting exp(-epsilon RSS_B / (b_y + B b_x)^2).

    ``sample(X, y, n_draws)`` runs ``n_draws`` independent chains of ``n_iter`` steps on
    (X, y) clipped to the bounds and returns their final supports.
    """

    def __init__(
        self,
        s: int,
        epsilon: float,
        l1_bound: float = 3.5,
        x_bound: float = 0.5,
        y_bound: float = 0.5,
        n_iter: int = 1000,
        fista_iter: int = 300,
        random_state: RandomState = None,
    ) -> None:
        self.s = check_count(s, "s")
        self.epsilon = check_epsilon(epsilon)
        self.l1_bound = check_positive(l1_bound, "l1_bound")
        self.x_bound = check_positive(x_bound, "x_bound")
        self.y_bound = check_positive(y_bound, "y_bound")
        self.n_iter = check_count(n_iter, "n_iter")
        self.fista_iter = check_count(fista_iter, "fista_iter")
        self._rng = check_random_state(random_state)

    @property
    def sensitivity(self) -> float:
        return (self.y_bound + self.l1_bound * self.x_bound) ** 2

    def sample(self, X: Any, y: Any, n_draws: int = 1) -> list[tuple[int, ...]]:
        X = np.clip(np.asarray(X, dtype=np.float64), -self.x_bound, self.x_bound)
        y = np.clip(np.asarray(y, dtype=np.float64).ravel(), -self.y_bound, self.y_bound)
        p = X.shape[1]
        if self.s >= p:
            raise ParameterError(f"s must be smaller than the number of features p={p}, got s={self.s}")
        gram, xty, yty = X.T @ X, X.T @ y, float(y @ y)
        cache: dict[tuple[int, ...], float] = {}

        def rss(S: tuple[int, ...]) -> float:
            if S not in cache:
                idx = np.asarray(S)
                cache[S] = _rss_l1(
                    np.ascontiguousarray(gram[np.ix_(idx, idx)]), xty[idx], yty, self.l1_bound, self.fista_iter
                )
            return cache[S]

        c = self.epsilon / self.sensitivity
        rng = self._rng
        draws = []
        for _ in range(check_count(n_draws, "n_draws")):
            S = tuple(sorted(int(j) for j in rng.choice(p, self.s, replace=False)))
            cur = rss(S)
            inside = np.zeros(p, dtype=bool)
            inside[list(S)] = True
            for _ in range(self.n_iter):
                out = S[rng.integers(self.s)]
                j = int(rng.integers(p - self.s))
                inc = int(np.flatnonzero(~inside)[j])
                T = tuple(sorted([*[k for k in S if k != out], inc]))
                new = rss(T)
                if math.log(rng.random()) < -c * (new - cur):
                    inside[out], inside[inc] = False, True
                    S, cur = T, new
            draws.append(S)
        return draws
