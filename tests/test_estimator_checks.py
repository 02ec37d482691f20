"""scikit-learn's own estimator checks on dpdist's estimators.

The selectors (always private: they have no non-private mode) and the non-private
configurations pass every check, and so does the private classifier with per-record clipping
(``bounds="clip"``: scikit-learn's test data is not scaled to |x_ij| <= 1, and the default
``bounds="check"`` refuses such data by design, naming the bound), with or without screening
(private RNM-Screen; exact screening for a non-private fit). The one
documented exception contradicts DP: the private regressor at epsilon = 1 on scikit-learn's
30-row regression set is too noisy for the check's R^2 threshold.

Objective perturbation (stage 2 of two-stage) is a regressor with the squared loss and a binary
classifier with the logistic loss; its two documented exceptions are noise and the public label
convention (see ``expected_failures``).

The best-subset selectors run without a ledger (``fit(X, y)``). Top-R runs as released; the
mistakes selector in its "paper" mode (the seed's unchecked procedure): its default
propose-test-release check refuses, by design, to release from scikit-learn's tiny test sets
(their optimality gaps are not stable), so the checks could not see a fitted selector.
"""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from dpdist.linear_model import DPFrankWolfeClassifier, DPFrankWolfeRegressor
from dpdist.selection import DPSIS, TwoStageSelector
from dpdist.selection.best_subset import BSSMistakesSelector, BSSTopRSelector
from dpdist.solvers.objective_perturbation import ObjectivePerturbation

ESTIMATORS = [
    DPFrankWolfeClassifier(method="fast-fw", lam=5.0, max_iter=200),
    DPFrankWolfeClassifier(method="fw", lam=5.0, max_iter=100),
    DPFrankWolfeRegressor(method="fast-fw", lam=5.0, max_iter=200),
    DPFrankWolfeClassifier(bounds="clip"),
    DPFrankWolfeRegressor(bounds="clip"),
    BSSTopRSelector(s=1, bounds="clip"),
    BSSMistakesSelector(s=1, bounds="clip", mode="paper"),
    DPFrankWolfeClassifier(
        bounds="clip", screening="rnm", screen_epsilon=0.5, screen_delta=1e-6, n_max=1000, screen_schedule=10
    ),
    DPFrankWolfeRegressor(method="fast-fw", lam=5.0, max_iter=200, screening="exact"),
    DPSIS(k=1, bounds="clip"),
    TwoStageSelector(k=1, n_blocks=2),
    ObjectivePerturbation(loss="squared", epsilon=1.0),
    ObjectivePerturbation(loss="logistic", epsilon=1.0),
]


def expected_failures(estimator) -> dict[str, str]:
    if isinstance(estimator, DPFrankWolfeRegressor) and estimator.method == "fast-dp-fw":
        return {
            "check_regressors_train": "a private fit at epsilon=1 on a 30-row set is too noisy for the "
            "check's R^2 > 0.5 threshold (its noise is the point)"
        }
    if isinstance(estimator, ObjectivePerturbation) and estimator.loss == "squared":
        return {
            name: "a private fit at epsilon=1 on a 200-row set, rows rescaled to the ball ||x|| <= sqrt(s) and "
            "theta in ||theta|| <= sqrt(s) (the mechanism's bounds), misses the check's R^2 > 0.5"
            for name in ("check_regressors_train",)
        }
    if isinstance(estimator, ObjectivePerturbation):
        return {
            "check_classifiers_one_label": "y = all ones is fitted under the public label convention {0, 1} "
            "(refusing one class would be a data-dependent refusal), and the "
            "noisy model may predict 0"
        }
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)
def test_scikit_learn_estimator_checks(estimator, check) -> None:
    check(estimator)
