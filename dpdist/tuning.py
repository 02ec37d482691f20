"""Private hyperparameter selection: the best of a random number of private runs (Papernot & Steinke 2022).

``PrivateSearch`` (``PrivateSearchClassifier`` / ``PrivateSearchRegressor``: the default grid of their
task, :func:`default_candidates`) takes a declared grid of candidate learners (``dpdist.gradient_models``
estimators: other methods, or the same method with other hyperparameters) and releases one
fitted model, charged once:

1. A public count n~ of the training records (the candidates' schedules need one): given as
   ``n_records``, or a Laplace count released first (its own release, ``count_epsilon``).
2. A keyed validation split: each record goes to validation when its keyed hash is below
   ``validation_fraction`` (``dpdist.data.split.record_sides``; the key is secret: derived from the
   dataset's split key in the ledger, or random). Adding or removing a record changes one side.
3. K runs, K drawn from the truncated negative binomial of ``shape`` (0: logarithmic, 1:
   geometric) and mean ``mean_runs`` (default: 2.5 per candidate); each run picks a
   candidate uniformly at random (independently of the data), trains it on the training side
   with every noise scale multiplied by a common factor x >= 1, and scores it on the validation
   side privately: the number of correct predictions (classifiers) or minus the sum of squared
   errors clipped to [0, (2 y_bound)^2] (regressors), plus Laplace noise of scale
   x sensitivity / ``score_epsilon``.
4. The run with the best noisy score is released: its model, which candidate it was, and its
   noisy validation score. Nothing else of the other runs leaves.

Privacy (ADD/REMOVE): the release is charged the best-of-runs loss (Papernot & Steinke 2022, Theorem 2) of
the largest run curve -- each run's the larger of its candidate's training curve and its score's -- at the
smallest common noise factor x that meets (epsilon, delta). The claim and its proof:
[docs/proofs/tuning-private-search.md][proof-private-search].

The number of runs K must stay secret: the theorem averages over it, and given K the release costs up
to K runs. The search's duration tells K, so it is never timed or logged by dpdist; the flow's release
task still has a start and an end time in Prefect's database (README: what the guarantee does not
cover) -- restrict who reads that server.

Exact cross-validation on private data (scikit-learn's ``GridSearchCV`` over private fits)
compares exact scores of private models: the choice is not private. Use this instead.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sklearn.base import clone, is_classifier
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from dpdist.base import (
    PARAMETERS,
    ClassesParam,
    CountParams,
    PrivacyParams,
    PrivateEstimator,
    ReleaseRun,
    charged_to,
    is_release,
)
from dpdist.data.split import derive_key, record_sides
from dpdist.data.transforms import Matrix
from dpdist.exceptions import ParameterError
from dpdist.gradient_models import (
    DPSGDClassifier,
    DPSGDRegressor,
    GradientModel,
    SelectTrainClassifier,
    SelectTrainRegressor,
)
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import ORDERS, Charge, PrivacyLoss, best_of_runs_curve, curve_epsilon, rdp_curve
from dpdist.utils.classifier import plain_classes, require_public_classes
from dpdist.utils.random import check_random_state
from dpdist.utils.validation import AtLeast, Between, Count, Delta, Epsilon

__all__ = [
    "PrivateSearch",
    "PrivateSearchClassifier",
    "PrivateSearchRegressor",
    "default_candidates",
    "halting_probability",
    "number_of_runs",
]


def default_candidates(task: str) -> list[Any]:
    """The declared grid ``dpdist train --tune`` and ``train.tune`` search by default: select-then-train
    (the best on many rows) and DP-SGD with a small step (the best on few); ``benchmarks/utility.py``
    measures it."""
    if task == "regression":
        return [SelectTrainRegressor(k=100), DPSGDRegressor(lr=0.3)]
    return [SelectTrainClassifier(k=100), DPSGDClassifier(lr=3.0)]


def _mean_runs(gamma: float, shape: float) -> float:
    """The mean of the truncated negative binomial of ``shape`` with halting probability ``gamma``
    (Papernot & Steinke 2022, Def. 1; shape 0: the logarithmic distribution, 1: the geometric)."""
    if shape == 1.0:
        return 1.0 / gamma
    log_gamma = math.log(gamma)
    odds = math.expm1(-log_gamma)  # 1 / gamma - 1
    if shape == 0.0:  # (1 / gamma - 1) / ln(1 / gamma)
        return odds / -log_gamma
    return shape * odds / -math.expm1(shape * log_gamma)  # shape (1 / gamma - 1) / (1 - gamma^shape)


def halting_probability(mean: float, shape: float, tolerance: float = 1e-9) -> float:
    """The halting probability gamma of the truncated negative binomial of ``shape`` whose mean is
    ``mean`` (>= 1): bisection to a relative ``tolerance``, returning the lower end (the larger mean:
    the conservative side, as the accountant's ``PrivacyLoss.best_of_runs`` takes it)."""
    if mean <= 1.0:
        return 1.0
    if shape == 1.0:
        return 1.0 / mean
    lo, hi = 0.0, min(1.0, 2.0 * (shape + 1.0) / mean)  # mean <= 2 (shape + 1) / gamma
    while hi > lo * (1.0 + tolerance):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _mean_runs(mid, shape) < mean else (mid, hi)
    return lo


def number_of_runs(rng: np.random.Generator, mean: float, shape: float) -> int:
    """K >= 1 from the truncated negative binomial of ``shape`` with mean ``mean`` (Papernot &
    Steinke 2022, Def. 1; shape 0 is the logarithmic distribution)."""
    if mean <= 1.0:
        return 1
    gamma = halting_probability(mean, shape)
    if shape == 0.0:  # P(K = k) = (1 - gamma)^k / (k log(1 / gamma))
        return int(rng.logseries(1.0 - gamma))
    while True:  # P(K = k) ~ C(k + shape - 1, k) (1 - gamma)^k, k >= 1: the negative binomial given K >= 1
        k = int(rng.negative_binomial(shape, gamma))
        if k >= 1:
            return k


@dataclass(**PARAMETERS)
class PrivateSearch(PrivateEstimator, PrivacyParams, CountParams, ClassesParam):
    """Private choice among candidate learners (module docstring), charged as one release.

    Parameters
    ----------
    candidates : list of unfitted ``dpdist.gradient_models`` estimators, all classifiers or all
        regressors (their own epsilon/delta are replaced by the search's calibration); None: the
        default grid of the task (``PrivateSearchClassifier``, ``PrivateSearchRegressor``).
    epsilon, delta : the whole search's budget (the count's release aside).
    mean_runs : the mean number of runs (default: 2.5 per candidate).
    shape : the run count's distribution (0 logarithmic, 1 geometric, any finite value >= 0).
    validation_fraction : the share of records (by keyed hash) held for the scores.
    score_epsilon : the Laplace score's epsilon (its curve is compared with the training's, not added).
    n_records, count_epsilon : as the candidates' (a public count, or its own release).
    classes : the two labels of a classification, public (default: the candidates', else those seen in y).
    random_state : None (OS entropy) or a seed (experiments only).

    Notes
    -----
    After ``fit``: ``best_estimator_`` (the released model), ``best_index_``, ``best_params_``,
    ``validation_score_`` (noisy), ``noise_scale_``, ``runs_`` (how many runs; never released).
    """

    mechanism = "private-search"
    counted = True
    _count_of = None  # the count's release parameters name no more than its epsilon (its records' keys)
    _default_task: ClassVar[str | None] = None
    candidates: list[Any] | None = None
    mean_runs: float | None = None
    shape: float = 0.0
    validation_fraction: float = 0.1
    score_epsilon: float = 0.25
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "candidates": "no_validation",  # _check_params
        "epsilon": [Epsilon()],
        "delta": [Delta(zero=False)],
        "mean_runs": [None, AtLeast(1.0)],
        "shape": [AtLeast(0.0)],
        "validation_fraction": [Between(0.0, 0.5)],
        "score_epsilon": [Epsilon()],
        "n_records": [None, Count()],
        "count_epsilon": [Epsilon()],
        "classes": "no_validation",  # _targets
        "random_state": "no_validation",
    }

    # ------------------------------------------------------------------ parameters

    def _grid(self) -> list[Any]:
        """The declared candidates: ``candidates``, else the default grid of the task."""
        if self.candidates is None and self._default_task is not None:
            return default_candidates(self._default_task)
        return list(self.candidates or [])

    def _candidates(self) -> list[GradientModel]:
        """The candidates as the search runs them: clones at the search's budget and classes."""
        grid = self._grid()
        if not grid:
            raise ParameterError("candidates must name at least one learner")
        cands = [clone(c) for c in grid]
        for c in cands:
            if not isinstance(c, GradientModel):
                raise ParameterError(f"a candidate must be a dpdist.gradient_models estimator, got {type(c).__name__}")
        if len({is_classifier(c) for c in cands}) != 1:
            raise ParameterError("the candidates must all be classifiers or all regressors")
        for c in cands:
            c.set_params(epsilon=self.epsilon, delta=self.delta)
            if self.classes is not None and is_classifier(c):
                c.set_params(classes=self.classes)
            c.check_params()
        return cands

    def _check_params(self) -> None:
        self._candidates()

    def check_width(self, n_features: int) -> None:
        for c in self._candidates():  # every candidate may run
            c.check_width(n_features)

    @property
    def _mean(self) -> float:
        """The mean number of runs: ``mean_runs``, by default 2.5 per candidate (each candidate is then
        missed by all runs with probability about 0.1-0.2 on a grid of two)."""
        return float(self.mean_runs) if self.mean_runs is not None else 2.5 * max(1, len(self._grid()))

    def _score_loss(self, scale: float) -> PrivacyLoss:
        return PrivacyLoss.laplace(float(self.score_epsilon) / scale)

    def _curve(self, cands: list[GradientModel], n_train: int, scale: float) -> np.ndarray:
        """The search's Renyi curve: Papernot & Steinke over the largest run curve, a run's curve the
        larger of its training's and its score's (module docstring)."""
        score = rdp_curve(self._score_loss(scale).parts, ORDERS)
        runs = [
            np.maximum(rdp_curve(c.privacy_charge(n_train, noise_scale=scale).loss.parts, ORDERS), score) for c in cands
        ]
        return best_of_runs_curve(runs, self._mean, float(self.shape))

    def search_loss(self, n_train: int, scale: float) -> PrivacyLoss:
        """The loss of the search whose candidates train on ``n_train`` (public) records with every
        noise scale times ``scale``."""
        cands = self._candidates()
        return PrivacyLoss.tabulated(
            f"private search: best of ~{self._mean:g} runs of {len(cands)} candidate(s)",
            self._curve(cands, n_train, scale),
            float(self.delta),
        )

    def _noise_scale(self, cands: list[GradientModel], n_train: int) -> float:
        """The smallest common noise factor x >= 1 whose search loss meets (epsilon, delta): bisection
        on public quantities (the loss falls as x grows)."""
        ok = lambda x: curve_epsilon(self._curve(cands, n_train, x), self.delta) <= self.epsilon  # noqa: E731
        hi = 1.0
        while not ok(hi):
            hi *= 2.0
            if hi > 1e6:
                raise ParameterError("no noise scale meets the budget (too many runs for this epsilon?)")
        if hi == 1.0:
            return 1.0
        lo = hi / 2.0
        while hi - lo > 1e-3 * hi:
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        return hi

    def n_train(self, n_public: int) -> int:
        """The public count the candidates' schedules use: the training side's share of n~."""
        return max(1, int(round(n_public * (1.0 - float(self.validation_fraction)))))

    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        """What the search charges for a public count of its records (the count's release aside)."""
        assert n_public is not None
        n_train = self.n_train(n_public)
        scale = self._noise_scale(self._candidates(), n_train)
        return Charge(self.search_loss(n_train, scale), self.mechanism, {"noise_scale": scale})

    def release_params(self, n_features: int | None = None, n_public: int | None = None) -> dict[str, Any]:
        """Every parameter of a search, for the ledger's release identity."""
        params = {k: v for k, v in self.get_params(deep=False).items() if k not in ("candidates", "random_state")}
        params["classes"] = None if self.classes is None else plain_classes(self.classes)
        cands = [
            {"learner": type(c).__name__, **{k: v for k, v in c.get_params().items() if k != "random_state"}}
            for c in self._grid()
        ]
        return {**params, "candidates": cands, "n_features": n_features, "n_public": n_public}

    # ------------------------------------------------------------------ fitting

    def fit(
        self,
        X: Matrix,
        y: Any,
        accountant: Accountant | None = None,
        dataset: str | None = None,
        key: str | None = None,
        split_key: bytes | None = None,
    ) -> PrivateSearch:
        """Search privately and release the best run's model (charged to ``accountant`` first).

        ``split_key``: the validation split's secret key (default: derived from the dataset's split
        key in the ledger, or random without one).
        """
        self.check_params()
        cands = self._candidates()
        ledger = charged_to(accountant, dataset)
        X, y_fit, extra = self._targets(cands, X, y, accountant)
        self.check_width(int(X.shape[1]))  # the public width: before anything is charged
        rng = check_random_state(self.random_state)
        key = self._release_key(key)
        model = self._model_plan(int(X.shape[1]))
        n_public = self._public_count(X.shape[0], ledger, key, rng, model)
        assert n_public is not None
        charge, params = model.at(n_public)
        if split_key is None:
            split_key = (
                derive_key(ledger[0].split_key(ledger[1]), "dpdist private search")
                if ledger is not None
                else secrets.token_bytes(32)
            )
        n_train, scale = self.n_train(n_public), charge.details["noise_scale"]

        def compute() -> dict[str, Any]:
            return self._search(cands, X, y_fit, split_key, n_train, scale, rng, extra)

        out = self._release(charge, key, compute, params, ledger)
        self._set_search(out, scale, n_public)
        return self

    def _targets(
        self, cands: list[GradientModel], X: Matrix, y: Any, accountant: Accountant | None
    ) -> tuple[Matrix, np.ndarray, dict[str, Any]]:
        """(X, the targets the candidates train on, the model's public extras): a classification's
        labels coded -1/+1 by its public classes (named in the release)."""
        classifier = is_classifier(cands[0])
        X, y = self._check_data(
            X, y, accountant, accept_sparse="csr", dtype=[np.float64, np.float32], y_numeric=not classifier
        )
        if not classifier:
            return X, np.asarray(y, dtype=np.float64).ravel(), {}
        require_public_classes(cands[0].classes, is_release(self, accountant))
        check_classification_targets(y)
        classes = np.unique(y) if cands[0].classes is None else np.asarray(cands[0].classes)
        if classes.size != 2 or not np.isin(y, classes).all():
            raise ParameterError("the search's classifiers need exactly 2 classes, and y within them")
        self.classes_ = classes
        return (
            X,
            np.where(y == classes[1], 1.0, -1.0),
            {"classes": plain_classes(classes)},
        )

    def _search(
        self,
        cands: list[GradientModel],
        X: Matrix,
        y_fit: np.ndarray,
        split_key: bytes,
        n_train: int,
        scale: float,
        rng: np.random.Generator,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        """The release: K runs on the training side, each scored privately on the validation side;
        the best run's model, candidate and noisy score."""
        val = record_sides(X, y_fit, split_key, float(self.validation_fraction))
        runs = number_of_runs(rng, self._mean, float(self.shape))
        self.runs_ = runs  # the operator's own (never released)
        best: tuple[float, int, dict[str, Any]] | None = None
        for _ in range(runs):
            i = int(rng.integers(len(cands)))
            c = cands[i]
            Xc, yc = c.map_records(X[~val], y_fit[~val])  # per record: a side may be empty
            model = c.release_on(
                Xc, yc, ReleaseRun(n_train, c.privacy_charge(n_train, noise_scale=scale), rng, None, extra)
            )
            score = self._score(c, model, X[val], y_fit[val]) + rng.laplace(scale=self._score_scale(c) * scale)
            score = score if np.isfinite(score) else -np.inf  # one total order, whatever a model's margins
            if best is None or score > best[0]:
                best = (score, i, model)
        assert best is not None
        return {"model": best[2], "candidate": best[1], "validation_score": float(best[0])}

    def _score_scale(self, c: GradientModel) -> float:
        """The Laplace scale of a score: its sensitivity (1 correct prediction, or one clipped
        squared error (2 y_bound)^2) over score_epsilon."""
        sens = 1.0 if is_classifier(c) else (2.0 * float(c.get_params()["y_bound"])) ** 2
        return sens / float(self.score_epsilon)

    @staticmethod
    def _score(c: GradientModel, model: dict[str, Any], X: Matrix, y: np.ndarray) -> float:
        """The un-noised score of ``model`` on the validation side ``(X, y)``: a sum of one term per
        record, each within [0, 1] (a correct prediction) or [-(2 y_bound)^2, 0] (minus a clipped squared
        error). An empty side scores the empty sum, 0: the side's content changes the score by at most
        the sensitivity per record added or removed, whatever the side holds -- an empty side included --
        so the Laplace score's guarantee holds, and which side is empty is never an outcome of its own."""
        if X.shape[0] == 0:
            return 0.0
        est = type(c).from_release(model, **c.get_params())
        if is_classifier(c):
            return float(np.sum(np.where(est.decision_function(X) > 0, 1.0, -1.0) == y))
        y_bound = float(c.get_params()["y_bound"])
        bound = (2.0 * y_bound) ** 2
        err = (np.clip(est.predict(X), -y_bound, y_bound) - y) ** 2
        return -float(np.sum(np.where(np.isfinite(err), np.minimum(err, bound), bound)))  # each within [0, bound]

    def _set_search(self, out: dict[str, Any], scale: float, n_public: int) -> None:
        self.best_index_ = int(out["candidate"])
        best = self._grid()[self.best_index_]
        self.best_params_ = {"learner": type(best).__name__, **best.get_params()}
        self.best_estimator_ = type(best).from_release(out["model"], **best.get_params())
        self.validation_score_ = float(out["validation_score"])
        self.noise_scale_ = scale
        self.n_public_ = n_public
        self.n_features_in_ = self.best_estimator_.n_features_in_

    # ------------------------------------------------------------------ prediction

    def predict(self, X: Matrix) -> np.ndarray:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict(X)

    def decision_function(self, X: Matrix) -> np.ndarray:
        check_is_fitted(self, "best_estimator_")
        best = self.best_estimator_
        return best.decision_function(X) if is_classifier(best) else best.predict(X)

    def score(self, X: Matrix, y: Any) -> float:
        check_is_fitted(self, "best_estimator_")
        return float(self.best_estimator_.score(X, y))

    @property
    def coef_(self) -> np.ndarray:
        return self.best_estimator_.coef_

    @property
    def intercept_(self) -> float:
        return self.best_estimator_.intercept_

    def __sklearn_tags__(self):  # noqa: ANN204
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class PrivateSearchClassifier(PrivateSearch):
    """The private search over the default grid of classifiers (:func:`default_candidates`), or ``candidates``."""

    _default_task = "binary"


class PrivateSearchRegressor(PrivateSearch):
    """The private search over the default grid of regressors (:func:`default_candidates`), or ``candidates``."""

    _default_task = "regression"
