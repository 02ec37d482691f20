"""DP-SGD and full-batch DP-GD on sparse rows (Abadi et al. 2016; Song, Chaudhuri & Sarwate 2013).

The model is a linear predictor m(x) = x.w + c b (c = ``intercept_scaling``, b an unpenalised
intercept) under the logistic loss log(1 + exp(-y m)) (labels -1/+1) or the squared loss
(m - y)^2 / 2, with an optional public L2 penalty (l2 / 2) ||w||^2. Each step t:

1. Batch: every record independently with probability q (Poisson sampling; q = 1 is the full
   batch of DP-GD).
2. Per-record gradients g_i = l'(m(x_i), y_i) (x_i, c) and their clipped sum
   S = sum_i g_i min(1, C / ||g_i||_2): every term has l2 norm at most C. The kernel reads
   each sampled CSR row twice (its margin, then its scattered gradient); nothing of size n.
3. Noisy step: w <- w - lr ((S_w + N(0, (z C)^2 I_d)) / B + l2 w), the same for b without
   the penalty, B the public normaliser (the expected batch size, from a *public* count of the
   records: a released noisy count, never the exact n). With ``momentum`` mu > 0 the step is the
   heavy ball's: v <- mu v + g, w <- w - lr v, g the noisy normalised gradient above.

Privacy (ADD/REMOVE one record, the relation dpdist holds everywhere). Fix the steps' public
parameters (q, z, C, B, lr, l2, T). In one step, a record added to D is sampled with
probability q; when it is, S changes by its clipped term, of l2 norm at most C, and when it is
not, the step's distribution is unchanged: the step is the Poisson-subsampled Gaussian mechanism
with noise multiplier z (Mironov, Talwar & Zhang 2019). Everything else in the step -- dividing by
B, the penalty, the learning rate -- is post-processing of the noisy sum and of public values.
The T steps are adaptively composed (each sees only the previous steps' outputs), so their
Renyi curves add: ``PrivacyLoss.subsampled_gaussian(z, q, T, delta)`` is the loss of the whole
fit, and with q = 1 (full batch, every record in every step) it is T Gaussian mechanisms of
l2-sensitivity C, T / (2 z^2)-zCDP. The bound C on each term is enforced here, on every term,
whatever the data (no assumption on x or y). The released model is the last iterate (or a
public average of iterates: post-processing); momentum, too, is post-processing of the noisy sums.

Noise dominates a step on wide data: d Gaussian draws per step. ``gaussian_noise`` fills the
vector from independent generators in threads (numpy releases the GIL while it fills), so a
step at KDDA's width (20.2M columns) costs a fraction of a second on 2 cores
(``benchmarks/utility.py --noise``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from dpdist.exceptions import ParameterError

__all__ = ["LOSSES", "SGDPlan", "clipped_gradient_sum", "dp_sgd", "gaussian_noise", "poisson_rows"]

LOSSES = {"logistic": 0, "squared": 1}
_NOISE_CHUNK = 1 << 20  # entries per thread task of ``gaussian_noise``


@dataclass(frozen=True)
class SGDPlan:
    """The public parameters of one DP-SGD (q < 1) or DP-GD (q = 1) fit.

    ``normaliser`` is B, what the noisy sum is divided by: the expected batch size q n~ for a
    public count n~ of the records (a released noisy count).
    """

    loss: str
    clip: float
    noise_multiplier: float
    sampling_rate: float
    steps: int
    lr: float
    normaliser: float
    l2: float = 0.0
    intercept_scaling: float = 1.0
    average_from: float = 1.0  # release the mean of the iterates from this fraction of the steps on (1: the last)
    momentum: float = 0.0  # the heavy ball's mu in [0, 1) (0: plain steps)

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ParameterError(f"loss must be one of {sorted(LOSSES)}, got {self.loss!r}")
        for name in ("clip", "noise_multiplier", "lr", "normaliser"):
            if not (getattr(self, name) > 0 and math.isfinite(getattr(self, name))):
                raise ParameterError(f"{name} must be a finite number > 0, got {getattr(self, name)!r}")
        if not 0.0 < self.sampling_rate <= 1.0:
            raise ParameterError(f"sampling_rate must lie in (0, 1], got {self.sampling_rate!r}")
        if not (isinstance(self.steps, (int, np.integer)) and self.steps >= 1):
            raise ParameterError(f"steps must be an integer >= 1, got {self.steps!r}")
        if not (self.l2 >= 0 and math.isfinite(self.l2)):
            raise ParameterError(f"l2 must be a finite number >= 0, got {self.l2!r}")
        if not (self.intercept_scaling >= 0 and math.isfinite(self.intercept_scaling)):
            raise ParameterError(f"intercept_scaling must be a finite number >= 0, got {self.intercept_scaling!r}")
        if not 0.0 <= self.average_from <= 1.0:
            raise ParameterError(f"average_from must lie in [0, 1], got {self.average_from!r}")
        if not 0.0 <= self.momentum < 1.0:
            raise ParameterError(f"momentum must lie in [0, 1), got {self.momentum!r}")

    @property
    def hyper(self) -> tuple[int, float, float]:
        """``clipped_gradient_sum``'s ``hyper``: (loss code, clip C, intercept scaling c)."""
        return (LOSSES[self.loss], float(self.clip), float(self.intercept_scaling))

    def noisy_gradient(self, rng: np.random.Generator, g: np.ndarray, gb: float, w: np.ndarray) -> float:
        """A step's noisy gradient from the clipped gradient sum (``g`` over the coefficients, ``gb`` the
        intercept's) at the iterate ``w``: N(0, (z C)^2) added to each coordinate and to the intercept's
        sum (the Gaussian mechanism), ``g`` divided by the public normaliser B plus the l2 term, in place;
        returns the intercept's noisy sum (not yet divided by B)."""
        return self._scaled(g, gb + self._add_noise(rng, g), w)

    def draw_noise(self, rng: np.random.Generator, d: int) -> tuple[np.ndarray, float]:
        """A step's Gaussian noise: N(0, (z C)^2) on each of ``d`` coordinates and on the intercept's sum, drawn
        from ``rng`` as :meth:`noisy_gradient` draws it (the same numbers). It needs nothing of the data, so it
        can be drawn ahead, while the step's sums are computed (``dpdist.pipelines.dp_gd``)."""
        z = np.zeros(d)
        return z, self._add_noise(rng, z)

    def _add_noise(self, rng: np.random.Generator, out: np.ndarray) -> float:
        """``out += N(0, (z C)^2)`` on each coordinate; the intercept's noise (drawn after)."""
        scale = self.noise_multiplier * self.clip
        gaussian_noise(rng, out, scale)
        return float(rng.standard_normal() * scale)

    def with_noise(self, g: np.ndarray, gb: float, w: np.ndarray, noise: tuple[np.ndarray, float]) -> float:
        """:meth:`noisy_gradient` with the step's noise drawn ahead by :meth:`draw_noise`: the same result."""
        g += noise[0]
        return self._scaled(g, gb + noise[1], w)

    def _scaled(self, g: np.ndarray, gb: float, w: np.ndarray) -> float:
        g /= self.normaliser
        if self.l2:
            g += self.l2 * w
        return gb


@numba.njit(cache=True, nogil=True)
def clipped_gradient_sum(X, y, rows, model, hyper, out):  # noqa: ANN001, ANN201 -- numba
    """Add the clipped per-record gradients of ``rows`` to ``out`` (length d); return the intercept's.

    ``X``: (indptr, indices, data) of a CSR matrix; ``model``: (w, b) with b a 1-array;
    ``hyper``: (loss code, clip C, intercept scaling c). Each record's gradient
    l'(m) (x_i, c) is scaled by min(1, C / ||.||_2) before it is added; a record whose margin or norm
    overflows (not finite) adds 0, so no record's term ever exceeds C.
    """
    indptr, indices, data = X
    w, b = model
    loss, clip, c = hyper
    gb = 0.0
    for r in rows:
        start, stop = indptr[r], indptr[r + 1]
        m = c * b[0]
        sq = c * c
        for k in range(start, stop):
            v = data[k]
            m += v * w[indices[k]]
            sq += v * v
        if loss == 0:  # logistic, y in {-1, +1}: d/dm log(1 + exp(-y m)) = -y / (1 + exp(y m))
            t = y[r] * m
            if t > 0:
                e = math.exp(-t)
                dm = -y[r] * e / (1.0 + e)
            else:
                dm = -y[r] / (1.0 + math.exp(t))
        else:  # squared: d/dm (m - y)^2 / 2
            dm = m - y[r]
        norm = abs(dm) * math.sqrt(sq)
        if not (math.isfinite(m) and math.isfinite(sq) and math.isfinite(norm)):
            dm = 0.0  # an overflowing record adds nothing (a bounded term: the clip holds for every record)
        elif norm > clip:
            dm *= clip / norm
        for k in range(start, stop):
            out[indices[k]] += dm * data[k]
        gb += dm * c
    return gb


def poisson_rows(rng: np.random.Generator, n: int, q: float) -> np.ndarray:
    """The rows of a Poisson-sampled batch: each of 0..n-1 independently with probability ``q``,
    ascending (geometric gaps: O(q n) work, not O(n))."""
    if q >= 1.0:
        return np.arange(n, dtype=np.int64)
    out: list[np.ndarray] = []
    pos = -1
    chunk = max(16, int(q * n * 1.1) + 16)
    while True:
        gaps = rng.geometric(q, chunk)
        rows = pos + np.cumsum(gaps)
        keep = rows[rows < n]
        out.append(keep)
        if keep.size < rows.size:
            return np.concatenate(out).astype(np.int64, copy=False)
        pos = int(rows[-1])


def gaussian_noise(rng: np.random.Generator, out: np.ndarray, scale: float) -> None:
    """``out += N(0, scale^2)`` entry by entry, filled in threads for long vectors.

    Each chunk of ``_NOISE_CHUNK`` entries has a generator of its own spawned from ``rng``
    (independent streams: ``numpy.random.Generator.spawn``), so the draws are the same whatever
    the number of threads.
    """
    d = out.size
    if d <= _NOISE_CHUNK:
        out += rng.standard_normal(d) * scale
        return
    starts = range(0, d, _NOISE_CHUNK)
    gens = rng.spawn(len(starts))

    def fill(i: int) -> None:
        lo = starts[i]
        part = out[lo : lo + _NOISE_CHUNK]
        part += gens[i].standard_normal(part.size) * scale

    with ThreadPoolExecutor() as pool:
        list(pool.map(fill, range(len(starts))))


def csr_parts(X: sp.csr_matrix | sp.csr_array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, data) of a canonical CSR matrix as the kernel takes them."""
    X = sp.csr_matrix(X)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return (
        X.indptr.astype(np.int64, copy=False),
        X.indices.astype(np.int64, copy=False),
        X.data.astype(np.float64, copy=False),
    )


def dp_sgd(
    X: sp.csr_matrix | sp.csr_array,
    y: np.ndarray,
    plan: SGDPlan,
    rng: np.random.Generator,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, float]:
    """Run ``plan`` on (X, y) (module docstring); return (w, b).

    ``y``: -1/+1 labels for the logistic loss, real targets for the squared loss. Every draw
    comes from ``rng``; nothing of the data but the model leaves.
    """
    n, d = X.shape
    parts = csr_parts(X)
    y = np.ascontiguousarray(y, dtype=np.float64)
    w, b = np.zeros(d), np.zeros(1)
    g = np.empty(d)
    first_avg = min(plan.steps - 1, int(plan.average_from * plan.steps))
    w_sum, b_sum, n_avg = np.zeros(d), 0.0, 0
    mu = plan.momentum
    v, vb = np.zeros(d if mu else 0), 0.0
    for t in range(plan.steps):
        rows = poisson_rows(rng, n, plan.sampling_rate)
        g[:] = 0.0
        gb = plan.noisy_gradient(rng, g, clipped_gradient_sum(parts, y, rows, (w, b), plan.hyper, g), w)
        if mu:
            v *= mu
            v += g
            vb = mu * vb + gb / plan.normaliser
            w -= plan.lr * v
            b[0] -= plan.lr * vb
        else:
            w -= plan.lr * g
            b[0] -= plan.lr * gb / plan.normaliser
        if t >= first_avg:
            w_sum += w
            b_sum += b[0]
            n_avg += 1
        if progress is not None:
            progress(t + 1, plan.steps)
    return w_sum / n_avg, b_sum / n_avg * plan.intercept_scaling
