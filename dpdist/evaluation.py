"""Held-out evaluation of released models and selections, released privately by default.

The test rows of a split are records of the source dataset: a metric computed on them is a
statistic of the data and leaves only through a mechanism charged to the source's budget.

:class:`PrivateEvaluation` (ADD/REMOVE neighbours; the released model w and its vertex path
are fixed, public inputs, so each test record's contribution depends on that record alone):

Each metric comes with the 95% interval of its noise (``accuracy_interval``, ``mse_interval``: post-
processing of the noisy counts with the public noise scale; sampling error is not in it) and
``noise_swamps`` when that interval is wider than a quarter of the metric's useful range. AUC and
R^2 are not monotone in one count, so theirs (``auc_interval``, ``r2_interval``) is simulated: the
metric is recomputed over fresh draws of the same Laplace noise added to the released histograms or
sums, and the released value is shifted by the 2.5% and 97.5% quantiles of those draws' deviations
from their mean (a parametric bootstrap; post-processing of the release and its public scale, so
it costs nothing).

* classification (labels y in {-1, +1}): the numbers of correct and wrong predictions, and two
  histograms of the margins x.w, one per class, on public bins (equal steps in sigmoid(x.w)).
  Adding or removing a record changes one count by 1 and one cell by 1: each release has
  l1-sensitivity 1 and gets Laplace noise of scale 1/eps_part, eps_part = epsilon / 3.
  Accuracy and the number of test rows come from the two counts, AUC from the histograms
  (the noisy counts as they are, the result clipped to [0, 1]; pairs within a bin count as ties), and
  so do the balanced accuracy (the margin 0 is a bin edge) and ``predicts_one_class``, the flag of a
  model whose noisy share of positive predictions is under 1% or over 99% (post-processing).
* regression: (n, sum r_i^2, sum y_i, sum y_i^2) with r_i = y_i - x_i.w clipped to
  [-c, c], c = 2 y_bound, and y clipped to [-y_bound, y_bound]: sensitivities 1, c^2,
  y_bound, y_bound^2; each coordinate gets eps_h/4 (Laplace). MSE (of the clipped residuals)
  and R^2 are post-processing, and so is ``loss_grew``, the flag of a model whose noisy held-out
  squared loss exceeds that of all-zero weights (sum y_i^2, where every learner starts) by more than
  the two sums' 95% noise: the fit moved away from the data (a diverged one says so, never silently).
* the convergence curve: at K public checkpoints of the path, the sum over test rows of the
  per-record loss of the iterate w_t clipped to [0, C] (C = 4 for the logistic loss, c^2 for
  the squared loss): each record moves each sum by at most C, the K sums by K C in l1;
  Laplace of scale K C / eps_c. Means divide by the released n.

The curve gets the same share as each other part (epsilon / 3 for classification, epsilon / 2 for
regression); the release is charged as that many Laplace mechanisms
(:meth:`PrivateEvaluation.privacy_charge`). Test rows are clipped to |x_ij| <= 1 (per record)
so that every margin is within the public range the bins assume.

:func:`exact_metrics` and :func:`path_losses` compute the exact values: only for a test set
the user declares public (a separate file) or for non-private experiments.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.special import logit
from sklearn.metrics import balanced_accuracy_score, roc_auc_score

from dpdist.data.record_maps import map_rows
from dpdist.data.transforms import clip_rows, clip_target
from dpdist.exceptions import ParameterError
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.solvers.frank_wolfe import mean_loss
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, check_epsilon, check_positive

__all__ = [
    "PrivateEvaluation",
    "checkpoints",
    "exact_metrics",
    "metric_warnings",
    "path_losses",
    "path_margins",
    "released_margins",
    "sparse_coef",
    "support_recall",
]

LOGISTIC_LOSS_CLIP = 4.0
# an interval of the noise wider than half a metric's useful range swamps it, and the release says so:
# accuracy and AUC ([0.5, 1]: 0.25), MSE ([0, (2 y_bound)^2]: times that), R^2 ([0, 1]: 0.5)
SWAMPED = 0.25
# draws of the public noise behind the simulated AUC and R^2 intervals (module docstring)
_INTERVAL_DRAWS = 2000


def sparse_coef(indices: list[int], values: list[float], n_features: int) -> np.ndarray:
    """A dense weight vector from a released (indices, values) record."""
    w = np.zeros(int(n_features))
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n_features):
        raise ParameterError(f"weight indices fall outside 0..{n_features - 1}")
    w[idx] = values
    return w


def checkpoints(T: int, points: int) -> list[int]:
    """Public, log-spaced iterations 1..T (T included) at which the curve is evaluated."""
    return sorted(set(np.unique(np.geomspace(1, max(T, 1), points).astype(np.int64)).tolist()) | {T})


def path_margins(
    path: list[int], lam: float, X: sp.spmatrix, marks: list[int], screened: list[list[int]] | None = None
):
    """Yield (t, margins X w_t) at the iterations ``marks`` of the Frank-Wolfe path.

    w_t = (1 - eta_t) w_{t-1} + eta_t lam s_t with eta_t = 2/(t+2) ([RKL23] Alg. 1/2), so the
    path of private selections determines every iterate; a screened run also zeroes w_j after
    step t's move for each released [t, j] in ``screened`` (dpdist.solvers.screening).
    """
    Xc = sp.csc_matrix(X)
    want = set(marks)
    margins = np.zeros(Xc.shape[0])
    zeroed: dict[int, list[int]] = {}
    for t, j in screened or []:
        zeroed.setdefault(int(t), []).append(int(j))
    wt = np.zeros(Xc.shape[1]) if zeroed else None  # w = scale * wt (the shrink is one multiply)
    scale = 1.0
    for t, v in enumerate(path, start=1):
        eta = 2.0 / (t + 2.0)
        j, sigma = abs(int(v)) - 1, (1.0 if v > 0 else -1.0)
        margins *= 1.0 - eta
        lo, hi = Xc.indptr[j], Xc.indptr[j + 1]
        margins[Xc.indices[lo:hi]] += eta * sigma * lam * Xc.data[lo:hi]
        if wt is not None:
            scale *= 1.0 - eta
            if scale < 1e-200:
                wt *= scale
                scale = 1.0
            wt[j] += eta * sigma * lam / scale
            for k in zeroed.get(t, ()):
                lo, hi = Xc.indptr[k], Xc.indptr[k + 1]
                margins[Xc.indices[lo:hi]] -= scale * wt[k] * Xc.data[lo:hi]
                wt[k] = 0.0
        if t in want:
            yield t, margins


def _record_losses(task: str, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
    if task == "regression":
        return (margins - y) ** 2
    return np.logaddexp(0.0, -np.where(y > 0, 1.0, -1.0) * margins)  # logistic loss, y in {-1, +1}


def path_losses(
    task: str,
    path: list[int],
    lam: float,
    X: sp.spmatrix,
    y: np.ndarray,
    points: int = 50,
    screened: list[list[int]] | None = None,
) -> tuple[list[int], list[float]]:
    """Exact held-out mean loss of the iterates (public test sets and experiments only)."""
    y = np.asarray(y, dtype=np.float64)
    its, losses = [], []
    for t, m in path_margins(path, lam, X, checkpoints(len(path), points), screened):
        its.append(t)
        losses.append(float(np.mean(_record_losses(task, m, y))) if y.size else float("nan"))
    return its, losses


def released_margins(result: dict[str, Any], X: sp.spmatrix) -> np.ndarray:
    """x.w (+ b) of a released model on the rows of X, with the model's per-record preprocessing
    (a gradient model's row map, ``dpdist.data.record_maps``, and intercept; a Frank-Wolfe model has neither)."""
    w = sparse_coef(result["indices"], result["values"], X.shape[1])
    if result.get("row_norm") and X.shape[0]:  # (no rows: no margins; scikit-learn's normalize refuses them)
        X = map_rows(X, result["row_norm"])
    return np.asarray(X @ w).ravel() + float(result.get("intercept", 0.0))


def exact_metrics(task: str, w: np.ndarray | dict[str, Any], X: sp.spmatrix, y: np.ndarray) -> dict[str, float]:
    """Exact held-out metrics (public test sets and experiments only): accuracy, balanced accuracy, AUC,
    log-loss and the one-class flag, or MSE and R^2.

    ``w``: a weight vector (a classifier's ``coef_`` of shape (1, d) too), or a released model's result
    (``released_margins``)."""
    margins = released_margins(w, X) if isinstance(w, dict) else np.asarray(X @ np.ravel(w)).ravel()
    y = np.asarray(y, dtype=np.float64)
    if task == "regression":
        resid = y - margins
        var = float(((y - y.mean()) ** 2).sum()) if y.size else 0.0
        return {"mse": float(np.mean(resid**2)), "r2": float(1.0 - resid @ resid / var) if var > 0 else float("nan")}
    pos = y > 0
    out = {"accuracy": float(np.mean((margins > 0) == pos)), "log_loss": mean_loss("logistic", margins, pos)}
    both = bool(0 < pos.sum() < pos.size)
    out["auc"] = float(roc_auc_score(pos, margins)) if both else float("nan")
    out["balanced_accuracy"] = float(balanced_accuracy_score(pos, margins > 0)) if both else float("nan")
    share = float(np.mean(margins > 0)) if y.size else 0.5
    out["predicts_one_class"] = bool(share < ONE_CLASS or share > 1.0 - ONE_CLASS)
    return out


class PrivateEvaluation:
    """Held-out metrics and convergence curve of one released model, released with Laplace noise.

    ``epsilon``: the evaluation's whole budget (half to the metrics, half to the curve);
    ``bins``: histogram bins (classification); ``points``: curve checkpoints;
    ``y_bound``: the public bound on |y| (regression).
    """

    def __init__(
        self,
        task: str,
        epsilon: float,
        bins: int = 40,
        points: int = 8,
        y_bound: float = 1.0,
        random_state: RandomState = None,
        curve: bool = True,
    ) -> None:
        if task not in ("binary", "multiclass", "regression"):
            raise ParameterError(f"task must be binary or regression, got {task!r}")
        self.task = "regression" if task == "regression" else "binary"
        self.epsilon = check_epsilon(epsilon)
        self.bins = check_count(bins, "bins", 2)
        self.points = check_count(points, "points")
        self.y_bound = check_positive(y_bound, "y_bound")
        self.curve = bool(curve)
        self._rng = check_random_state(random_state)

    @property
    def _parts(self) -> int:
        """The Laplace releases the budget is split into: the metrics' (2 or 1) and the curve's."""
        return (2 if self.task == "binary" else 1) + int(self.curve)

    def privacy_charge(self) -> Charge:
        return Charge(PrivacyLoss.laplace(self.epsilon / self._parts, self._parts), f"evaluation/{self.task}")

    @property
    def _clip(self) -> float:
        return LOGISTIC_LOSS_CLIP if self.task == "binary" else (2.0 * self.y_bound) ** 2

    def edges(self) -> np.ndarray:
        """Interior bin edges of the margins: logit(k / bins), k = 1..bins-1 (public)."""
        return logit(np.arange(1, self.bins) / self.bins)

    def evaluate(
        self,
        w: np.ndarray,
        path: list[int],
        lam: float,
        X: sp.spmatrix,
        y: np.ndarray,
        screened: list[list[int]] | None = None,
    ) -> dict[str, Any]:
        """The noisy metrics and curve of a Frank-Wolfe model (call it inside the accountant's
        release, after the charge); ``screened``: the released screening events of the path.

        A metric the noisy counts leave undefined (no rows, one class) is None, never NaN: every
        outcome is recordable, so no outcome can force a redraw.
        """
        if not self.curve and path:
            raise ParameterError("this evaluation was charged without a curve: build it with curve=True")
        X = clip_rows(X, 1.0, "clip")
        y = np.asarray(y, dtype=np.float64)
        if self.task == "regression":
            y = clip_target(y, self.y_bound)
        return self._released(np.asarray(X @ np.ravel(w)).ravel(), y, path, lam, X, screened)

    def evaluate_model(self, result: dict[str, Any], X: sp.spmatrix, y: np.ndarray, lam: float = 0.0) -> dict[str, Any]:
        """The noisy metrics of any released model (``released_margins``: a gradient model's intercept
        and row normalisation); its curve too when it has a Frank-Wolfe path (of radius ``lam``)."""
        if result.get("path"):
            return self.evaluate(
                sparse_coef(result["indices"], result["values"], X.shape[1]),
                result["path"],
                lam,
                X,
                y,
                result.get("screened"),
            )
        y = np.asarray(y, dtype=np.float64)
        if self.task == "regression":
            y = clip_target(y, self.y_bound)
        return self._released(released_margins(result, X), y, [], 0.0, X, None)

    def _released(
        self,
        margins: np.ndarray,
        y: np.ndarray,
        path: list[int],
        lam: float,
        X: sp.spmatrix,
        screened: list[list[int]] | None,
    ) -> dict[str, Any]:
        part = self.epsilon / self._parts
        out = self._metrics(margins, y, part)
        n = max(out["rows"], 1.0)
        marks = checkpoints(len(path), self.points) if path else []
        sums = np.array(
            [
                np.minimum(_record_losses(self.task, m, y), self._clip).sum()
                for _, m in path_margins(path, lam, X, marks, screened)
            ]
        )
        noisy = sums + self._rng.laplace(scale=len(marks) * self._clip / part, size=len(marks)) if marks else sums
        out["curve_iterations"] = marks
        out["curve_loss"] = [float(min(max(v / n, 0.0), self._clip)) for v in noisy]
        out["curve_loss_clip"] = self._clip
        out["private"] = True
        return out

    def histogram(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The exact class-wise margin histograms (2 x bins): each record adds 1 to one cell."""
        cell = np.searchsorted(self.edges(), margins, side="left")
        pos = y > 0
        return np.stack(
            [np.bincount(cell[~pos], minlength=self.bins), np.bincount(cell[pos], minlength=self.bins)]
        ).astype(np.float64)

    def noisy_histogram(self, margins: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The released histograms: + Laplace(1/eps_part) per cell (l1-sensitivity 1)."""
        hist = self.histogram(margins, y)
        return hist + self._rng.laplace(scale=self._parts / self.epsilon, size=hist.shape)

    def _balanced(self, hist: np.ndarray) -> dict[str, Any]:
        """Balanced accuracy and the one-class flag from the released histograms (post-processing): with
        an even number of bins the margin 0 is an edge (logit(1/2)), so the cells above it are the
        positive predictions of each class. ``predicts_one_class``: the noisy share of positive predictions
        is below ``ONE_CLASS`` or above 1 - ``ONE_CLASS``."""
        if self.bins % 2:
            return {"balanced_accuracy": None, "predicts_one_class": None}
        h = np.maximum(hist, 0.0)
        half = self.bins // 2
        neg, pos = h[0].sum(), h[1].sum()
        tnr = h[0, :half].sum() / neg if neg > 0 else None
        tpr = h[1, half:].sum() / pos if pos > 0 else None
        share = h[:, half:].sum() / max(h.sum(), 1.0)
        return {
            "balanced_accuracy": None if tnr is None or tpr is None else float(0.5 * (tnr + tpr)),
            "predicts_one_class": bool(share < ONE_CLASS or share > 1.0 - ONE_CLASS),
        }

    def _metrics(self, margins: np.ndarray, y: np.ndarray, eps: float) -> dict[str, Any]:
        if self.task == "binary":
            right = float(np.count_nonzero((margins > 0) == (y > 0)))
            correct, wrong = np.maximum(
                np.array([right, y.size - right]) + self._rng.laplace(scale=1.0 / eps, size=2), 0.0
            )
            n = float(correct + wrong)
            hist = self.noisy_histogram(margins, y)
            raw = _auc(hist[None])[0]
            fresh = _side(self._rng).laplace(scale=self._parts / self.epsilon, size=(_INTERVAL_DRAWS, *hist.shape))
            auc_interval = _around(raw, _auc(hist + fresh), (0.0, 1.0))
            # an unclipped AUC outside [0, 1] by more than the noise's spread: the noise dominates the
            # histograms. Released as swamped (no value, no interval), never as 1.000 within [1, 1]
            swamped = bool(
                raw is not None
                and not 0.0 <= raw <= 1.0
                and auc_interval is not None
                and auc_interval[0] == auc_interval[1]
            )
            auc = None if raw is None or swamped else min(max(raw, 0.0), 1.0)
            out: dict[str, Any] = {"rows": n, "accuracy": float(correct / n) if n > 0 else None, "auc": auc}
            out.update(self._balanced(hist))
            out["auc_interval"] = None if swamped else auc_interval
            out["auc_swamped"] = swamped
            # the noise's 95% interval: each count within +-t of its exact value with probability 0.975
            t = math.log(1.0 / 0.025) / eps
            lo_c, hi_c, lo_w, hi_w = max(correct - t, 0.0), correct + t, max(wrong - t, 0.0), wrong + t
            interval = [
                lo_c / (lo_c + hi_w) if lo_c + hi_w > 0 else 0.0,
                hi_c / (hi_c + lo_w) if hi_c + lo_w > 0 else 1.0,
            ]
            out["accuracy_interval"] = interval
            out["noise_swamps"] = bool(
                swamped or interval[1] - interval[0] > SWAMPED or _wider(out["auc_interval"], SWAMPED)
            )
            return out
        c = 2.0 * self.y_bound
        r = np.clip(y - margins, -c, c)
        sens = np.array([1.0, c * c, self.y_bound, self.y_bound**2])
        exact = np.array([float(y.size), float(r @ r), float(y.sum()), float(y @ y)])
        noisy = exact + self._rng.laplace(scale=4.0 * sens / eps)
        n = max(noisy[0], 1.0)
        sse = max(noisy[1], 0.0)
        var = noisy[3] - noisy[2] ** 2 / n
        ts = math.log(1.0 / 0.025) * 4.0 * sens / eps  # each noisy sum within +-ts with probability 0.975
        interval = [max(sse - ts[1], 0.0) / (n + ts[0]), (sse + ts[1]) / max(n - ts[0], 1.0)]
        sums = noisy + _side(self._rng).laplace(scale=4.0 * sens / eps, size=(_INTERVAL_DRAWS, 4))
        n_s = np.maximum(sums[:, 0], 1.0)
        var_s = sums[:, 3] - sums[:, 2] ** 2 / n_s
        ok = var_s > 0
        r2_interval = _around(
            float(1.0 - sse / var) if var > 0 else None, 1.0 - np.maximum(sums[ok, 1], 0.0) / var_s[ok], (-np.inf, 1.0)
        )
        return {
            "rows": float(max(noisy[0], 0.0)),
            "mse": float(sse / n),
            "r2": float(1.0 - sse / var) if var > 0 else None,
            "mse_interval": interval,
            "r2_interval": r2_interval,
            "noise_swamps": bool(interval[1] - interval[0] > c * c * SWAMPED or _wider(r2_interval, 2.0 * SWAMPED)),
            "loss_grew": bool(sse - noisy[3] > ts[1] + ts[3]),
        }


ONE_CLASS = 0.01  # a model whose noisy share of positive predictions is below 1% or above 99% predicts one class


def metric_warnings(p: dict[str, Any]) -> list[str]:
    """What a model's released held-out metrics say is wrong with it (post-processing of the release)."""
    out = []
    if p.get("predicts_one_class"):
        out.append(
            "the model predicts one class on the held-out rows (under 1% or over 99% of its predictions are "
            "positive): its accuracy is the majority's share; see its balanced accuracy and AUC"
        )
    if p.get("loss_grew"):
        out.append(
            "the model's held-out squared loss is above that of all-zero weights, where the fit started: it moved "
            "away from the data (diverged); a smaller step size, a larger epsilon or another learner"
        )
    return out


def _wider(interval: list[float] | None, width: float) -> bool:
    """Whether a simulated interval is wider than ``width`` (an undefined one is not)."""
    return interval is not None and interval[1] - interval[0] > width


def _auc(hists: np.ndarray) -> list[float | None]:
    """AUC of each pair of class-wise margin histograms (k x 2 x bins; pairs within a bin tie), from the
    noisy counts as released, negative ones included: the count of ordered pairs is bilinear in the
    cells, so zero-mean noise leaves it unbiased, where clamping each cell at 0 first would add the
    noise's positive part to every empty cell and pull a small test set's AUC toward 0.5. Not clipped
    (the interval is drawn from the unclipped values: clipped ones pile up at 1 and would give a
    zero-width interval); None unless both noisy class totals are positive."""
    neg, pos = hists[:, 0], hists[:, 1]
    below = np.concatenate([np.zeros((neg.shape[0], 1)), np.cumsum(neg, axis=1)[:, :-1]], axis=1)
    n_neg, n_pos = neg.sum(axis=1), pos.sum(axis=1)
    wins = (pos * (below + 0.5 * neg)).sum(axis=1)
    return [float(w / (a * b)) if a > 0 and b > 0 else None for w, a, b in zip(wins, n_neg, n_pos)]


def _side(rng: np.random.Generator) -> np.random.Generator:
    """A generator for the intervals' simulation that leaves ``rng``'s stream as it is (the release's
    later noise is the same with or without it; reproducible under a seed). A generator whose bit
    generator has no seed sequence to spawn from gets one from OS entropy."""
    try:
        return rng.spawn(1)[0]
    except (TypeError, ValueError):
        return np.random.default_rng()


def _around(value: float | None, simulated: Any, bounds: tuple[float, float]) -> list[float] | None:
    """The unclipped ``value`` less the 97.5% and 2.5% quantiles of the simulated values' deviations from
    their median, widened to hold the value itself and then cut to the metric's ``bounds`` (so it holds
    the released value, ``value`` clipped to them; None when the value or every simulation is
    undefined)."""
    v = np.asarray([x for x in simulated if x is not None], dtype=np.float64)
    if value is None or not v.size:
        return None
    lo, hi = np.quantile(v - np.median(v), [0.025, 0.975])  # the median: R^2's ratio has a heavy tail

    def cut(x: float) -> float:  # each end to both bounds: never inverted, and it holds the clipped value
        return float(min(max(x, bounds[0]), bounds[1]))

    return [cut(min(value - hi, value)), cut(max(value - lo, value))]


def support_recall(selected: list[int], true_support: list[int] | None) -> float | None:
    """Fraction of the true support (public for synthetic sets) among the selected features."""
    if not true_support:
        return None
    return float(len(set(selected) & set(true_support)) / len(true_support))
