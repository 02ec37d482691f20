"""Private hyperparameter selection: the best of a random number of private runs (Papernot & Steinke 2022).

``PrivateSearch`` takes a declared grid of candidate learners (``dpdist.gradient_models``
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

Privacy (ADD/REMOVE). One run is a mechanism M that picks a candidate c at random, then outputs
(model, score). Given c, adding a record to the training side changes the model's distribution
as c's training mechanism allows and the score is post-processing of the model with the
validation side fixed; adding it to the validation side leaves the model's distribution alone
and changes the score's as its Laplace mechanism allows. So at every Renyi order the run is
bounded by the larger of c's training curve and the score's curve (``PrivacyLoss.parallel``), and
the random pick by the largest over candidates (joint quasi-convexity of Renyi divergence; the
pick does not depend on the data). Releasing the best of K such runs is Papernot & Steinke's
Theorem 2 (``PrivacyLoss.best_of_runs``). x is the smallest factor (bisection on public
quantities) for which that loss meets (epsilon, delta); it is the release's charge.

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
import uuid
from typing import Any

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant as _rdp
from sklearn.base import BaseEstimator, clone
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from dpdist.data.split import derive_key, record_sides
from dpdist.data.transforms import Matrix
from dpdist.exceptions import ParameterError
from dpdist.gradient_models.base import GradientModel, Ledger, charged_to, noisy_count
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.guard import require_accountant
from dpdist.privacy.loss import ORDERS, Charge, PrivacyLoss, best_of_runs_curve, curve_epsilon, rdp_curve
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_delta, check_epsilon

__all__ = ["PrivateSearch", "default_candidates", "number_of_runs"]


def default_candidates(task: str) -> list[Any]:
    """The declared grid ``dpdist train --tune`` and ``train.tune`` search by default: select-then-train
    (the best on many rows) and DP-SGD with a small step (the best on few); ``benchmarks/utility.py``
    measures it."""
    from dpdist.gradient_models import DPSGDClassifier, DPSGDRegressor, SelectTrainClassifier, SelectTrainRegressor

    if task == "regression":
        return [SelectTrainRegressor(k=100), DPSGDRegressor(lr=0.3)]
    return [SelectTrainClassifier(k=100), DPSGDClassifier(lr=3.0)]


def number_of_runs(rng: np.random.Generator, mean: float, shape: float) -> int:
    """K >= 1 from the truncated negative binomial of ``shape`` with mean ``mean`` (Papernot &
    Steinke 2022, Def. 1; shape 0 is the logarithmic distribution)."""
    if mean <= 1.0:
        return 1
    gamma = _rdp._gamma_truncated_negative_binomial(shape, mean)  # the halting probability of Def. 1
    if shape == 0.0:  # P(K = k) = (1 - gamma)^k / (k log(1 / gamma))
        return int(rng.logseries(1.0 - gamma))
    while True:  # P(K = k) ~ C(k + shape - 1, k) (1 - gamma)^k, k >= 1: the negative binomial given K >= 1
        k = int(rng.negative_binomial(shape, gamma))
        if k >= 1:
            return k


class PrivateSearch(BaseEstimator):
    """Private choice among candidate learners (module docstring), charged as one release.

    Parameters
    ----------
    candidates : list of unfitted ``dpdist.gradient_models`` estimators, all classifiers or all
        regressors (their own epsilon/delta are replaced by the search's calibration).
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

    def __init__(
        self,
        candidates: list[Any],
        epsilon: float = 1.0,
        delta: float = 1e-6,
        mean_runs: float | None = None,
        shape: float = 0.0,
        validation_fraction: float = 0.1,
        score_epsilon: float = 0.25,
        n_records: int | None = None,
        count_epsilon: float = 0.01,
        classes: Any = None,
        random_state: RandomState = None,
    ) -> None:
        self.candidates, self.epsilon, self.delta = candidates, epsilon, delta
        self.mean_runs, self.shape, self.validation_fraction = mean_runs, shape, validation_fraction
        self.score_epsilon, self.n_records, self.count_epsilon = score_epsilon, n_records, count_epsilon
        self.classes, self.random_state = classes, random_state

    # ------------------------------------------------------------------ parameters

    def _validate(self) -> list[GradientModel]:
        check_epsilon(self.epsilon)
        check_delta(self.delta, allow_zero=False)
        check_epsilon(self.score_epsilon, "score_epsilon")
        if not self.candidates:
            raise ParameterError("candidates must name at least one learner")
        cands = [clone(c) for c in self.candidates]
        for c in cands:
            if not isinstance(c, GradientModel):
                raise ParameterError(f"a candidate must be a dpdist.gradient_models estimator, got {type(c).__name__}")
        if len({c._loss for c in cands}) != 1:
            raise ParameterError("the candidates must all be classifiers or all regressors")
        for c in cands:
            c.set_params(epsilon=self.epsilon, delta=self.delta)
            if self.classes is not None and c._loss == "logistic":
                c.set_params(classes=self.classes)
            c._validate()
        if not 0.0 < float(self.validation_fraction) < 0.5:
            raise ParameterError(f"validation_fraction must lie in (0, 0.5), got {self.validation_fraction!r}")
        if not (float(self.shape) >= 0.0 and math.isfinite(self.shape)):
            raise ParameterError(f"shape must be a finite number >= 0, got {self.shape!r}")
        if self.mean_runs is not None and not float(self.mean_runs) >= 1.0:
            raise ParameterError(f"mean_runs must be >= 1, got {self.mean_runs!r}")
        if self.n_records is None:
            check_epsilon(self.count_epsilon, "count_epsilon")
        return cands

    @property
    def _mean(self) -> float:
        """The mean number of runs: ``mean_runs``, by default 2.5 per candidate (each candidate is then
        missed by all runs with probability about 0.1-0.2 on a grid of two)."""
        return float(self.mean_runs) if self.mean_runs is not None else 2.5 * max(1, len(self.candidates))

    def _score_loss(self, scale: float) -> PrivacyLoss:
        return PrivacyLoss.laplace(float(self.score_epsilon) / scale)

    def _curve(self, cands: list[GradientModel], n_train: int, scale: float) -> np.ndarray:
        """The search's Renyi curve: Papernot & Steinke over the largest run curve, a run's curve the
        larger of its training's and its score's (module docstring)."""
        score = rdp_curve(self._score_loss(scale).parts, ORDERS)
        runs = [np.maximum(rdp_curve(c.privacy_charge(n_train, scale).loss.parts, ORDERS), score) for c in cands]
        return best_of_runs_curve(runs, self._mean, float(self.shape))

    def _loss(self, cands: list[GradientModel], n_train: int, scale: float) -> PrivacyLoss:
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

    def count_charge(self) -> Charge:
        """The public count's own release (when ``n_records`` is None)."""
        return Charge(PrivacyLoss.laplace(float(self.count_epsilon)), "count/laplace")

    def n_train(self, n_public: int) -> int:
        """The public count the candidates' schedules use: the training side's share of n~."""
        return max(1, int(round(n_public * (1.0 - float(self.validation_fraction)))))

    def privacy_charge(self, n_public: int) -> Charge:
        """What the search charges for a public count of its records (the count's release aside)."""
        cands = self._validate()
        n_train = self.n_train(n_public)
        scale = self._noise_scale(cands, n_train)
        return Charge(self._loss(cands, n_train, scale), "private-search", {"noise_scale": scale})

    def release_params(self, n_features: int, n_public: int) -> dict[str, Any]:
        """Every parameter of a search, for the ledger's release identity."""
        params = {k: v for k, v in self.get_params(deep=False).items() if k not in ("candidates", "random_state")}
        params["classes"] = (
            None if self.classes is None else [c.item() if hasattr(c, "item") else c for c in self.classes]
        )
        cands = [
            {"learner": type(c).__name__, **{k: v for k, v in c.get_params().items() if k != "random_state"}}
            for c in self.candidates
        ]
        return {**params, "candidates": cands, "n_features": int(n_features), "n_public": int(n_public)}

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
        cands = self._validate()
        ledger = charged_to(accountant, dataset)
        X, y_fit, extra = self._targets(cands, X, y, ledger)
        if ledger is None:
            require_accountant(self)
        rng = check_random_state(self.random_state)
        key = key or f"search-{uuid.uuid4().hex}"
        n_public = self._public_count(cands[0], X, ledger, key, rng)
        charge = self.privacy_charge(n_public)
        if split_key is None:
            split_key = (
                derive_key(ledger[0].split_key(ledger[1]), "dpdist private search")
                if ledger is not None
                else secrets.token_bytes(32)
            )
        n_train, scale = self.n_train(n_public), charge.details["noise_scale"]

        def compute() -> dict[str, Any]:
            return self._search(cands, X, y_fit, split_key, n_train, scale, rng, extra)

        if ledger is None:
            out = compute()
            self.release_ = None
        else:
            out = ledger[0].release(ledger[1], charge, key, compute, self.release_params(X.shape[1], n_public))
            self.release_ = {"key": key, "epsilon": charge.epsilon, "delta": charge.delta}
        self.release_record_ = out  # the release as recorded (public)
        self._set_released(out, scale, n_public)
        return self

    def _targets(
        self, cands: list[GradientModel], X: Matrix, y: Any, ledger: Ledger | None
    ) -> tuple[Matrix, np.ndarray, dict[str, Any]]:
        """(X, the targets the candidates train on, the model's public extras): a classification's
        labels coded -1/+1 by its public classes (named in the release)."""
        classifier = cands[0]._loss == "logistic"
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32], y_numeric=not classifier)
        if classifier and ledger is not None and cands[0].classes is None:
            raise ParameterError(
                "classes are public schema: pass classes=[negative, positive] (the labels declared "
                "for the data); read from y, the released model's classes would be a function of it"
            )
        if not classifier:
            return X, np.asarray(y, dtype=np.float64).ravel(), {}
        check_classification_targets(y)
        classes = np.unique(y) if cands[0].classes is None else np.asarray(cands[0].classes)
        if classes.size != 2 or not np.isin(y, classes).all():
            raise ParameterError("the search's classifiers need exactly 2 classes, and y within them")
        self.classes_ = classes
        return (
            X,
            np.where(y == classes[1], 1.0, -1.0),
            {"classes": [c.item() if hasattr(c, "item") else c for c in classes]},
        )

    def _public_count(
        self, first: GradientModel, X: Matrix, ledger: Ledger | None, key: str, rng: np.random.Generator
    ) -> int:
        """n~: ``n_records``, or a Laplace count of the rows (released first when charged)."""
        if self.n_records is not None:
            return int(self.n_records)
        Xp = first._prepare(X)  # the search's public count is of these rows (the preprocessing is per record)
        compute_n = lambda: noisy_count(Xp.shape[0], float(self.count_epsilon), rng)  # noqa: E731
        if ledger is None:
            return int(compute_n())
        accountant, dataset = ledger
        count = self.count_charge()
        return int(accountant.release(dataset, count, f"{key}/count", compute_n, {"count_epsilon": self.count_epsilon}))

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
            Xc, yc = c._prepare(X)[~val], c._target(y_fit[~val])  # per record: a side may be empty
            model = c._released(Xc, yc, n_train, c.privacy_charge(n_train, scale), rng, None, extra)
            score = self._score(c, model, X[val], y_fit[val]) + rng.laplace(scale=self._score_scale(c) * scale)
            score = score if np.isfinite(score) else -np.inf  # one total order, whatever a model's margins
            if best is None or score > best[0]:
                best = (score, i, model)
        assert best is not None
        return {"model": best[2], "candidate": best[1], "validation_score": float(best[0])}

    def _score_scale(self, c: GradientModel) -> float:
        """The Laplace scale of a score: its sensitivity (1 correct prediction, or one clipped
        squared error (2 y_bound)^2) over score_epsilon."""
        sens = 1.0 if c._loss == "logistic" else (2.0 * float(c.y_bound)) ** 2
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
        margins = est._margins(X)
        if c._loss == "logistic":
            return float(np.sum(np.where(margins > 0, 1.0, -1.0) == y))
        bound = (2.0 * float(c.y_bound)) ** 2
        err = (np.clip(margins, -c.y_bound, c.y_bound) - y) ** 2
        return -float(
            np.sum(np.where(np.isfinite(err), np.minimum(err, bound), bound))
        )  # each record within [0, bound]

    def _set_released(self, out: dict[str, Any], scale: float, n_public: int) -> None:
        self.best_index_ = int(out["candidate"])
        best = self.candidates[self.best_index_]
        self.best_params_ = {"learner": type(best).__name__, **best.get_params()}
        self.best_estimator_ = type(best).from_release(out["model"], **best.get_params())
        self.validation_score_ = float(out["validation_score"])
        self.noise_scale_, self.n_public_ = scale, n_public
        self.n_features_in_ = self.best_estimator_.n_features_in_

    # ------------------------------------------------------------------ prediction

    def predict(self, X: Matrix) -> np.ndarray:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_.predict(X)

    def decision_function(self, X: Matrix) -> np.ndarray:
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_._margins(X)

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
