"""The two samplers of [DPBSS25], in log space (seed Alg. 1 and Sec. 2.1.2; docs/algorithms.md §6.3, 6.4, 1.5).

Both sample an exponential mechanism P(S) ∝ exp(-c u(S)) over all C(p, s) supports, where
c = epsilon / Delta for the monotone objectives of ``objective`` and u is a truncated
objective that takes few distinct values, so the sampler never enumerates the supports.

Top-R (Alg. 1). Given the R supports S_1..S_R with the smallest F and t = max_i F(S_i), the
mechanism uses u(S) = min(F(S), t): the listed supports keep their value and all
C(p, s) - R others get t. Draw the index i from R + 1 categories with log-weights
-c F(S_i) and ln(C(p, s) - R) - c t (Gumbel-max); category R + 1 is a uniform support
outside the list, drawn by rejection (uniform s-subsets until one is not listed; expected
C/(C - R) draws). The loop is unbounded, as the exact EM requires (the paper's Theorem 1
covers a truncated loop with a larger, lost epsilon').

Mistakes (Sec. 2.1.2). Given a centre S* and values u_j for the buckets
P_j = {S : |S \\ S*| = j}, j = 0..min(s, p - s), of sizes C(s, j) C(p - s, j): draw j with
log-weights ln|P_j| - c u_j, then a *uniform member* of P_j (drop a uniform j-subset of S*,
add a uniform j-subset of its complement). The paper's public code returns the bucket's
best support instead; that changes the distribution (F1, utility loss) and is kept only as
``member="best"`` for the paper mode.

Noise comes from the generator given (OS entropy unless an experiment passes a seed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import overload

import numpy as np
from scipy.special import gammaln

from dpdist.privacy.mechanisms import gumbel_max

__all__ = [
    "log_comb",
    "mistakes_log_weights",
    "mistakes_sample",
    "top_r_log_weights",
    "top_r_sample",
    "uniform_support",
]


def log_comb(n: int, k: int) -> float:
    """ln C(n, k) (-inf when k > n)."""
    if k < 0 or k > n:
        return -math.inf
    return float(gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1))


def uniform_support(p: int, s: int, rng: np.random.Generator) -> tuple[int, ...]:
    """A uniform s-subset of range(p)."""
    return tuple(sorted(int(j) for j in rng.choice(p, size=s, replace=False)))


def top_r_log_weights(values: np.ndarray, p: int, s: int, scale: float) -> np.ndarray:
    """Log-weights of the R listed supports and of the "outside" category (length R + 1).

    ``scale`` = c = epsilon / Delta. Values are shifted by their minimum first (the
    distribution is invariant), so the weights never overflow. ln(C(p, s) - R) is computed
    from the exact integer count.
    """
    v = np.asarray(values, dtype=np.float64)
    rest = math.comb(p, s) - v.size
    if rest < 0:
        raise ValueError("more listed supports than s-subsets")
    log_out = math.log(rest) if rest > 0 else -math.inf
    base = v.min()
    return np.append(-scale * (v - base), log_out - scale * (v.max() - base))


@overload
def top_r_sample(
    values: np.ndarray,
    p: int,
    s: int,
    scale: float,
    rng: np.random.Generator,
    support_at: Callable[[int], Sequence[int]],
    is_listed: Callable[[tuple[int, ...]], bool],
    size: None = ...,
) -> tuple[int, ...]: ...


@overload
def top_r_sample(
    values: np.ndarray,
    p: int,
    s: int,
    scale: float,
    rng: np.random.Generator,
    support_at: Callable[[int], Sequence[int]],
    is_listed: Callable[[tuple[int, ...]], bool],
    size: int,
) -> list[tuple[int, ...]]: ...


def top_r_sample(
    values: np.ndarray,
    p: int,
    s: int,
    scale: float,
    rng: np.random.Generator,
    support_at: Callable[[int], Sequence[int]],
    is_listed: Callable[[tuple[int, ...]], bool],
    size: int | None = None,
) -> tuple[int, ...] | list[tuple[int, ...]]:
    """One draw (or ``size`` independent draws) of the top-R mechanism (module docstring).

    ``values[i]`` is F of the i-th listed support, ``support_at(i)`` that support, and
    ``is_listed`` tests membership of a sorted support tuple; the list must be the exact top-R.
    """
    logw = top_r_log_weights(values, p, s, scale)
    picks = np.atleast_1d(gumbel_max(logw, rng, size)) if size is not None else np.array([gumbel_max(logw, rng)])
    listed = {int(i): tuple(sorted(int(j) for j in support_at(int(i)))) for i in np.unique(picks) if i < len(values)}
    out = []
    for i in picks:
        if i < len(values):
            out.append(listed[int(i)])
            continue
        while True:  # unbounded rejection loop: exactly uniform over the unlisted supports
            S = uniform_support(p, s, rng)
            if not is_listed(S):
                out.append(S)
                break
    return out[0] if size is None else out


def mistakes_log_weights(bucket_values: np.ndarray, p: int, s: int, scale: float) -> np.ndarray:
    """ln|P_j| - c u_j for j = 0..len(bucket_values) - 1 (-inf for empty buckets)."""
    u = np.asarray(bucket_values, dtype=np.float64)
    sizes = np.array([log_comb(s, j) + log_comb(p - s, j) for j in range(u.size)])
    finite = np.isfinite(u)
    base = u[finite].min()
    out = np.full(u.size, -np.inf)
    out[finite] = sizes[finite] - scale * (u[finite] - base)
    return out


def _distinct_rows(rng: np.random.Generator, m: int, j: int, count: int) -> np.ndarray:
    """``count`` uniform j-subsets of range(m) (rows of distinct indices; exact, by rejection)."""
    out = np.empty((count, j), dtype=np.int64)
    todo = np.arange(count)
    while todo.size:
        if j > m // 2:  # dense: a random permutation per row
            out[todo] = np.argsort(rng.random((todo.size, m)), axis=1)[:, :j]
            break
        cand = rng.integers(m, size=(todo.size, j))
        srt = np.sort(cand, axis=1)
        ok = np.all(srt[:, 1:] != srt[:, :-1], axis=1) if j > 1 else np.ones(todo.size, dtype=bool)
        out[todo[ok]] = cand[ok]
        todo = todo[~ok]
    return out


@overload
def mistakes_sample(
    center: Sequence[int],
    bucket_values: np.ndarray,
    p: int,
    scale: float,
    rng: np.random.Generator,
    member: str = ...,
    bucket_best: Sequence[Sequence[int] | None] | None = ...,
    size: None = ...,
) -> tuple[int, ...]: ...


@overload
def mistakes_sample(
    center: Sequence[int],
    bucket_values: np.ndarray,
    p: int,
    scale: float,
    rng: np.random.Generator,
    member: str = ...,
    bucket_best: Sequence[Sequence[int] | None] | None = ...,
    *,
    size: int,
) -> list[tuple[int, ...]]: ...


def mistakes_sample(
    center: Sequence[int],
    bucket_values: np.ndarray,
    p: int,
    scale: float,
    rng: np.random.Generator,
    member: str = "uniform",
    bucket_best: Sequence[Sequence[int] | None] | None = None,
    size: int | None = None,
) -> tuple[int, ...] | list[tuple[int, ...]]:
    """One draw (or ``size`` draws) of the mistakes mechanism: a bucket j, then a uniform member.

    ``member="best"`` (paper mode only) returns ``bucket_best[j]`` instead of a uniform member.
    """
    C = np.asarray(sorted(int(j) for j in center), dtype=np.int64)
    s = C.size
    logw = mistakes_log_weights(bucket_values, p, s, scale)
    js = np.atleast_1d(gumbel_max(logw, rng, size)) if size is not None else np.array([gumbel_max(logw, rng)])
    mask = np.ones(p, dtype=bool)
    mask[C] = False
    outside = np.flatnonzero(mask)
    out: list[tuple[int, ...]] = [()] * js.size
    for j in np.unique(js):
        rows = np.flatnonzero(js == j)
        if member == "best":
            if bucket_best is None or bucket_best[j] is None:
                raise ValueError("member='best' needs the best support of the drawn bucket")
            best = tuple(sorted(int(k) for k in bucket_best[j]))
            for r in rows:
                out[r] = best
            continue
        drop = _distinct_rows(rng, s, int(j), rows.size)
        add = outside[_distinct_rows(rng, outside.size, int(j), rows.size)]
        keep = np.ones((rows.size, s), dtype=bool)
        np.put_along_axis(keep, drop, False, axis=1)
        kept = np.broadcast_to(C, (rows.size, s))[keep].reshape(rows.size, s - int(j))
        members = np.sort(np.concatenate([kept, add], axis=1), axis=1)
        for r, S in zip(rows, members):
            out[r] = tuple(int(k) for k in S)
    return out[0] if size is None else out
