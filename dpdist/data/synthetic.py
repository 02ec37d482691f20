"""Synthetic data sets of the papers, and sparse sets shaped like the LIBSVM benchmarks.

Every generator records its true support (where one exists) in the store's metadata. Section
numbers (§) are those of docs/algorithms.md.

| name            | source                      | what                                                                 |
| --------------- | --------------------------- | -------------------------------------------------------------------- |
| ``raj``         | [KLR23], [KLR25] (§3.6)     | 3000 x 600, x ~ N(0, I) or Sigma_ij = 0.5^|i-j| (``correlated``),   |
|                 |                             | scaled by the global max |x|; w*: 35 entries +1 and 35 entries -1    |
|                 |                             | at random positions; y = X w* (linear) or 1[X w* > 0] (logistic)     |
| ``fan-lv``      | [SKDRR24] (§8)              | 100 x 2000, X ~ N(0, I), 8 non-zeros w_i = (-1)^u (4 ln n/sqrt n +   |
|                 |                             | |z|), u ~ Bern(0.4); y = X w + e, e ~ N(0, 1.5) (1.5 = variance)     |
| ``stability-w1``| [SKDRR24] section 3        | 100 x 100, X ~ N(0, I), w1 = 1 on features 1-5; e ~ N(0, 0.1)       |
| ``stability-w1w2`` | [SKDRR24] section 3      | as W1, but every 10th row follows w2 = 1 on features 96-100          |
| ``bss``         | [DPBSS25] (§6.8)            | x ~ N(0, Sigma), Sigma_ij = rho^|i-j|; beta* = 1/sqrt(s) at 0-based  |
|                 |                             | 1, 3, ..., 2s-1; e ~ N(0, 0.1^2) rescaled to SNR exactly;            |
|                 |                             | ``hinge``: y = +1 with probability sigmoid(z), else -1               |
| ``rcv1``, ``news20``, ``url``, ``webspam``, ``kdda`` | [RKL23] (§8) | the full shapes and sparsity profiles |

The sparse profiles draw each row's length around the set's mean row length and its
columns from a bounded power law over a fixed random permutation of the columns
(frequent and rare features, as in text and click data); values are unit-l2 TF-IDF-like
(rcv1, news20, webspam) or binary (kdda, url), and ``url`` has a block of 200 dense real-valued
columns (each filled in 40% of rows). Binary labels come from a sparse logistic model on frequent columns (url: on the
dense block), which is recorded as the true support. ``scale`` multiplies the number of
rows; ``n`` and ``d`` override the shape. Rows are generated and written block by block.
Where the papers leave a detail open (noise variance vs. standard deviation, positions of
w*), the choice is stated above and recorded in the metadata.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from dpdist.data.store import write_blocks
from dpdist.exceptions import ParameterError
from dpdist.utils.random import RandomState, check_random_state

__all__ = ["GENERATORS", "SPARSE_PROFILES", "SyntheticSet", "make_synthetic", "write_synthetic"]

Blocks = Iterator[tuple[sp.csr_matrix, np.ndarray]]


@dataclass
class SyntheticSet:
    """A generated data set: its row blocks (consumed once) and what is known about it."""

    n_rows: int
    n_features: int
    task: str
    blocks: Blocks
    true_support: list[int] | None = None
    true_coef: list[float] | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def materialize(self) -> tuple[sp.csr_matrix, np.ndarray]:
        """All rows in memory (for small sets and tests)."""
        Xs, ys = zip(*self.blocks)
        return sp.vstack(Xs, format="csr"), np.concatenate(ys)


def _dense(X: np.ndarray, y: np.ndarray) -> Blocks:
    yield sp.csr_matrix(X), y


def _ar1_gaussian(rng: np.random.Generator, n: int, d: int, rho: float) -> np.ndarray:
    """Rows ~ N(0, Sigma) with Sigma_ij = rho^|i-j|, by the AR(1) recursion (exact, O(n d))."""
    Z = rng.standard_normal((n, d))
    if rho == 0:
        return Z
    X = np.empty_like(Z)
    X[:, 0] = Z[:, 0]
    c = np.sqrt(1 - rho * rho)
    for j in range(1, d):
        X[:, j] = rho * X[:, j - 1] + c * Z[:, j]
    return X


# ------------------------------------------------------------------ the papers' experiments


def raj(
    rng: np.random.Generator, n: int = 3000, d: int = 600, correlated: bool = False, task: str = "regression"
) -> SyntheticSet:
    """[KLR23]/[KLR25] synthetic set (Raj et al. 2016 style)."""
    if task not in ("regression", "binary"):
        raise ParameterError(f"task must be 'regression' or 'binary', got {task!r}")
    if d < 70:
        raise ParameterError(f"d must be >= 70 for 35 + 35 non-zeros, got {d}")
    X = _ar1_gaussian(rng, n, d, 0.5 if correlated else 0.0)
    X /= np.abs(X).max()
    support = np.sort(rng.choice(d, 70, replace=False))
    w = np.zeros(d)
    w[support] = rng.permutation(np.repeat([1.0, -1.0], 35))
    y = X @ w
    if task == "binary":
        y = (y > 0).astype(np.float64)
    return SyntheticSet(
        n,
        d,
        task,
        _dense(X, y),
        support.tolist(),
        w[support].tolist(),
        {"correlated": correlated, "scaling": "divided by the global max |x|"},
    )


def fan_lv(rng: np.random.Generator, n: int = 100, d: int = 2000, k: int = 8, noise_var: float = 1.5) -> SyntheticSet:
    """[SKDRR24] synthetic set (Fan & Lv 2008 style)."""
    X = rng.standard_normal((n, d))
    support = np.sort(rng.choice(d, k, replace=False))
    a = 4.0 * np.log(n) / np.sqrt(n)
    u = rng.random(k) < 0.4
    coef = np.where(u, -1.0, 1.0) * (a + np.abs(rng.standard_normal(k)))
    w = np.zeros(d)
    w[support] = coef
    y = X @ w + rng.normal(0.0, np.sqrt(noise_var), n)
    return SyntheticSet(
        n, d, "regression", _dense(X, y), support.tolist(), coef.tolist(), {"noise_var": noise_var, "a": a}
    )


def _stability(rng: np.random.Generator, n: int, d: int, noise_var: float, outliers: bool) -> SyntheticSet:
    if d < 10:
        raise ParameterError(f"d must be >= 10, got {d}")
    X = rng.standard_normal((n, d))
    w1 = np.zeros(d)
    w1[:5] = 1.0
    w2 = np.zeros(d)
    w2[-5:] = 1.0
    y = X @ w1
    if outliers:
        rows = np.arange(n) % 10 == 9  # 9 rows from w1, then 1 from w2: one outlier per block of 10
        y[rows] = X[rows] @ w2
    y = y + rng.normal(0.0, np.sqrt(noise_var), n)
    return SyntheticSet(
        n,
        d,
        "regression",
        _dense(X, y),
        list(range(5)),
        [1.0] * 5,
        {"noise_var": noise_var, "outlier_rows": "every 10th row follows w2" if outliers else None},
    )


def stability_w1(rng: np.random.Generator, n: int = 100, d: int = 100, noise_var: float = 0.1) -> SyntheticSet:
    """[SKDRR24] section 3, experiment W1."""
    return _stability(rng, n, d, noise_var, outliers=False)


def stability_w1w2(rng: np.random.Generator, n: int = 100, d: int = 100, noise_var: float = 0.1) -> SyntheticSet:
    """[SKDRR24] section 3, experiment W1/W2."""
    return _stability(rng, n, d, noise_var, outliers=True)


def bss(
    rng: np.random.Generator,
    n: int = 3000,
    d: int = 100,
    s: int = 5,
    snr: float = 5.0,
    rho: float = 0.1,
    hinge: bool = False,
) -> SyntheticSet:
    """[DPBSS25] data-generating process (docs/algorithms.md §6.8)."""
    if 2 * s > d:
        raise ParameterError(f"need 2s <= d for beta* at 1, 3, ..., 2s-1 (s={s}, d={d})")
    X = _ar1_gaussian(rng, n, d, rho)
    support = np.arange(1, 2 * s, 2)
    beta = np.zeros(d)
    beta[support] = 1.0 / np.sqrt(s)
    signal = X @ beta
    e = rng.normal(0.0, 0.1, n)
    alpha = np.sqrt((signal @ signal) / (snr * (e @ e)))
    z = signal + alpha * e
    if hinge:
        y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-z)), 1.0, -1.0)
        task = "binary"
    else:
        y, task = z, "regression"
    return SyntheticSet(
        n,
        d,
        task,
        _dense(X, y),
        support.tolist(),
        beta[support].tolist(),
        {"s": s, "snr": snr, "rho": rho, "hinge": hinge, "alpha": float(alpha)},
    )


# ------------------------------------------------------------------ sparse profiles


@dataclass(frozen=True)
class SparseProfile:
    n: int
    d: int
    row_nnz: float  # mean non-zeros per row
    values: str  # "tfidf" or "binary"
    power: float = 1.1  # column frequency ~ rank^-power
    n_dense: int = 0  # leading dense real-valued columns (url)
    dense_density: float = 1.0  # fraction of rows with a value in each dense column
    informative: int = 50


SPARSE_PROFILES = {
    "rcv1": SparseProfile(20_242, 47_236, 74.0, "tfidf"),
    "news20": SparseProfile(19_996, 1_355_191, 455.0, "tfidf"),
    "url": SparseProfile(2_396_130, 3_231_961, 116.0, "binary", n_dense=200, dense_density=0.4, informative=100),
    "webspam": SparseProfile(350_000, 16_609_143, 3_728.0, "tfidf", power=1.2),
    "kdda": SparseProfile(8_407_752, 20_216_830, 36.3, "binary", power=1.2),
}


def _power_law_columns(rng: np.random.Generator, size: int, d: int, power: float) -> np.ndarray:
    """Ranks 0..d-1 from a bounded continuous power law with density ~ (r+1)^-power."""
    u = rng.random(size)
    a = 1.0 - power
    x = (((d + 1.0) ** a - 1.0) * u + 1.0) ** (1.0 / a)
    return np.asarray(np.minimum(x.astype(np.int64) - 1, d - 1))


def _sparse(rng: np.random.Generator, prof: SparseProfile, n: int, d: int, block_rows: int) -> SyntheticSet:
    if d <= prof.n_dense + 10:
        raise ParameterError(f"d={d} is too small for this profile")
    n_sparse_cols = d - prof.n_dense
    perm = rng.permutation(n_sparse_cols).astype(np.int64) + prof.n_dense  # rank -> column
    k = min(prof.informative, n_sparse_cols // 10)
    if prof.n_dense:
        support = np.sort(rng.choice(prof.n_dense, min(prof.informative, prof.n_dense), replace=False))
    else:  # informative features among the frequent ones, so the labels are learnable
        support = np.sort(perm[rng.choice(min(n_sparse_cols, 20 * k), k, replace=False)])
    coef = rng.choice([-1.0, 1.0], support.size) * (1.0 + rng.random(support.size))
    w = np.zeros(d)
    w[support] = coef
    dense_nnz = prof.n_dense * prof.dense_density
    mean_sparse = max(1.0, prof.row_nnz - dense_nnz)
    sigma = 0.6
    shape = {"mu": np.log(mean_sparse) - sigma**2 / 2}

    def make_block(m: int) -> tuple[sp.csr_matrix, np.ndarray]:
        lengths = np.clip(np.rint(rng.lognormal(shape["mu"], sigma, m)), 1, n_sparse_cols).astype(np.int64)
        rows = np.repeat(np.arange(m, dtype=np.int64), lengths)
        cols = perm[_power_law_columns(rng, rows.size, n_sparse_cols, prof.power)]
        keys = rows * d + cols
        keys.sort()
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]  # sorted, repeats within a row merged
        rows, cols = keys // d, keys % d
        if prof.values == "binary":
            vals = np.ones(keys.size)
        else:
            vals = rng.lognormal(0.0, 0.7, keys.size)
        if prof.n_dense:
            dr = np.repeat(np.arange(m, dtype=np.int64), prof.n_dense)
            dc = np.tile(np.arange(prof.n_dense, dtype=np.int64), m)
            dv = np.clip(rng.standard_normal(m * prof.n_dense) * 0.3, -1.0, 1.0)
            keep = rng.random(dv.size) < prof.dense_density
            dr, dc, dv = dr[keep], dc[keep], dv[keep]
            rows, cols, vals = np.concatenate([dr, rows]), np.concatenate([dc, cols]), np.concatenate([dv, vals])
        X = sp.csr_matrix((vals, (rows, cols)), shape=(m, d))
        X.sort_indices()
        if prof.values == "tfidf":  # unit l2 rows, like cosine-normalised TF-IDF
            norms = np.sqrt(np.add.reduceat(X.data**2, X.indptr[:-1])) if X.nnz else np.ones(m)
            X.data /= np.repeat(norms, np.diff(X.indptr))
        return X, X @ w

    # repeated popular columns within a row are merged; calibrate the drawn lengths on pilot
    # blocks so the mean row length matches the profile
    for _ in range(3):
        pilot_X, pilot_score = make_block(min(n, 2000))
        realized = pilot_X.nnz / pilot_X.shape[0] - dense_nnz
        shape["mu"] += np.log(mean_sparse / max(realized, 1e-9))
    scale = np.std(pilot_score) or 1.0
    threshold = float(np.median(pilot_score)) / scale

    def blocks() -> Blocks:
        done = 0
        while done < n:
            m = min(block_rows, n - done)
            X, score = make_block(m)
            z = score / scale - threshold + rng.logistic(0.0, 0.25, m)
            yield X, (z > 0).astype(np.float64) * 2.0 - 1.0
            done += m

    return SyntheticSet(
        n,
        d,
        "binary",
        blocks(),
        support.tolist(),
        coef.tolist(),
        {"profile": prof.__dict__, "labels": "sign(x.w/sd - median + Logistic(0.25)) in {-1, +1}"},
    )


def _sparse_generator(name: str) -> Callable[..., SyntheticSet]:
    prof = SPARSE_PROFILES[name]

    def gen(
        rng: np.random.Generator,
        n: int | None = None,
        d: int | None = None,
        scale: float = 1.0,
        block_rows: int = 1 << 15,
    ) -> SyntheticSet:
        rows = int(n) if n is not None else max(1, int(round(prof.n * scale)))
        return _sparse(rng, prof, rows, int(d) if d is not None else prof.d, block_rows)

    gen.__doc__ = f"Sparse set with the shape and profile of {name} ({prof.n} x {prof.d}, ~{prof.row_nnz} nnz/row)."
    return gen


GENERATORS: dict[str, Callable[..., SyntheticSet]] = {
    "raj": raj,
    "fan-lv": fan_lv,
    "stability-w1": stability_w1,
    "stability-w1w2": stability_w1w2,
    "bss": bss,
    **{name: _sparse_generator(name) for name in SPARSE_PROFILES},
}


def make_synthetic(name: str, random_state: RandomState = None, **params: Any) -> SyntheticSet:
    """Generate the synthetic set ``name`` (see the module table); ``params`` override its defaults."""
    if name not in GENERATORS:
        raise ParameterError(f"unknown synthetic set {name!r}; choose one of {sorted(GENERATORS)}")
    for key in ("n", "d"):
        if params.get(key) is not None and int(params[key]) < 1:
            raise ParameterError(f"{key} must be >= 1, got {params[key]}")
    if "scale" in params and not float(params["scale"]) > 0:
        raise ParameterError(f"scale must be > 0, got {params['scale']}")
    try:
        return GENERATORS[name](check_random_state(random_state), **params)
    except TypeError as e:
        raise ParameterError(f"synthetic set {name!r}: {e}") from None


def write_synthetic(
    name: str,
    out: str | os.PathLike[str],
    *,
    seed: int | None = None,
    force: bool = False,
    store_name: str | None = None,
    metadata: dict[str, Any] | None = None,
    **params: Any,
) -> dict[str, Any]:
    """Generate ``name`` and write it as a store (public ``store_name``: default random); returns its metadata."""
    synth = make_synthetic(name, seed, **{k: v for k, v in params.items() if v is not None})
    meta = {
        "synthetic": name,
        "seed": seed,
        "params": {**synth.params, **{k: v for k, v in params.items() if v is not None}},
        "true_support": synth.true_support,
        "true_coef": synth.true_coef,
        "name": store_name,
        **(metadata or {}),
    }
    # the generator's classes are public (its definition, not its draws): a declared schema
    classes = ([0.0, 1.0] if name == "raj" else [-1.0, 1.0]) if synth.task == "binary" else None
    return write_blocks(
        out, synth.blocks, synth.n_features, task=synth.task, force=force, metadata=meta, labels=classes
    )
